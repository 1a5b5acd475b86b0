"""Linear -> Mish written out as x * tanh(softplus(x))."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 4096
in_features = 5120
out_features = 3072

SIZES = {
    "small": {"batch_size": 13, "in_features": 33, "out_features": 21},
    "full": {"batch_size": 4096, "in_features": 5120, "out_features": 3072},
}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.fc(x)
        return x * torch.tanh(F.softplus(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
