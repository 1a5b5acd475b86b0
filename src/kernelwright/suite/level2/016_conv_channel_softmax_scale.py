"""Conv2d 3x3 -> softmax over channels (dim=1) -> multiply by a learned (C, 1, 1) scale."""

import torch
from torch import nn

batch_size = 32
in_channels = 96
out_channels = 128
height = 80
width = 80

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 9, "height": 11, "width": 13},
    "full": {"batch_size": 32, "in_channels": 96, "out_channels": 128, "height": 80, "width": 80},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)

    def forward(self, x):
        return torch.softmax(self.conv(x), dim=1) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
