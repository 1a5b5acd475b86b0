"""minGPT-style MLP sublayer: x + Dropout(proj(NewGELU(fc(LayerNorm(x))))), GELU written out."""

import math

import torch
from torch import nn

batch_size = 8
seq_len = 1024
dim = 1024

SIZES = {
    "small": {"batch_size": 2, "seq_len": 9, "dim": 13},
    "full": {"batch_size": 8, "seq_len": 1024, "dim": 1024},
}


class NewGELU(nn.Module):
    def forward(self, x):
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.act = NewGELU()
        self.c_proj = nn.Linear(4 * dim, dim)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.dropout(self.c_proj(self.act(self.c_fc(self.ln(x)))))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim]
