"""Constant F.pad -> unpadded Conv2d with a 3x5 kernel -> ReLU -> MaxPool2d 2x2."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 32
in_channels = 64
out_channels = 128
height = 112
width = 112

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 4, "height": 13, "width": 14},
    "full": {
        "batch_size": 32,
        "in_channels": 64,
        "out_channels": 128,
        "height": 112,
        "width": 112,
    },
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=(3, 5))
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        x = F.pad(x, (2, 2, 1, 1))
        return self.pool(torch.relu(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
