"""Three-layer nn.LSTM over 1024-step sequences, batch_first; a Linear on the last step's output."""

import torch
from torch import nn

batch_size = 16
seq_len = 1024
input_size = 128
hidden = 512
num_layers = 3
num_classes = 10

SIZES = {
    "small": {"batch_size": 3, "seq_len": 23, "input_size": 7, "hidden": 9, "num_layers": 3,
              "num_classes": 5},
    "full": {"batch_size": 16, "seq_len": 1024, "input_size": 128, "hidden": 512,
             "num_layers": 3, "num_classes": 10},
}


class Model(nn.Module):
    def __init__(self, input_size, hidden, num_layers, num_classes):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden, num_layers=num_layers, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x, h0, c0):
        out, _ = self.lstm(x, (h0, c0))
        return self.fc(out[:, -1, :])


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, input_size),
        torch.randn(num_layers, batch_size, hidden),
        torch.randn(num_layers, batch_size, hidden),
    ]


def get_init_inputs():
    return [input_size, hidden, num_layers, num_classes]
