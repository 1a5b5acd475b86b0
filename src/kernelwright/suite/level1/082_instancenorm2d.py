"""nn.InstanceNorm2d with affine weights: per-sample, per-channel statistics over H and W."""

import torch
from torch import nn

batch_size = 32
channels = 128
height = 256
width = 256

SIZES = {
    "small": {"batch_size": 2, "channels": 5, "height": 13, "width": 11},
    "full": {"batch_size": 32, "channels": 128, "height": 256, "width": 256},
}


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.norm = nn.InstanceNorm2d(channels, affine=True)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 2.0 + 1.0]


def get_init_inputs():
    return [channels]
