"""Max reduction over the leading dimension of a matrix (column-wise max, values only)."""

import torch
from torch import nn

rows = 32768
cols = 14336

SIZES = {
    "small": {"rows": 57, "cols": 33},
    "full": {"rows": 32768, "cols": 14336},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amax(x, dim=0)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
