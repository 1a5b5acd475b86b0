"""minGPT-style causal self-attention: fused QKV Linear, additive causal mask, softmax, output."""

import torch
from torch import nn

batch_size = 8
seq_len = 1024
dim = 1024
heads = 16

SIZES = {
    "small": {"batch_size": 2, "seq_len": 11, "dim": 15, "heads": 3},
    "full": {"batch_size": 8, "seq_len": 1024, "dim": 1024, "heads": 16},
}


class Model(nn.Module):
    def __init__(self, dim, heads, max_seq_len):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)
        mask = torch.triu(torch.full((max_seq_len, max_seq_len), -1e9), diagonal=1)
        self.register_buffer("mask", mask.view(1, 1, max_seq_len, max_seq_len))

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.heads
        qkv = self.c_attn(x)
        q = qkv[:, :, :d].reshape(b, s, self.heads, hd).transpose(1, 2)
        k = qkv[:, :, d : 2 * d].reshape(b, s, self.heads, hd).transpose(1, 2)
        v = qkv[:, :, 2 * d :].reshape(b, s, self.heads, hd).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (hd**-0.5)
        att = att + self.mask[:, :, :s, :s]
        att = self.attn_dropout(torch.softmax(att, dim=-1))
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(b, s, d)
        return self.resid_dropout(self.c_proj(y))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, heads, seq_len]
