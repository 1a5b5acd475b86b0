"""Matrix product with odd (prime-like) dimensions that fit no tile size."""

import torch
from torch import nn

M = 3001
K = 4093
N = 2999

SIZES = {
    "small": {"M": 31, "K": 47, "N": 23},
    "full": {"M": 3001, "K": 4093, "N": 2999},
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
