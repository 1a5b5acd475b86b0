"""Elementwise square root of positive values on a 3-D tensor."""

import torch
from torch import nn

d0 = 112
d1 = 4096
d2 = 1024

SIZES = {
    "small": {"d0": 3, "d1": 25, "d2": 39},
    "full": {"d0": 112, "d1": 4096, "d2": 1024},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sqrt(x)


def get_inputs():
    return [torch.rand(d0, d1, d2) + 0.1]


def get_init_inputs():
    return []
