"""Transposed 3-D convolution: 3x3x3 kernel, stride 2, padding 1, output_padding 1, no bias."""

import torch
from torch import nn

batch_size = 16
in_channels = 64
out_channels = 64
depth = 16
height = 32
width = 32

SIZES = {
    "small": {
        "batch_size": 2,
        "in_channels": 3,
        "out_channels": 4,
        "depth": 3,
        "height": 5,
        "width": 7,
    },
    "full": {
        "batch_size": 16,
        "in_channels": 64,
        "out_channels": 64,
        "depth": 16,
        "height": 32,
        "width": 32,
    },
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.deconv = nn.ConvTranspose3d(
            in_channels,
            out_channels,
            kernel_size=3,
            stride=2,
            padding=1,
            output_padding=1,
            bias=False,
        )

    def forward(self, x):
        return self.deconv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
