"""Mean over the middle dimension of a 3-D tensor, keeping that dim (B, R, C) -> (B, 1, C)."""

import torch
from torch import nn

batch_size = 112
reduce_dim = 4096
dim = 1024

SIZES = {
    "small": {"batch_size": 3, "reduce_dim": 45, "dim": 19},
    "full": {"batch_size": 112, "reduce_dim": 4096, "dim": 1024},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, reduce_dim, dim)]


def get_init_inputs():
    return []
