"""Pointwise (1x1) Conv2d without bias -> BatchNorm2d (eval) -> ReLU6 via hardtanh(0, 6)."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 64
in_channels = 256
out_channels = 512
height = 56
width = 56

SIZES = {
    "small": {"batch_size": 2, "in_channels": 7, "out_channels": 11, "height": 15, "width": 15},
    "full": {"batch_size": 64, "in_channels": 256, "out_channels": 512, "height": 56, "width": 56},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return F.hardtanh(self.bn(self.conv(x)), 0.0, 6.0)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
