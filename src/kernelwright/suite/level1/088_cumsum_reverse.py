"""Reversed (suffix) cumulative sum along dim 1, written as flip -> cumsum -> flip."""

import torch
from torch import nn

rows = 28672
cols = 16384

SIZES = {
    "small": {"rows": 21, "cols": 97},
    "full": {"rows": 28672, "cols": 16384},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.cumsum(x.flip(1), dim=1).flip(1)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
