"""Elementwise division of two same-shaped tensors (positive divisor)."""

import torch
from torch import nn

batch_size = 14336
dim = 32768

SIZES = {
    "small": {"batch_size": 33, "dim": 41},
    "full": {"batch_size": 14336, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return x / y


def get_inputs():
    return [torch.randn(batch_size, dim), torch.rand(batch_size, dim) + 0.5]


def get_init_inputs():
    return []
