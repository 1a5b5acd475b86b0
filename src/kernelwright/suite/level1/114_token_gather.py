"""Advanced indexing with two index tensors: x[batch_idx, token_idx] picks (batch, token) rows."""

import torch
from torch import nn

batch_size = 32
seq_len = 4096
dim = 1024
picks = 458752

SIZES = {
    "small": {"batch_size": 3, "seq_len": 13, "dim": 7, "picks": 9},
    "full": {"batch_size": 32, "seq_len": 4096, "dim": 1024, "picks": 458752},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, batch_idx, token_idx):
        return x[batch_idx, token_idx]


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim), torch.randint(0, batch_size, (picks,)),
            torch.randint(-seq_len, seq_len, (picks,))]  # negative: from the end


def get_init_inputs():
    return []
