"""Conv2d 3x3 -> AvgPool2d 2x2 -> sigmoid -> sum over channels and space, giving (batch,)."""

import torch
from torch import nn

batch_size = 64
in_channels = 64
out_channels = 128
height = 112
width = 112

SIZES = {
    "small": {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 17, "width": 17},
    "full": {
        "batch_size": 64,
        "in_channels": 64,
        "out_channels": 128,
        "height": 112,
        "width": 112,
    },
}


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.AvgPool2d(2)

    def forward(self, x):
        x = torch.sigmoid(self.pool(self.conv(x)))
        return torch.sum(x, dim=(1, 2, 3))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
