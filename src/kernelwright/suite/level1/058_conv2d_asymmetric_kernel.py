"""Convolution with an asymmetric 3x7 kernel and padding (1, 3) on a wide image."""

import torch
from torch import nn

batch_size = 32
in_channels = 64
out_channels = 128
height = 64
width = 160

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 11, "width": 23},
    "full": {"batch_size": 32, "in_channels": 64, "out_channels": 128, "height": 64, "width": 160},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=(3, 7), padding=(1, 3))

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
