"""Transposed 1-D convolution upsampling by 2: kernel 4, stride 2, padding 1, with bias."""

import torch
from torch import nn

batch_size = 64
in_channels = 256
out_channels = 128
length = 4096

SIZES = {
    "small": {"batch_size": 2, "in_channels": 7, "out_channels": 5, "length": 29},
    "full": {"batch_size": 64, "in_channels": 256, "out_channels": 128, "length": 4096},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.deconv = nn.ConvTranspose1d(
            in_channels, out_channels, kernel_size=4, stride=2, padding=1
        )

    def forward(self, x):
        return self.deconv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
