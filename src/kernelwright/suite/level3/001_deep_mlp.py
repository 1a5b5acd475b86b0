"""Deep MLP: eight Linear + ReLU hidden layers of equal width, then a Linear classifier."""

import torch
from torch import nn

batch_size = 2048
in_features = 1024
hidden = 2048
out_features = 1000
depth = 8

SIZES = {
    "small": {"batch_size": 5, "in_features": 19, "hidden": 23, "out_features": 7},
    "full": {"batch_size": 2048, "in_features": 1024, "hidden": 2048, "out_features": 1000},
}


class Model(nn.Module):
    def __init__(self, in_features, hidden, out_features, depth):
        super().__init__()
        layers = []
        width = in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden, out_features, depth]
