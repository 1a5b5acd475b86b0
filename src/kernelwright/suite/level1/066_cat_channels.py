"""Concatenate three NCHW tensors with different channel counts along dim 1."""

import torch
from torch import nn

batch_size = 128
c1 = 64
c2 = 128
c3 = 32
height = 128
width = 128

SIZES = {
    "small": {"batch_size": 2, "c1": 3, "c2": 5, "c3": 2, "height": 13, "width": 11},
    "full": {"batch_size": 128, "c1": 64, "c2": 128, "c3": 32, "height": 128, "width": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b, c):
        return torch.cat([a, b, c], dim=1)


def get_inputs():
    return [
        torch.randn(batch_size, c1, height, width),
        torch.randn(batch_size, c2, height, width),
        torch.randn(batch_size, c3, height, width),
    ]


def get_init_inputs():
    return []
