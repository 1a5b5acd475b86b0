"""Product reduction (torch.prod) over a short middle dimension of positive values."""

import torch
from torch import nn

d0 = 4096
d1 = 12
d2 = 8192

SIZES = {
    "small": {"d0": 5, "d1": 12, "d2": 37},
    "full": {"d0": 4096, "d1": 12, "d2": 8192},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.prod(x, dim=1)


def get_inputs():
    return [torch.rand(d0, d1, d2) + 0.5]


def get_init_inputs():
    return []
