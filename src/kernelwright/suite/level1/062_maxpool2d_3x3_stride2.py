"""Max pooling with a 3x3 window, stride 2, padding 1 (ResNet stem pooling)."""

import torch
from torch import nn

batch_size = 112
channels = 256
height = 128
width = 128

SIZES = {
    "small": {"batch_size": 2, "channels": 6, "height": 19, "width": 15},
    "full": {"batch_size": 112, "channels": 256, "height": 128, "width": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
