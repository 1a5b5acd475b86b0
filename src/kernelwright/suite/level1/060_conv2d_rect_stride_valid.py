"""3x3 convolution with no padding, a rectangular stride (1, 2) and no bias."""

import torch
from torch import nn

batch_size = 32
in_channels = 128
out_channels = 128
height = 128
width = 256

SIZES = {
    "small": {"batch_size": 2, "in_channels": 5, "out_channels": 3, "height": 13, "width": 22},
    "full": {
        "batch_size": 32,
        "in_channels": 128,
        "out_channels": 128,
        "height": 128,
        "width": 256,
    },
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size=3, stride=(1, 2), padding=0, bias=False
        )

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
