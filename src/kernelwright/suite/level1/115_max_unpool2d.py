"""Max pooling 2x2 with indices followed by MaxUnpool2d, as in SegNet's decoder."""

import torch
from torch import nn

batch_size = 256
channels = 1024
height = 32
width = 32

SIZES = {
    "small": {"batch_size": 2, "channels": 3, "height": 10, "width": 14},
    "full": {"batch_size": 256, "channels": 1024, "height": 32, "width": 32},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(2, stride=2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2, stride=2)

    def forward(self, x):
        y, indices = self.pool(x)
        return self.unpool(torch.relu(y), indices)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
