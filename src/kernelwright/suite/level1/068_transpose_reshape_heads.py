"""Head regrouping: (B, S, H, D) -> transpose(1, 2) -> reshape to (B, H, S * D)."""

import torch
from torch import nn

batch_size = 56
seq_len = 2048
heads = 32
head_dim = 128

SIZES = {
    "small": {"batch_size": 2, "seq_len": 13, "heads": 3, "head_dim": 11},
    "full": {"batch_size": 56, "seq_len": 2048, "heads": 32, "head_dim": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        b, s, h, d = x.shape
        return x.transpose(1, 2).reshape(b, h, s * d)


def get_inputs():
    return [torch.randn(batch_size, seq_len, heads, head_dim)]


def get_init_inputs():
    return []
