"""Conv2d 3x3 -> MaxPool2d 2x2 -> global max over H, W -> add a learned bias, giving (B, C)."""

import torch
from torch import nn

batch_size = 64
in_channels = 64
out_channels = 128
height = 112
width = 112

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 14, "width": 17},
    "full": {
        "batch_size": 64,
        "in_channels": 64,
        "out_channels": 128,
        "height": 112,
        "width": 112,
    },
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.bias = nn.Parameter(torch.randn(out_channels) * 0.1)

    def forward(self, x):
        x = self.pool(self.conv(x))
        return torch.amax(x, dim=(2, 3)) + self.bias


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
