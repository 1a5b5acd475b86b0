"""Tall-skinny matrix product: a very tall A (M, K) times a small square-ish B (K, N)."""

import torch
from torch import nn

M = 262144
K = 384
N = 384

SIZES = {
    "small": {"M": 301, "K": 13, "N": 11},
    "full": {"M": 262144, "K": 384, "N": 384},
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
