"""Elementwise minimum of a matrix and a per-row threshold column of shape (batch, 1)."""

import torch
from torch import nn

batch_size = 14336
dim = 32768

SIZES = {
    "small": {"batch_size": 31, "dim": 49},
    "full": {"batch_size": 14336, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, t):
        return torch.minimum(x, t)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, 1)]


def get_init_inputs():
    return []
