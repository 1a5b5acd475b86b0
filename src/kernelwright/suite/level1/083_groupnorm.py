"""nn.GroupNorm with 32 groups over (C/32, H, W) per sample, with affine weights."""

import torch
from torch import nn

batch_size = 64
channels = 256
height = 112
width = 112
groups = 32

SIZES = {
    "small": {"batch_size": 2, "channels": 12, "height": 9, "width": 11, "groups": 4},
    "full": {"batch_size": 64, "channels": 256, "height": 112, "width": 112, "groups": 32},
}


class Model(nn.Module):
    def __init__(self, groups, channels):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 2.0 - 0.5]


def get_init_inputs():
    return [groups, channels]
