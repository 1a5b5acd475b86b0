"""1-D max pooling over a long sequence: window 4, stride 2, padding 1."""

import torch
from torch import nn

batch_size = 64
channels = 256
length = 16384

SIZES = {
    "small": {"batch_size": 2, "channels": 5, "length": 37},
    "full": {"batch_size": 64, "channels": 256, "length": 16384},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=4, stride=2, padding=1)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
