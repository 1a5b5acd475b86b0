"""Transposed 2-D convolution upsampling by 2: 4x4 kernel, stride 2, padding 1, with bias."""

import torch
from torch import nn

batch_size = 64
in_channels = 128
out_channels = 64
height = 64
width = 64

SIZES = {
    "small": {"batch_size": 2, "in_channels": 5, "out_channels": 3, "height": 9, "width": 7},
    "full": {"batch_size": 64, "in_channels": 128, "out_channels": 64, "height": 64, "width": 64},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(
            in_channels, out_channels, kernel_size=4, stride=2, padding=1
        )

    def forward(self, x):
        return self.deconv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
