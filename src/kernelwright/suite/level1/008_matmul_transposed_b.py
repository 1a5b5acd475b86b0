"""Matrix product with a transposed right operand: C = A @ B.t(), B stored as (N, K)."""

import torch
from torch import nn

M = 4096
K = 2048
N = 6144

SIZES = {
    "small": {"M": 29, "K": 35, "N": 23},
    "full": {"M": 4096, "K": 2048, "N": 6144},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b.t())


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
