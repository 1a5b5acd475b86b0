"""Clamp every element into the range [-1.0, 1.5]."""

import torch
from torch import nn

batch_size = 14336
dim = 32768

SIZES = {
    "small": {"batch_size": 39, "dim": 25},
    "full": {"batch_size": 14336, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self, min_val, max_val):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        return torch.clamp(x, min=self.min_val, max=self.max_val)


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0]


def get_init_inputs():
    return [-1.0, 1.5]
