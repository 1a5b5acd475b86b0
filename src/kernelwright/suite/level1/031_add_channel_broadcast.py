"""Add a per-channel bias of shape (1, C, 1, 1) to an NCHW tensor (broadcast add)."""

import torch
from torch import nn

batch_size = 112
channels = 256
height = 128
width = 128

SIZES = {
    "small": {"batch_size": 2, "channels": 5, "height": 11, "width": 13},
    "full": {"batch_size": 112, "channels": 256, "height": 128, "width": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        return x + bias


def get_inputs():
    return [torch.randn(batch_size, channels, height, width), torch.randn(1, channels, 1, 1)]


def get_init_inputs():
    return []
