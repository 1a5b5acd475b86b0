"""Pointwise (1x1) convolution mixing channels, with bias."""

import torch
from torch import nn

batch_size = 64
in_channels = 256
out_channels = 512
height = 56
width = 56

SIZES = {
    "small": {"batch_size": 2, "in_channels": 9, "out_channels": 13, "height": 17, "width": 15},
    "full": {"batch_size": 64, "in_channels": 256, "out_channels": 512, "height": 56, "width": 56},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
