"""Maxout of two Linears (torch.maximum) -> Dropout (identity in eval) -> sigmoid."""

import torch
from torch import nn

batch_size = 4096
in_features = 4096
out_features = 2048

SIZES = {
    "small": {"batch_size": 9, "in_features": 23, "out_features": 15},
    "full": {"batch_size": 4096, "in_features": 4096, "out_features": 2048},
}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc_a = nn.Linear(in_features, out_features)
        self.fc_b = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(0.2)

    def forward(self, x):
        y = torch.maximum(self.fc_a(x), self.fc_b(x))
        return torch.sigmoid(self.dropout(y))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
