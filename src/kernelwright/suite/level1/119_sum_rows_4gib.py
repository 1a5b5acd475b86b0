"""Sum along the rows (last dim) of a 16384 x 65536 matrix (4 GiB) to a vector."""

import torch
from torch import nn

rows = 16384
cols = 65536

# small: 190 MiB, over the software driver's 128 MiB binding.
SIZES = {
    "small": {"rows": 811, "cols": 61441},
    "full": {"rows": 16384, "cols": 65536},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
