"""3x3 convolution with dilation 2 and padding 2 (same-size output), with bias."""

import torch
from torch import nn

batch_size = 32
in_channels = 128
out_channels = 128
height = 80
width = 80

SIZES = {
    "small": {"batch_size": 2, "in_channels": 4, "out_channels": 6, "height": 19, "width": 19},
    "full": {"batch_size": 32, "in_channels": 128, "out_channels": 128, "height": 80, "width": 80},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=2, dilation=2)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
