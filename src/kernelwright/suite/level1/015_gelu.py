"""Exact (erf-based) GELU activation applied elementwise."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 7168
dim = 65536

SIZES = {
    "small": {"batch_size": 29, "dim": 51},
    "full": {"batch_size": 7168, "dim": 65536},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0]


def get_init_inputs():
    return []
