"""x @ W.t() with a raw weight parameter -> divide by a constant -> row sum (keepdim) -> scale."""

import torch
from torch import nn

batch_size = 8192
in_features = 4096
out_features = 2048

SIZES = {
    "small": {"batch_size": 9, "in_features": 27, "out_features": 35},
    "full": {"batch_size": 8192, "in_features": 4096, "out_features": 2048},
}


class Model(nn.Module):
    def __init__(self, in_features, out_features, divisor, scale):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * in_features**-0.5)
        self.divisor = divisor
        self.scale = scale

    def forward(self, x):
        x = torch.matmul(x, self.weight.t()) / self.divisor
        return torch.sum(x, dim=1, keepdim=True) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, 2.0, 1.5]
