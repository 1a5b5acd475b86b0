"""Fully connected layer y = x @ W.t() + b (nn.Linear with bias)."""

import torch
from torch import nn

batch_size = 4096
in_features = 4096
out_features = 2560

SIZES = {
    "small": {"batch_size": 21, "in_features": 37, "out_features": 29},
    "full": {"batch_size": 4096, "in_features": 4096, "out_features": 2560},
}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
