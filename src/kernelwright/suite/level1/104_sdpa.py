"""F.scaled_dot_product_attention without a mask on (batch, heads, seq, head_dim) tensors."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 16
heads = 16
seq_len = 1024
head_dim = 64

SIZES = {
    "small": {"batch_size": 2, "heads": 3, "seq_len": 13, "head_dim": 8},
    "full": {"batch_size": 16, "heads": 16, "seq_len": 1024, "head_dim": 64},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    shape = (batch_size, heads, seq_len, head_dim)
    return [torch.randn(*shape), torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []
