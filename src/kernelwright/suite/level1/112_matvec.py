"""Matrix-vector product y = A @ x with a 1-D vector x (torch.matmul, i.e. aten.mv)."""

import torch
from torch import nn

M = 14336
K = 32768

SIZES = {"small": {"M": 43, "K": 77}, "full": {"M": 14336, "K": 32768}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, x):
        return torch.matmul(a, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K)]


def get_init_inputs():
    return []
