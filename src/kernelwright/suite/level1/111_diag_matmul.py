"""Row scaling written as a dense product with a diagonal matrix: torch.diag(d) @ B."""

import torch
from torch import nn

N = 4096
M = 4096

SIZES = {"small": {"N": 13, "M": 21}, "full": {"N": 4096, "M": 4096}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, d, b):
        return torch.diag(d) @ b


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
