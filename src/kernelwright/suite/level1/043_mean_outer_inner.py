"""Mean over two non-adjacent dims (0 and 2) of a 3-D tensor: (A, B, C) -> (B,)."""

import torch
from torch import nn

d0 = 224
d1 = 2048
d2 = 1024

SIZES = {
    "small": {"d0": 5, "d1": 23, "d2": 31},
    "full": {"d0": 224, "d1": 2048, "d2": 1024},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=(0, 2))


def get_inputs():
    return [torch.randn(d0, d1, d2)]


def get_init_inputs():
    return []
