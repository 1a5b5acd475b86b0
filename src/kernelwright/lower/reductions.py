"""Reductions, scans-free: sum, mean, prod, max/min (with indices), argmax/argmin,
var/std, softmax and log_softmax, logsumexp.

All reduce through the one `reduce` primitive (kernels/reduce_*.wgsl); the
elementwise work around it (the 1/N of a mean, the exp of a softmax) fuses into
the reduction's loader or epilogue, or into the elementwise kernel that follows.
"""

from __future__ import annotations

import math

from ..ir.ir import GraphBuilder, Value
from ..kernels import ROW_LIMIT
from .elementwise import as_dtype, binary, device_dtype, unary_float
from .linalg import summed_product
from .registry import register


def _dims(x: Value, dims) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(len(x.shape)))
    if isinstance(dims, int):
        dims = [dims]
    return [d % max(1, len(x.shape)) for d in dims]


def _count(x: Value, dims) -> int:
    return math.prod(x.shape[d] for d in dims) if x.shape else 1


@register("aten.sum.dim_IntList", "aten.sum.default")
def sum_(b: GraphBuilder, x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = as_dtype(b, x, device_dtype(dtype))
    elif x.dtype == "bool":
        x = as_dtype(b, x, "i32")
    return _sum(b, x, _dims(x, dim), keepdim)


def _sum(b: GraphBuilder, x: Value, dims: list[int], keepdim: bool) -> Value:
    """A sum over dims; of a product's output over its N or M dim, two reductions of its
    operands instead (linalg.summed_product), unless the finished graph reads the
    product elsewhere (GraphBuilder.settle puts the plain reduction back)."""
    chain: list[Value] = []
    s = summed_product(b, x, sorted(dims), chain)
    if s is None:
        return b.reduce(x, "sum", dims, keepdim)
    if keepdim:
        s = b.reshape(s, tuple(1 if d in dims else n for d, n in enumerate(x.shape)))
    return b.tentatively(s, chain, lambda: b.reduce(x, "sum", dims, keepdim))


@register("aten.mean.dim", "aten.mean.default")
def mean(b, x, dim=None, keepdim=False, dtype=None):
    dims = _dims(x, dim)
    s = _sum(b, as_dtype(b, x, "f32"), dims, keepdim)
    n = _count(x, dims)
    return binary(b, "mul", s, 1.0 / n) if n else b.expand(b.scalar(math.nan), s.shape)


@register("aten.prod.dim_int", "aten.prod.default")
def prod(b, x, dim=None, keepdim=False, dtype=None):
    return b.reduce(x, "prod", _dims(x, dim), keepdim)


@register("aten.amax.default", "aten.max.default")
def amax(b, x, dim=None, keepdim=False):
    return b.reduce(x, "max", _dims(x, dim), keepdim)


@register("aten.amin.default", "aten.min.default")
def amin(b, x, dim=None, keepdim=False):
    return b.reduce(x, "min", _dims(x, dim), keepdim)


@register("aten.max.dim")
def max_dim(b, x, dim, keepdim=False):
    return (b.reduce(x, "max", [dim], keepdim), b.reduce(x, "argmax", [dim], keepdim))


@register("aten.min.dim")
def min_dim(b, x, dim, keepdim=False):
    return (b.reduce(x, "min", [dim], keepdim), b.reduce(x, "argmin", [dim], keepdim))


@register("aten.argmax.default")
def argmax(b, x, dim=None, keepdim=False):
    if dim is None:
        x, dim = b.reshape(x, (x.numel,)), 0
    return b.reduce(x, "argmax", [dim], keepdim)


@register("aten.argmin.default")
def argmin(b, x, dim=None, keepdim=False):
    if dim is None:
        x, dim = b.reshape(x, (x.numel,)), 0
    return b.reduce(x, "argmin", [dim], keepdim)


@register("aten.var.correction", "aten.var.dim")
def var(b, x, dim=None, correction=None, keepdim=False, unbiased=None):
    return var_mean(b, x, dim, correction=correction, keepdim=keepdim, unbiased=unbiased)[0]


@register("aten.var_mean.correction")
def var_mean(b, x, dim=None, correction=None, keepdim=False, unbiased=None):
    """The variance and the mean: where a row kernel can hold the rows on chip (up to
    kernels.ROW_LIMIT elements), the mean, then the sum of squared deviations from it,
    which schedule.fuse_rows makes one kernel reading the row once; longer rows (a
    LayerNorm over C x H x W, an instance or group norm of large images) take both from
    one read of x (GraphBuilder.moments: Welford's update), where the mean and then the
    deviations would read them twice."""
    dims = _dims(x, dim)
    if correction is None:
        correction = 0 if unbiased is False else 1
    n = _count(x, dims)
    kept = tuple(1 if d in dims else s for d, s in enumerate(x.shape)) if keepdim else \
        tuple(s for d, s in enumerate(x.shape) if d not in dims)
    both = b.moments(as_dtype(b, x, "f32"), dims) if n > ROW_LIMIT else None
    if both is not None:
        m, m2 = (b.reshape(v, kept) for v in both)
        return binary(b, "div", m2, max(0, n - correction)), m
    m = mean(b, x, dims, keepdim=True)
    d = binary(b, "sub", x, m)
    ss = b.reduce(binary(b, "mul", d, d), "sum", dims, keepdim)
    v = binary(b, "div", ss, max(0, n - correction))
    return v, (m if keepdim else b.reshape(m, ss.shape))


@register("aten.std.correction")
def std(b, x, dim=None, correction=None, keepdim=False):
    return unary_float(b, "sqrt", var(b, x, dim, correction=correction, keepdim=keepdim))


@register("aten._softmax.default", "aten.softmax.int")
def softmax(b, x, dim, half_to_float=False):
    x = as_dtype(b, x, "f32")
    e = unary_float(b, "exp", binary(b, "sub", x, b.reduce(x, "max", [dim], True)))
    return binary(b, "div", e, b.reduce(e, "sum", [dim], True))


@register("aten._log_softmax.default", "aten.log_softmax.int")
def log_softmax(b, x, dim, half_to_float=False):
    x = as_dtype(b, x, "f32")
    shifted = binary(b, "sub", x, b.reduce(x, "max", [dim], True))
    s = b.reduce(unary_float(b, "exp", shifted), "sum", [dim], True)
    return binary(b, "sub", shifted, unary_float(b, "log", s))


@register("aten.logsumexp.default")
def logsumexp(b, x, dim, keepdim=False):
    x = as_dtype(b, x, "f32")
    dims = _dims(x, dim)
    m = b.reduce(x, "max", dims, True)
    s = b.reduce(unary_float(b, "exp", binary(b, "sub", x, m)), "sum", dims, True)
    out = binary(b, "add", unary_float(b, "log", s), m)
    return out if keepdim else b.reshape(out, [n for d, n in enumerate(x.shape) if d not in dims])


@register("aten.any.dim", "aten.any.dims", "aten.any.default")
def any_(b, x, dim=None, keepdim=False):
    r = b.reduce(as_dtype(b, x, "i32") if x.dtype != "f32" else
                 as_dtype(b, as_dtype(b, x, "bool"), "i32"), "max", _dims(x, dim), keepdim,
                 identity=0)
    return as_dtype(b, r, "bool")


@register("aten.all.dim", "aten.all.dims", "aten.all.default")
def all_(b, x, dim=None, keepdim=False):
    r = b.reduce(as_dtype(b, as_dtype(b, x, "bool"), "i32"), "min", _dims(x, dim), keepdim,
                 identity=1)
    return as_dtype(b, r, "bool")
