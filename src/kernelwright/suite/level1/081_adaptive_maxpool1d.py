"""Adaptive max pooling of a sequence to 12 outputs (windows of uneven length)."""

import torch
from torch import nn

batch_size = 64
channels = 512
length = 8191

SIZES = {
    "small": {"batch_size": 2, "channels": 5, "length": 83},
    "full": {"batch_size": 64, "channels": 512, "length": 8191},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveMaxPool1d(12)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
