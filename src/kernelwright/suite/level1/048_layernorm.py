"""nn.LayerNorm over the hidden dimension of a (batch, seq, hidden) tensor, with affine."""

import torch
from torch import nn

batch_size = 56
seq_len = 2048
hidden = 4096

SIZES = {
    "small": {"batch_size": 3, "seq_len": 11, "hidden": 37},
    "full": {"batch_size": 56, "seq_len": 2048, "hidden": 4096},
}


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden) * 2.0 + 0.5]


def get_init_inputs():
    return [hidden]
