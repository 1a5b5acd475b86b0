"""Matrix product with a transposed left operand: C = A.t() @ B, A stored as (K, M)."""

import torch
from torch import nn

M = 4096
K = 3072
N = 4096

SIZES = {
    "small": {"M": 33, "K": 21, "N": 19},
    "full": {"M": 4096, "K": 3072, "N": 4096},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a.t(), b)


def get_inputs():
    return [torch.randn(K, M), torch.randn(K, N)]


def get_init_inputs():
    return []
