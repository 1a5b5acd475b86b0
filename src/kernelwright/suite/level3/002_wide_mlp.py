"""Wide MLP: two very wide Linear -> ReLU -> Dropout hidden layers, then a Linear head."""

import torch
from torch import nn

batch_size = 512
in_features = 2048
hidden = 8192
out_features = 1024

SIZES = {
    "small": {"batch_size": 7, "in_features": 21, "hidden": 45, "out_features": 11},
    "full": {"batch_size": 512, "in_features": 2048, "hidden": 8192, "out_features": 1024},
}


class Model(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, out_features),
        )

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden, out_features]
