"""SwiGLU feed-forward: down(silu(gate(x)) * up(x)) with three bias-free Linears."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 2048
dim = 2048
hidden = 5632

SIZES = {
    "small": {"batch_size": 13, "dim": 19, "hidden": 29},
    "full": {"batch_size": 2048, "dim": 2048, "hidden": 5632},
}


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, hidden]
