"""Batched A^T @ B (A stored as (B, K, M)) -> log_softmax down the columns (dim=1)."""

import torch
from torch import nn

batch_size = 32
M = 1024
K = 1024
N = 1024

SIZES = {
    "small": {"batch_size": 2, "M": 13, "K": 9, "N": 11},
    "full": {"batch_size": 32, "M": 1024, "K": 1024, "N": 1024},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        y = torch.matmul(a.transpose(1, 2), b)
        return torch.log_softmax(y, dim=1)


def get_inputs():
    return [torch.randn(batch_size, K, M), torch.randn(batch_size, K, N)]


def get_init_inputs():
    return []
