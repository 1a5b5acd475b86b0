"""Conv2d 3x3 -> global mean over H and W -> sigmoid, giving (batch, channels)."""

import torch
from torch import nn

batch_size = 64
in_channels = 128
out_channels = 256
height = 56
width = 56

SIZES = {
    "small": {"batch_size": 2, "in_channels": 4, "out_channels": 7, "height": 15, "width": 17},
    "full": {"batch_size": 64, "in_channels": 128, "out_channels": 256, "height": 56, "width": 56},
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x):
        x = self.conv(x)
        x = x.mean(dim=(2, 3))
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
