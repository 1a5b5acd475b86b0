"""Mean of every element of a 4096 x 262144 matrix (4 GiB) to a scalar."""

import torch
from torch import nn

rows = 4096
cols = 262144

# small: 173 MiB, over the software driver's 128 MiB binding.
SIZES = {
    "small": {"rows": 173, "cols": 262143},
    "full": {"rows": 4096, "cols": 262144},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x)


def get_inputs():
    return [torch.randn(rows, cols) + 0.25]


def get_init_inputs():
    return []
