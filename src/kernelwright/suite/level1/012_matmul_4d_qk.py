"""Batched 4-D product with a transposed operand, as in attention scores: Q @ K^T per head."""

import torch
from torch import nn

batch_size = 16
heads = 16
seq_len = 1024
head_dim = 128

SIZES = {
    "small": {"batch_size": 2, "heads": 3, "seq_len": 19, "head_dim": 7},
    "full": {"batch_size": 16, "heads": 16, "seq_len": 1024, "head_dim": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k):
        return torch.matmul(q, k.transpose(-2, -1))


def get_inputs():
    shape = (batch_size, heads, seq_len, head_dim)
    return [torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []
