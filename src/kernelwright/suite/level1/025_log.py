"""Elementwise natural logarithm of positive values."""

import torch
from torch import nn

batch_size = 14336
dim = 32768

SIZES = {
    "small": {"batch_size": 27, "dim": 43},
    "full": {"batch_size": 14336, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log(x)


def get_inputs():
    return [torch.rand(batch_size, dim) + 0.1]


def get_init_inputs():
    return []
