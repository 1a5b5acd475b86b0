"""Elementwise power with a fractional scalar exponent, x ** 2.5, on positive values."""

import torch
from torch import nn

batch_size = 14336
dim = 32768

SIZES = {
    "small": {"batch_size": 35, "dim": 29},
    "full": {"batch_size": 14336, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self, exponent):
        super().__init__()
        self.exponent = exponent

    def forward(self, x):
        return torch.pow(x, self.exponent)


def get_inputs():
    return [torch.rand(batch_size, dim) + 0.1]


def get_init_inputs():
    return [2.5]
