"""Average pooling with a 3x3 window, stride 1, padding 1 (zero padding counted)."""

import torch
from torch import nn

batch_size = 112
channels = 256
height = 128
width = 128

SIZES = {
    "small": {"batch_size": 2, "channels": 5, "height": 11, "width": 14},
    "full": {"batch_size": 112, "channels": 256, "height": 128, "width": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=3, stride=1, padding=1)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
