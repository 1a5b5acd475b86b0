"""nn.RMSNorm over the hidden dimension of a (batch, seq, hidden) tensor, with a weight."""

import torch
from torch import nn

batch_size = 56
seq_len = 2048
hidden = 4096

SIZES = {
    "small": {"batch_size": 3, "seq_len": 13, "hidden": 41},
    "full": {"batch_size": 56, "seq_len": 2048, "hidden": 4096},
}


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=1e-6)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
