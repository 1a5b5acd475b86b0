"""5x5 convolution with padding 2 and no bias on a non-square image."""

import torch
from torch import nn

batch_size = 32
in_channels = 64
out_channels = 128
height = 96
width = 112

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 15, "width": 18},
    "full": {"batch_size": 32, "in_channels": 64, "out_channels": 128, "height": 96, "width": 112},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=5, padding=2, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
