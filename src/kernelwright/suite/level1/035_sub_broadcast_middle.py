"""Subtract a (B, 1, D) tensor from a (B, S, D) tensor, broadcasting over the middle dim."""

import torch
from torch import nn

batch_size = 56
seq_len = 2048
dim = 4096

SIZES = {
    "small": {"batch_size": 3, "seq_len": 9, "dim": 23},
    "full": {"batch_size": 56, "seq_len": 2048, "dim": 4096},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.sub(x, y)


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim), torch.randn(batch_size, 1, dim)]


def get_init_inputs():
    return []
