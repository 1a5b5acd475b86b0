"""Hyperbolic tangent applied elementwise."""

import torch
from torch import nn

batch_size = 28672
dim = 16384

SIZES = {
    "small": {"batch_size": 17, "dim": 57},
    "full": {"batch_size": 28672, "dim": 16384},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0]


def get_init_inputs():
    return []
