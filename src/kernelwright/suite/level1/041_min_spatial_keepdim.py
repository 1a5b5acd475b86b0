"""Min reduction over the spatial dims (2, 3) of an NCHW tensor, keeping dims."""

import torch
from torch import nn

batch_size = 112
channels = 256
height = 128
width = 128

SIZES = {
    "small": {"batch_size": 2, "channels": 7, "height": 13, "width": 15},
    "full": {"batch_size": 112, "channels": 256, "height": 128, "width": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amin(x, dim=(2, 3), keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
