"""Square matrix product C = A @ B with A, B of shape (N, N)."""

import torch
from torch import nn

N = 4096

SIZES = {"small": {"N": 33}, "full": {"N": 4096}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
