"""Batched matrix product torch.bmm of A (B, M, K) and B (B, K, N)."""

import torch
from torch import nn

batch_size = 128
M = 512
K = 1024
N = 512

SIZES = {
    "small": {"batch_size": 3, "M": 17, "K": 33, "N": 9},
    "full": {"batch_size": 128, "M": 512, "K": 1024, "N": 512},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch_size, M, K), torch.randn(batch_size, K, N)]


def get_init_inputs():
    return []
