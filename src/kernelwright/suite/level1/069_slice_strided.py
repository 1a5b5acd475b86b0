"""Strided slicing x[:, 3:-5, ::2] of a 3-D tensor, materialised with .contiguous()."""

import torch
from torch import nn

d0 = 112
d1 = 4096
d2 = 1024

SIZES = {
    "small": {"d0": 3, "d1": 29, "d2": 35},
    "full": {"d0": 112, "d1": 4096, "d2": 1024},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x[:, 3:-5, ::2].contiguous()


def get_inputs():
    return [torch.randn(d0, d1, d2)]


def get_init_inputs():
    return []
