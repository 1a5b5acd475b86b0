"""Matrix product with a narrow output: A (M, K) times B (K, N) where N is a few dozen columns."""

import torch
from torch import nn

M = 49152
K = 8192
N = 50

SIZES = {
    "small": {"M": 47, "K": 61, "N": 5},
    "full": {"M": 49152, "K": 8192, "N": 50},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
