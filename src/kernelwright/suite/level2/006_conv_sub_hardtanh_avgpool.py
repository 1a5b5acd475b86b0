"""Conv2d 3x3 -> subtract a constant -> hardtanh to [-1, 1] -> AvgPool2d 2x2."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 64
in_channels = 128
out_channels = 128
height = 64
width = 64

SIZES = {
    "small": {"batch_size": 2, "in_channels": 5, "out_channels": 6, "height": 14, "width": 18},
    "full": {"batch_size": 64, "in_channels": 128, "out_channels": 128, "height": 64, "width": 64},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, sub_value):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.sub_value = sub_value
        self.pool = nn.AvgPool2d(2)

    def forward(self, x):
        x = self.conv(x) - self.sub_value
        x = F.hardtanh(x, -1.0, 1.0)
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, 0.3]
