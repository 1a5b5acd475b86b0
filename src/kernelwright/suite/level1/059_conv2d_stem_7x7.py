"""Image stem: 7x7 convolution, stride 2, padding 3, from 3 input channels, no bias."""

import torch
from torch import nn

batch_size = 128
in_channels = 3
out_channels = 64
height = 224
width = 224

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 23, "width": 23},
    "full": {"batch_size": 128, "in_channels": 3, "out_channels": 64, "height": 224, "width": 224},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size=7, stride=2, padding=3, bias=False
        )

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
