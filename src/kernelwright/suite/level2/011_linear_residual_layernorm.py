"""Post-norm residual sublayer: LayerNorm(x + Dropout(Linear(x))) on (batch, seq, dim)."""

import torch
from torch import nn

batch_size = 8
seq_len = 1024
dim = 2560

SIZES = {
    "small": {"batch_size": 2, "seq_len": 7, "dim": 27},
    "full": {"batch_size": 8, "seq_len": 1024, "dim": 2560},
}


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x + self.dropout(self.fc(x)))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim]
