"""Linear -> RMSNorm written out: x * rsqrt(mean(x ** 2) + eps) * weight, on (batch, seq, dim)."""

import torch
from torch import nn

batch_size = 4
seq_len = 1024
in_features = 4096
out_features = 4096

SIZES = {
    "small": {"batch_size": 2, "seq_len": 5, "in_features": 19, "out_features": 23},
    "full": {"batch_size": 4, "seq_len": 1024, "in_features": 4096, "out_features": 4096},
}


class Model(nn.Module):
    def __init__(self, in_features, out_features, eps):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(torch.rand(out_features) + 0.5)
        self.eps = eps

    def forward(self, x):
        x = self.fc(x)
        ms = torch.mean(x**2, dim=-1, keepdim=True)
        return x * torch.rsqrt(ms + self.eps) * self.weight


def get_inputs():
    return [torch.randn(batch_size, seq_len, in_features)]


def get_init_inputs():
    return [in_features, out_features, 1e-6]
