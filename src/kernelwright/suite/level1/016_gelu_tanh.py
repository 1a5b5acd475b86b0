"""Tanh-approximated GELU activation on a (batch, seq, hidden) tensor."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 56
seq_len = 2048
hidden = 4096

SIZES = {
    "small": {"batch_size": 3, "seq_len": 7, "hidden": 19},
    "full": {"batch_size": 56, "seq_len": 2048, "hidden": 4096},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden) * 2.0]


def get_init_inputs():
    return []
