"""Random ops: dropout, bernoulli, rand and randn drawn from a counter-based generator.

A random value is a pure function of the graph's key (an i32 input [seed, draw] the
caller passes at each call: a training step's seed and call number), the op's stream
(its number among the graph's random ops) and the element's flat index
(`kw_uniform`, kernels/random.wgsl: the elementwise op "uniform"). Nothing is stored
between calls, a new draw needs no new plan, and a kernel may recompute a value
anywhere (a dropout mask read by the forward and the backward alike). The numbers are
not PyTorch's (they cannot be): the same key gives the same numbers. A graph compiled
without a generator (`GraphBuilder.random` off: `kernelwright.compile`) refuses them.
"""

from __future__ import annotations

import math

import torch

from ..ir.ir import CompileError, GraphBuilder, Value
from .elementwise import device_dtype
from .registry import register


def key_tensor(seed: int, draw: int) -> torch.Tensor:
    """The key input (`GraphBuilder.random_key`) for `seed` and call number `draw`: int32
    [seed, draw], each taken modulo 2^32 and read as a signed 32-bit integer."""
    return torch.tensor([(v % 2**32) - (2**32 if v % 2**32 >= 2**31 else 0)
                         for v in (seed, draw)], dtype=torch.int32)


def uniform(b: GraphBuilder, shape) -> Value:
    """Uniform f32 values in [0, 1) of `shape` from a stream of their own."""
    if not b.random:
        raise CompileError("dropout in training mode is random, as are rand, randn and "
                           "bernoulli, and this compile has no generator: call model.eval() "
                           "for inference, or train through kernelwright.compile_training or "
                           "torch.compile")
    if b.random_key is None:
        b.random_key = b.input((2,), "i32", "random_key")
    stream = b.random_streams
    b.random_streams += 1
    key = b.random_key
    seed, draw = (b.reshape(b.slice(key, 0, i, i + 1), ()) for i in range(2))
    shape = tuple(int(s) for s in shape)
    index = b.reshape(b.iota((max(math.prod(shape), 1),), 0), shape)
    return b.ew("uniform", seed, draw, b.scalar(stream, "i32"), index, dtype="f32")


def _normal(b: GraphBuilder, shape) -> Value:
    """Standard normal f32 values (Box-Muller over two uniform streams)."""
    u1 = b.ew("sub", b.scalar(1.0), uniform(b, shape))  # (0, 1]: its log is finite
    u2 = uniform(b, shape)
    radius = b.ew("sqrt", b.ew("mul", b.ew("log", u1), b.scalar(-2.0)))
    return b.ew("mul", radius, b.ew("cos", b.ew("mul", u2, b.scalar(2 * math.pi))))


def _float(dtype) -> str:
    dt = device_dtype(dtype) if dtype is not None else "f32"
    if dt != "f32":
        raise CompileError(f"random values of dtype {dtype}: only floating point")
    return dt


@register("aten.native_dropout.default")
def native_dropout(b, x, p, train):
    """(x with each element zeroed with probability p and the rest scaled by 1 / (1 - p),
    the mask of kept elements); x and a mask of ones where not `train` (eval mode)."""
    if train is False or p == 0:
        return x, b.expand(b.scalar(True, "bool"), x.shape)
    if p >= 1:
        return b.ew("mul", x, b.scalar(0.0)), b.expand(b.scalar(False, "bool"), x.shape)
    keep = b.ew("lt", uniform(b, x.shape), b.scalar(1.0 - p), dtype="bool")
    out = b.ew("mul", b.ew("mul", x, b.cast(keep, x.dtype)), b.scalar(1.0 / (1.0 - p)))
    return out, keep


@register("aten.dropout.default")
def dropout(b, x, p, train):
    return native_dropout(b, x, p, train)[0]


@register("aten.native_dropout_backward.default")
def native_dropout_backward(b, grad, mask, scale):
    return b.ew("mul", b.ew("mul", grad, b.cast(mask, grad.dtype)), b.scalar(float(scale)))


@register("aten.bernoulli.p")
def bernoulli_p(b, x, p=0.5, generator=None):
    """Ones with probability p, of x's shape and dtype."""
    return b.cast(b.ew("lt", uniform(b, x.shape), b.scalar(float(p)), dtype="bool"), x.dtype)


@register("aten.bernoulli.default")
def bernoulli(b, x, generator=None):
    """Ones with the probability x holds per element."""
    return b.cast(b.ew("lt", uniform(b, x.shape), b.cast(x, "f32"), dtype="bool"), x.dtype)


@register("aten.rand.default")
def rand(b, size, dtype=None, **_):
    _float(dtype)
    return uniform(b, tuple(size))


@register("aten.rand_like.default")
def rand_like(b, x, dtype=None, **_):
    _float(dtype)
    return uniform(b, x.shape)


@register("aten.randn.default")
def randn(b, size, dtype=None, **_):
    _float(dtype)
    return _normal(b, tuple(size))


@register("aten.randn_like.default")
def randn_like(b, x, dtype=None, **_):
    _float(dtype)
    return _normal(b, x.shape)
