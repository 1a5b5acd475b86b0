"""Hardtanh: clip values to the asymmetric range [-0.5, 2.0]."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 14336
dim = 32768

SIZES = {
    "small": {"batch_size": 19, "dim": 61},
    "full": {"batch_size": 14336, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self, min_val, max_val):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        return F.hardtanh(x, min_val=self.min_val, max_val=self.max_val)


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0]


def get_init_inputs():
    return [-0.5, 2.0]
