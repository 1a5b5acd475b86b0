"""1-D convolution over a long sequence: kernel 5, stride 1, padding 2, with bias."""

import torch
from torch import nn

batch_size = 32
in_channels = 256
out_channels = 256
length = 8192

SIZES = {
    "small": {"batch_size": 2, "in_channels": 7, "out_channels": 9, "length": 53},
    "full": {"batch_size": 32, "in_channels": 256, "out_channels": 256, "length": 8192},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size=5, padding=2)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
