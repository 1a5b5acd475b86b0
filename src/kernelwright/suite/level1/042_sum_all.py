"""Full reduction: the sum of every element of a matrix, as a 0-d tensor."""

import torch
from torch import nn

batch_size = 14336
dim = 32768

SIZES = {
    "small": {"batch_size": 41, "dim": 47},
    "full": {"batch_size": 14336, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
