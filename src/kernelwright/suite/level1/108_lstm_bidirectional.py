"""Two-layer bidirectional nn.LSTM, batch_first, zero initial state; returns the output sequence."""

import torch
from torch import nn

batch_size = 128
seq_len = 64
input_size = 256
hidden = 512

SIZES = {
    "small": {"batch_size": 3, "seq_len": 5, "input_size": 7, "hidden": 6},
    "full": {"batch_size": 128, "seq_len": 64, "input_size": 256, "hidden": 512},
}


class Model(nn.Module):
    def __init__(self, input_size, hidden):
        super().__init__()
        self.lstm = nn.LSTM(
            input_size, hidden, num_layers=2, batch_first=True, bidirectional=True
        )

    def forward(self, x):
        out, _ = self.lstm(x)
        return out


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden]
