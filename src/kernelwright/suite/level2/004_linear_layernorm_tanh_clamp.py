"""Linear -> LayerNorm -> tanh -> clamp to [-0.8, 0.8]."""

import torch
from torch import nn

batch_size = 4096
in_features = 3072
out_features = 4096

SIZES = {
    "small": {"batch_size": 17, "in_features": 29, "out_features": 35},
    "full": {"batch_size": 4096, "in_features": 3072, "out_features": 4096},
}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x):
        x = self.norm(self.fc(x))
        return torch.clamp(torch.tanh(x), -0.8, 0.8)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
