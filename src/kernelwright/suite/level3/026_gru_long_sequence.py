"""Two-layer nn.GRU over 512-step (seq, batch, feature) sequences, zero initial state."""

import torch
from torch import nn

seq_len = 512
batch_size = 64
input_size = 256
hidden = 384
num_layers = 2

SIZES = {
    "small": {"seq_len": 29, "batch_size": 5, "input_size": 7, "hidden": 11, "num_layers": 2},
    "full": {"seq_len": 512, "batch_size": 64, "input_size": 256, "hidden": 384,
             "num_layers": 2},
}


class Model(nn.Module):
    def __init__(self, input_size, hidden, num_layers):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden, num_layers=num_layers)

    def forward(self, x):
        return self.gru(x)


def get_inputs():
    return [torch.randn(seq_len, batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden, num_layers]
