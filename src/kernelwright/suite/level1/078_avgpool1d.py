"""1-D average pooling: window 5, stride 1, padding 2, padding excluded from the count."""

import torch
from torch import nn

batch_size = 64
channels = 256
length = 16384

SIZES = {
    "small": {"batch_size": 2, "channels": 5, "length": 41},
    "full": {"batch_size": 64, "channels": 256, "length": 16384},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size=5, stride=1, padding=2, count_include_pad=False)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
