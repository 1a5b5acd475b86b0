"""Depthwise 3x3 Conv2d without bias -> BatchNorm2d (eval) -> ReLU6 via hardtanh(0, 6)."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 64
channels = 384
height = 112
width = 112

SIZES = {
    "small": {"batch_size": 2, "channels": 9, "height": 17, "width": 17},
    "full": {"batch_size": 64, "channels": 384, "height": 112, "width": 112},
}


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(
            channels, channels, kernel_size=3, padding=1, groups=channels, bias=False
        )
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return F.hardtanh(self.bn(self.conv(x)), 0.0, 6.0)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
