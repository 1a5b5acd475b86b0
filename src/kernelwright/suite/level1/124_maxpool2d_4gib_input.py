"""Max pooling, 3x3 window, stride 2, padding 1, over a (32, 128, 512, 512) input (4 GiB)."""

import torch
from torch import nn

batch_size = 32
channels = 128
height = 512
width = 512

# small: 204 MiB of input, over the software driver's 128 MiB binding.
SIZES = {
    "small": {"batch_size": 3, "channels": 17, "height": 1023, "width": 1025},
    "full": {"batch_size": 32, "channels": 128, "height": 512, "width": 512},
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
