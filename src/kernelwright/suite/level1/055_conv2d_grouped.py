"""Grouped 3x3 convolution (4 groups), stride 1, padding 1, with bias."""

import torch
from torch import nn

batch_size = 64
in_channels = 256
out_channels = 256
height = 56
width = 56
groups = 4

SIZES = {
    "small": {"batch_size": 2, "in_channels": 12, "out_channels": 20, "height": 13, "width": 13},
    "full": {"batch_size": 64, "in_channels": 256, "out_channels": 256, "height": 56, "width": 56},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, groups=groups)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
