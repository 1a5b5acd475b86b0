"""Softmax over the channel dimension (dim=1) of an NCHW tensor (a strided softmax)."""

import torch
from torch import nn

batch_size = 112
channels = 256
height = 128
width = 128

SIZES = {
    "small": {"batch_size": 2, "channels": 19, "height": 9, "width": 11},
    "full": {"batch_size": 112, "channels": 256, "height": 128, "width": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 2.0]


def get_init_inputs():
    return []
