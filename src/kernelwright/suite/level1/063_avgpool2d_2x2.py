"""Average pooling with a 2x2 window and stride 2 (odd sizes drop the last row/column)."""

import torch
from torch import nn

batch_size = 112
channels = 256
height = 128
width = 128

SIZES = {
    "small": {"batch_size": 2, "channels": 7, "height": 15, "width": 17},
    "full": {"batch_size": 112, "channels": 256, "height": 128, "width": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
