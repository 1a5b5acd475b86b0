"""Product of a lower-triangular and an upper-triangular matrix: tril(A) @ triu(B)."""

import torch
from torch import nn

N = 4096

SIZES = {"small": {"N": 37}, "full": {"N": 4096}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(torch.tril(a), torch.triu(b))


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
