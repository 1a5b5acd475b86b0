"""Two-layer nn.GRU over a (seq, batch, feature) sequence with an initial state; output and h_n."""

import torch
from torch import nn

seq_len = 32
batch_size = 256
input_size = 512
hidden = 1024
num_layers = 2

SIZES = {
    "small": {"seq_len": 5, "batch_size": 3, "input_size": 7, "hidden": 11},
    "full": {"seq_len": 32, "batch_size": 256, "input_size": 512, "hidden": 1024},
}


class Model(nn.Module):
    def __init__(self, input_size, hidden, num_layers):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden, num_layers=num_layers)

    def forward(self, x, h0):
        return self.gru(x, h0)


def get_inputs():
    return [
        torch.randn(seq_len, batch_size, input_size),
        torch.randn(num_layers, batch_size, hidden),
    ]


def get_init_inputs():
    return [input_size, hidden, num_layers]
