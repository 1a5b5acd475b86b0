"""Circular shift along dim 1 written with slicing and torch.cat (a hand-written roll)."""

import torch
from torch import nn

batch_size = 56
seq_len = 2048
dim = 4096
shift = 5

SIZES = {
    "small": {"batch_size": 3, "seq_len": 23, "dim": 17},
    "full": {"batch_size": 56, "seq_len": 2048, "dim": 4096},
}


class Model(nn.Module):
    def __init__(self, shift):
        super().__init__()
        self.shift = shift

    def forward(self, x):
        s = self.shift
        return torch.cat([x[:, -s:], x[:, :-s]], dim=1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [shift]
