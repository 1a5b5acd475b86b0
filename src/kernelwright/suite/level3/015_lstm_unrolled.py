"""LSTM written out and unrolled over time (gate Linears, slicing, sigmoid/tanh), Linear head."""

import torch
from torch import nn

batch_size = 1024
seq_len = 8
input_size = 512
hidden = 1024
num_classes = 10

SIZES = {
    "small": {"batch_size": 3, "seq_len": 5, "input_size": 7, "hidden": 11},
    "full": {"batch_size": 1024, "seq_len": 8, "input_size": 512, "hidden": 1024},
}


class Model(nn.Module):
    def __init__(self, input_size, hidden, num_classes):
        super().__init__()
        self.hidden = hidden
        self.ih = nn.Linear(input_size, 4 * hidden)
        self.hh = nn.Linear(hidden, 4 * hidden, bias=False)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x, h, c):
        n = self.hidden
        for t in range(x.shape[1]):
            gates = self.ih(x[:, t, :]) + self.hh(h)
            i = torch.sigmoid(gates[:, :n])
            f = torch.sigmoid(gates[:, n : 2 * n])
            g = torch.tanh(gates[:, 2 * n : 3 * n])
            o = torch.sigmoid(gates[:, 3 * n :])
            c = f * c + i * g
            h = o * torch.tanh(c)
        return self.head(h)


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, input_size),
        torch.randn(batch_size, hidden),
        torch.randn(batch_size, hidden),
    ]


def get_init_inputs():
    return [input_size, hidden, num_classes]
