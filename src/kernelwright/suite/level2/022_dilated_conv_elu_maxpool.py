"""Dilated Conv2d 3x3 (dilation 2) -> ELU -> MaxPool2d 3x3 stride 2 padding 1."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 32
in_channels = 96
out_channels = 128
height = 96
width = 96

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 19, "width": 19},
    "full": {"batch_size": 32, "in_channels": 96, "out_channels": 128, "height": 96, "width": 96},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=2, dilation=2)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.pool(F.elu(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
