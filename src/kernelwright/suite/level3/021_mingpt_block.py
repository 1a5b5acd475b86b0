"""minGPT block: LN, causal self-attention, residual; LN, tanh-GELU MLP, residual."""

import torch
from torch import nn
from torch.nn import functional as F

batch_size = 8
seq_len = 1024
dim = 768
heads = 12

SIZES = {
    "small": {"batch_size": 2, "seq_len": 11, "dim": 15, "heads": 3},
    "full": {"batch_size": 8, "seq_len": 1024, "dim": 768, "heads": 12},
}


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, max_seq_len):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)
        causal = torch.tril(torch.ones(max_seq_len, max_seq_len, dtype=torch.bool))
        self.register_buffer("causal", causal.view(1, 1, max_seq_len, max_seq_len))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (k.shape[-1] ** -0.5)
        att = att.masked_fill(~self.causal[:, :, :t, :t], float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class Model(nn.Module):
    def __init__(self, dim, heads, max_seq_len):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, max_seq_len)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.c_proj = nn.Linear(4 * dim, dim)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.dropout(self.c_proj(h))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, heads, seq_len]
