"""Log-sigmoid activation (F.logsigmoid) applied elementwise to a 2-D tensor."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 14336
dim = 32768

SIZES = {
    "small": {"batch_size": 37, "dim": 41},
    "full": {"batch_size": 14336, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.logsigmoid(x)


def get_inputs():
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return []
