"""3x3 convolution with stride 2 and padding 1 (spatial downsampling), with bias."""

import torch
from torch import nn

batch_size = 64
in_channels = 128
out_channels = 256
height = 112
width = 112

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 6, "height": 21, "width": 21},
    "full": {
        "batch_size": 64,
        "in_channels": 128,
        "out_channels": 256,
        "height": 112,
        "width": 112,
    },
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
