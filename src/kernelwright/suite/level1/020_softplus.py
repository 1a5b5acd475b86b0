"""Softplus log(1 + exp(beta * x)) / beta with a custom beta and linear threshold."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 14336
dim = 32768

SIZES = {
    "small": {"batch_size": 33, "dim": 35},
    "full": {"batch_size": 14336, "dim": 32768},
}


class Model(nn.Module):
    def __init__(self, beta, threshold):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x):
        return F.softplus(x, beta=self.beta, threshold=self.threshold)


def get_inputs():
    return [torch.randn(batch_size, dim) * 4.0]


def get_init_inputs():
    return [2.0, 10.0]
