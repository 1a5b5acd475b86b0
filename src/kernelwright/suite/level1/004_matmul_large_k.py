"""Matrix product with a long reduction: small M and N, very large K."""

import torch
from torch import nn

M = 512
K = 131072
N = 512

SIZES = {
    "small": {"M": 9, "K": 513, "N": 7},
    "full": {"M": 512, "K": 131072, "N": 512},
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
