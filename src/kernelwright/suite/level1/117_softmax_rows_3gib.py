"""Softmax along rows of 24576 over a 32768 x 24576 matrix (3 GiB)."""

import torch
from torch import nn

rows = 32768
cols = 24576

# small: 187 MiB, over the software driver's 128 MiB binding.
SIZES = {
    "small": {"rows": 1999, "cols": 24575},
    "full": {"rows": 32768, "cols": 24576},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(rows, cols) * 3.0]


def get_init_inputs():
    return []
