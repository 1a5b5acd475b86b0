"""Rectangular matrix product C = A @ B with A (M, K) and B (K, N)."""

import torch
from torch import nn

M = 8192
K = 2048
N = 4096

SIZES = {
    "small": {"M": 45, "K": 19, "N": 37},
    "full": {"M": 8192, "K": 2048, "N": 4096},
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
