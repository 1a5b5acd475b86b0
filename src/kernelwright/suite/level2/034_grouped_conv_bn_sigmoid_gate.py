"""Grouped Conv2d 3x3 (8 groups) -> BatchNorm2d (eval) -> sigmoid -> gate the input by it."""

import torch
from torch import nn

batch_size = 64
channels = 256
height = 80
width = 80
groups = 8

SIZES = {
    "small": {"batch_size": 2, "channels": 24, "height": 13, "width": 13},
    "full": {"batch_size": 64, "channels": 256, "height": 80, "width": 80},
}


class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=groups)
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.sigmoid(self.bn(self.conv(x))) * x


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, groups]
