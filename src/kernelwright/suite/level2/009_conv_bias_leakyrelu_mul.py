"""Bias-free Conv2d -> add a learned per-channel bias -> LeakyReLU(0.2) -> per-channel scale."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 32
in_channels = 128
out_channels = 192
height = 64
width = 64

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 7, "height": 13, "width": 11},
    "full": {"batch_size": 32, "in_channels": 128, "out_channels": 192, "height": 64, "width": 64},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.multiplier = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)

    def forward(self, x):
        x = self.conv(x) + self.bias
        x = F.leaky_relu(x, negative_slope=0.2)
        return x * self.multiplier


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
