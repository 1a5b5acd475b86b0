"""Inclusive prefix sum (torch.cumsum) along the rows of a 32768 x 32768 matrix (4 GiB)."""

import torch
from torch import nn

rows = 32768
cols = 32768

# small: 191 MiB, over the software driver's 128 MiB binding.
SIZES = {
    "small": {"rows": 1001, "cols": 49999},
    "full": {"rows": 32768, "cols": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.cumsum(x, dim=1)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
