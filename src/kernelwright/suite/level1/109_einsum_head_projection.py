"""torch.einsum("bnd,hde->bhne"): per-head projection of a token sequence with a weight tensor."""

import torch
from torch import nn

batch_size = 32
tokens = 1024
dim = 1024
heads = 16
head_dim = 64

SIZES = {
    "small": {"batch_size": 2, "tokens": 7, "dim": 13, "heads": 3, "head_dim": 5},
    "full": {"batch_size": 32, "tokens": 1024, "dim": 1024, "heads": 16, "head_dim": 64},
}


class Model(nn.Module):
    def __init__(self, dim, heads, head_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(heads, dim, head_dim) * dim**-0.5)

    def forward(self, x):
        return torch.einsum("bnd,hde->bhne", x, self.weight)


def get_inputs():
    return [torch.randn(batch_size, tokens, dim)]


def get_init_inputs():
    return [dim, heads, head_dim]
