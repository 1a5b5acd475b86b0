"""Batched matrix product with a shared right operand: (B, M, K) @ (K, N) -> (B, M, N)."""

import torch
from torch import nn

batch_size = 64
M = 512
K = 1024
N = 1024

SIZES = {
    "small": {"batch_size": 3, "M": 11, "K": 17, "N": 13},
    "full": {"batch_size": 64, "M": 512, "K": 1024, "N": 1024},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(batch_size, M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
