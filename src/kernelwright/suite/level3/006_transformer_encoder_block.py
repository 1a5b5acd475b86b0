"""Hand-written pre-norm transformer encoder block: Q/K/V Linears, softmax attention, GELU MLP."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 8
seq_len = 1024
dim = 768
heads = 12

SIZES = {
    "small": {"batch_size": 2, "seq_len": 7, "dim": 21, "heads": 3},
    "full": {"batch_size": 8, "seq_len": 1024, "dim": 768, "heads": 12},
}


class Model(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)
        self.dropout = nn.Dropout(0.1)

    def _split_heads(self, t):
        b, s, d = t.shape
        return t.view(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x):
        b, s, d = x.shape
        h = self.ln1(x)
        q = self._split_heads(self.q(h))
        k = self._split_heads(self.k(h))
        v = self._split_heads(self.v(h))
        scale = (d // self.heads) ** -0.5
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, dim=-1)
        att = self.dropout(att)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, s, d)
        x = x + self.dropout(self.proj(y))
        h = self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x + self.dropout(h)


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, heads]
