"""Attention core: bmm(Q, K^T) -> scale -> softmax -> bmm with V, over (batch*heads) slices."""

import torch
from torch import nn

batch_heads = 256
seq_len = 1024
head_dim = 64

SIZES = {
    "small": {"batch_heads": 3, "seq_len": 11, "head_dim": 7},
    "full": {"batch_heads": 256, "seq_len": 1024, "head_dim": 64},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        scale = q.shape[-1] ** -0.5
        scores = torch.bmm(q, k.transpose(1, 2)) * scale
        return torch.bmm(torch.softmax(scores, dim=-1), v)


def get_inputs():
    shape = (batch_heads, seq_len, head_dim)
    return [torch.randn(*shape), torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []
