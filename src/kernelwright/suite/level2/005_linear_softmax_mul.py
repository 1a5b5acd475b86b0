"""Linear -> softmax over features -> multiply by a learned per-feature weight."""

import torch
from torch import nn

batch_size = 4096
in_features = 2048
out_features = 8192

SIZES = {
    "small": {"batch_size": 13, "in_features": 21, "out_features": 27},
    "full": {"batch_size": 4096, "in_features": 2048, "out_features": 8192},
}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=1) * self.weight


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
