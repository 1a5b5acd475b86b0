"""3-D average pooling on a volume: 2x2x2 window, stride 2."""

import torch
from torch import nn

batch_size = 16
channels = 32
depth = 32
height = 128
width = 128

SIZES = {
    "small": {"batch_size": 2, "channels": 3, "depth": 6, "height": 10, "width": 14},
    "full": {"batch_size": 16, "channels": 32, "depth": 32, "height": 128, "width": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool3d(kernel_size=2, stride=2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return []
