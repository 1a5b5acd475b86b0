"""Multiply each row of a matrix by a shared vector of shape (dim,) (broadcast mul)."""

import torch
from torch import nn

batch_size = 14336
dim = 32768

SIZES = {
    "small": {"batch_size": 29, "dim": 53},
    "full": {"batch_size": 14336, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        return torch.mul(x, w)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(dim)]


def get_init_inputs():
    return []
