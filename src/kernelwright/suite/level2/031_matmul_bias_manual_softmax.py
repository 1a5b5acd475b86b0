"""x @ W.t() + b with raw parameters -> softmax written out (amax, sub, exp, sum, div)."""

import torch
from torch import nn

batch_size = 4096
in_features = 4096
out_features = 3072

SIZES = {
    "small": {"batch_size": 11, "in_features": 29, "out_features": 19},
    "full": {"batch_size": 4096, "in_features": 4096, "out_features": 3072},
}


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * in_features**-0.5)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        y = torch.matmul(x, self.weight.t()) + self.bias
        y = torch.exp(y - torch.amax(y, dim=1, keepdim=True))
        return y / torch.sum(y, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, in_features) * 2.0]


def get_init_inputs():
    return [in_features, out_features]
