"""Swin blocks: window attention, then shifted windows (slice+cat shift, mask); per-pair bias."""

import torch
from torch import nn

batch_size = 32
resolution = 56
dim = 128
heads = 4
window = 7
shift = 3

SIZES = {
    "small": {"batch_size": 2, "resolution": 9, "dim": 10, "heads": 2, "window": 3, "shift": 1},
    "full": {"batch_size": 32, "resolution": 56, "dim": 128, "heads": 4, "window": 7, "shift": 3},
}


def _shift_mask(resolution, window, shift):
    """-100 where two tokens of one shifted window came from different image regions."""
    region = torch.zeros(resolution, resolution)
    bounds = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    label = 0
    for rows in bounds:
        for cols in bounds:
            region[rows, cols] = label
            label += 1
    n = resolution // window
    region = region.view(n, window, n, window).permute(0, 2, 1, 3).reshape(n * n, -1)
    differ = region.unsqueeze(1) != region.unsqueeze(2)
    return differ.float() * -100.0


def _cyclic_shift(x, s):
    """torch.roll(x, shifts=(-s, -s), dims=(1, 2)) written with slicing and cat."""
    x = torch.cat([x[:, s:], x[:, :s]], dim=1)
    return torch.cat([x[:, :, s:], x[:, :, :s]], dim=2)


class WindowAttention(nn.Module):
    def __init__(self, dim, heads, window):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        tokens = window * window
        # A learned bias per head and token pair (Swin gathers it from a relative-position table).
        self.bias = nn.Parameter(torch.randn(heads, tokens, tokens) * 0.5)

    def forward(self, x, mask):
        bw, n, c = x.shape
        hd = c // self.heads
        qkv = self.qkv(x).reshape(bw, n, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.matmul(q * hd**-0.5, k.transpose(-2, -1)) + self.bias
        if mask is not None:
            nw = mask.shape[0]
            att = att.view(bw // nw, nw, self.heads, n, n) + mask.unsqueeze(1)
            att = att.view(bw, self.heads, n, n)
        att = torch.softmax(att, dim=-1)
        out = torch.matmul(att, v).transpose(1, 2).reshape(bw, n, c)
        return self.proj(out)


class SwinBlock(nn.Module):
    def __init__(self, dim, heads, resolution, window, shift):
        super().__init__()
        self.window = window
        self.shift = shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, window)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        mask = _shift_mask(resolution, window, shift) if shift else None
        self.register_buffer("mask", mask)

    def forward(self, x):
        b, h, w, c = x.shape
        ws = self.window
        y = self.norm1(x)
        if self.shift:
            y = _cyclic_shift(y, self.shift)
        y = y.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        y = self.attn(y.reshape(-1, ws * ws, c), self.mask)
        y = y.view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        if self.shift:
            y = _cyclic_shift(y, h - self.shift)
        x = x + y
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, dim, heads, resolution, window, shift):
        super().__init__()
        self.blocks = nn.Sequential(
            SwinBlock(dim, heads, resolution, window, 0),
            SwinBlock(dim, heads, resolution, window, shift),
        )

    def forward(self, x):
        return self.blocks(x)


def get_inputs():
    return [torch.randn(batch_size, resolution, resolution, dim)]


def get_init_inputs():
    return [dim, heads, resolution, window, shift]
