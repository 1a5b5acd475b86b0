"""Transformer layers shared by the training workloads: RMSNorm, rotary embeddings,
grouped-query self- and cross-attention, SwiGLU and GELU feed-forwards, sinusoids."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps), scaled per channel."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor,
                                                                         torch.Tensor]:
    """cos and sin [seq, head_dim] of rotary embeddings (each frequency twice)."""
    freq = base ** (-torch.arange(0, head_dim, 2).float() / head_dim)
    angle = torch.arange(seq).float()[:, None] * freq[None, :]
    angle = torch.cat([angle, angle], dim=-1)
    return angle.cos(), angle.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of x [..., seq, head_dim]: x cos + rotate_half(x) sin."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + turned * sin


def sinusoids(length: int, dim: int) -> torch.Tensor:
    """Fixed sinusoidal positions [length, dim] (sin then cos), as Whisper's encoder."""
    scale = math.log(10000.0) / (dim // 2 - 1)
    inv = torch.exp(-scale * torch.arange(dim // 2).float())
    t = torch.arange(length).float()[:, None] * inv[None, :]
    return torch.cat([t.sin(), t.cos()], dim=1)


class Attention(nn.Module):
    """Multi-head attention with `kv_heads` key/value heads (grouped-query when fewer
    than `heads`), rotary embeddings when given tables, causal or not; with `context`,
    cross-attention to it."""

    def __init__(self, dim: int, heads: int, kv_heads: int | None = None,
                 bias: bool = False) -> None:
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads or heads
        self.head_dim = dim // heads
        self.q = nn.Linear(dim, dim, bias=bias)
        # no key bias: its gradient is rounding noise (it moves a row's scores alike)
        self.k = nn.Linear(dim, self.kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(dim, self.kv_heads * self.head_dim, bias=bias)
        self.o = nn.Linear(dim, dim, bias=bias)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None,
                causal: bool = False, rope: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> torch.Tensor:
        n, t, _ = x.shape
        src = x if context is None else context
        s = src.shape[1]
        q = self.q(x).view(n, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(src).view(n, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(src).view(n, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        if self.kv_heads != self.heads:  # each key/value head serves a group of query heads
            group = self.heads // self.kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.o(a.transpose(1, 2).reshape(n, t, -1))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x))."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    """Pre-norm (RMSNorm) grouped-query causal attention with rotary embeddings, then a
    SwiGLU feed-forward, each added to the residual."""

    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                causal: bool = True) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), causal=causal, rope=rope)
        return x + self.mlp(self.mlp_norm(x))


class EncoderBlock(nn.Module):
    """Pre-norm (LayerNorm) self-attention, optionally cross-attention, and a GELU MLP
    (a Whisper or ViT block)."""

    def __init__(self, dim: int, heads: int, cross: bool = False) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, bias=True)
        self.cross_norm = nn.LayerNorm(dim) if cross else None
        self.cross = Attention(dim, heads, bias=True) if cross else None
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None,
                causal: bool = False) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), causal=causal)
        if self.cross is not None:
            x = x + self.cross(self.cross_norm(x), context=context)
        return x + self.mlp(self.mlp_norm(x))
