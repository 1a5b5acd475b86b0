"""Depthwise 3x3 convolution (groups == channels), stride 1, padding 1, with bias."""

import torch
from torch import nn

batch_size = 64
channels = 512
height = 112
width = 112

SIZES = {
    "small": {"batch_size": 2, "channels": 7, "height": 17, "width": 17},
    "full": {"batch_size": 64, "channels": 512, "height": 112, "width": 112},
}


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
