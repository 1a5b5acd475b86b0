"""3-D convolution on a volume: 3x3x3 kernel, stride 1, padding 1, with bias."""

import torch
from torch import nn

batch_size = 8
in_channels = 32
out_channels = 64
depth = 32
height = 64
width = 64

SIZES = {
    "small": {
        "batch_size": 2,
        "in_channels": 3,
        "out_channels": 5,
        "depth": 5,
        "height": 9,
        "width": 11,
    },
    "full": {
        "batch_size": 8,
        "in_channels": 32,
        "out_channels": 64,
        "depth": 32,
        "height": 64,
        "width": 64,
    },
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
