"""Matrix product C = A @ B with float16 inputs and a float16 result."""

import torch
from torch import nn

M = 8192
K = 4096
N = 8192

SIZES = {"small": {"M": 33, "K": 45, "N": 29}, "full": {"M": 8192, "K": 4096, "N": 8192}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K).half(), torch.randn(K, N).half()]


def get_init_inputs():
    return []
