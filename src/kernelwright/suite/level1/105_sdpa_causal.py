"""Causal F.scaled_dot_product_attention (is_causal=True) on (batch, heads, seq, head_dim)."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 8
heads = 12
seq_len = 2048
head_dim = 64

SIZES = {
    "small": {"batch_size": 2, "heads": 2, "seq_len": 19, "head_dim": 12},
    "full": {"batch_size": 8, "heads": 12, "seq_len": 2048, "head_dim": 64},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    shape = (batch_size, heads, seq_len, head_dim)
    return [torch.randn(*shape), torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []
