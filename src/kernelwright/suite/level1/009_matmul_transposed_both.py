"""Matrix product with both operands transposed: C = A.t() @ B.t(), A (K, M), B (N, K)."""

import torch
from torch import nn

M = 3072
K = 4096
N = 4096

SIZES = {
    "small": {"M": 19, "K": 27, "N": 31},
    "full": {"M": 3072, "K": 4096, "N": 4096},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a.t(), b.t())


def get_inputs():
    return [torch.randn(K, M), torch.randn(N, K)]


def get_init_inputs():
    return []
