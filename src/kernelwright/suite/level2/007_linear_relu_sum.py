"""Linear -> ReLU -> sum over features (keepdim), giving (batch, 1)."""

import torch
from torch import nn

batch_size = 8192
in_features = 4096
out_features = 2048

SIZES = {
    "small": {"batch_size": 23, "in_features": 31, "out_features": 19},
    "full": {"batch_size": 8192, "in_features": 4096, "out_features": 2048},
}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x)).sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
