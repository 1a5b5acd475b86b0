"""torch.bmm -> leaky select with torch.where(y > 0, y, 0.1 * y) -> mean over the last dim."""

import torch
from torch import nn

batch_size = 128
M = 512
K = 1024
N = 512

SIZES = {
    "small": {"batch_size": 3, "M": 13, "K": 17, "N": 11},
    "full": {"batch_size": 128, "M": 512, "K": 1024, "N": 512},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        y = torch.bmm(a, b)
        y = torch.where(y > 0, y, 0.1 * y)
        return y.mean(dim=2)


def get_inputs():
    return [torch.randn(batch_size, M, K), torch.randn(batch_size, K, N)]


def get_init_inputs():
    return []
