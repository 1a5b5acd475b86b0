"""Matrix product of (32768, 1024) by (1024, 32768): a 4 GiB output from 128 MiB operands."""

import torch
from torch import nn

M = 32768
K = 1024
N = 32768

# small: a 146 MiB output, over the software driver's 128 MiB binding.
SIZES = {
    "small": {"M": 6007, "K": 17, "N": 6389},
    "full": {"M": 32768, "K": 1024, "N": 32768},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
