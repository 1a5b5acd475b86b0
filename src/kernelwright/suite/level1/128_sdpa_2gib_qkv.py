"""F.scaled_dot_product_attention over (40, 32, 4096, 128) q, k, v: 2.5 GiB each."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 40
heads = 32
seq_len = 4096
head_dim = 128

# small: under the software driver's 128 MiB binding. Over it (131 x 137 heads of 31 x 63,
# 134 MiB per q, k, v) a call took 8 s there and `bench` more than its 300 s.
SIZES = {
    "small": {"batch_size": 3, "heads": 5, "seq_len": 29, "head_dim": 31},
    "full": {"batch_size": 40, "heads": 32, "seq_len": 4096, "head_dim": 128},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    shape = (batch_size, heads, seq_len, head_dim)
    return [torch.randn(*shape), torch.randn(*shape), torch.randn(*shape)]


def get_init_inputs():
    return []
