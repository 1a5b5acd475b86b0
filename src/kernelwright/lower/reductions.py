"""Reductions, scans-free: sum, mean, prod, max/min (with indices), argmax/argmin,
var/std, softmax and log_softmax, logsumexp, histc.

All reduce through the one `reduce` primitive (kernels/reduce_*.wgsl); the
elementwise work around it (the 1/N of a mean, the exp of a softmax) fuses into
the reduction's loader or epilogue, or into the elementwise kernel that follows.
"""

from __future__ import annotations

import math

from ..ir.ir import CompileError, GraphBuilder, Value
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


@register("aten.all.dim", "aten.all.dims", "aten.all.default", "aten._is_all_true.default")
def all_(b, x, dim=None, keepdim=False):
    r = b.reduce(as_dtype(b, as_dtype(b, x, "bool"), "i32"), "min", _dims(x, dim), keepdim,
                 identity=1)
    return as_dtype(b, r, "bool")


@register("aten.histc.default")
def histc(b: GraphBuilder, x: Value, bins=100, min=0, max=0):  # noqa: A002 - ATen's names
    """Counts of x's elements in `bins` equal bins over [min, max] (elements outside it,
    NaN among them, not counted; one equal to max in the last bin), PyTorch's way: the
    bin from (x - min) * bins / (max - min), then moved to the one whose edges hold x, the
    edges being torch.linspace(min, max, bins + 1)'s (computed here as it computes them),
    so that an element on an edge lands where eager puts it. min == max takes the data's
    minimum and maximum (run-time values), widened by 1 each way if they are equal too.
    The counts are a sum over the elements of each bin's [bins, numel] comparisons,
    computed in the reduction's loader (nothing of that size is stored): transformers'
    grouped_mm experts count the tokens routed to each expert this way."""
    bins = int(bins)
    if bins <= 0:
        raise CompileError(f"histc: bins must be positive, got {bins}")
    lo, hi = float(min), float(max)
    if lo > hi:
        raise CompileError(f"histc: max ({hi}) must be larger than min ({lo})")
    if not all(math.isfinite(v) for v in (lo, hi)):
        raise CompileError(f"histc: range of [{lo}, {hi}] is not finite")
    xf = b.reshape(as_dtype(b, x, "f32"), (x.numel,))
    if lo == hi:  # the data's range
        first, last = b.reduce(xf, "min", [0], True), b.reduce(xf, "max", [0], True)
        same = _is(b, "eq", first, last)
        left = b.ew("where", same, binary(b, "sub", first, 1.0), first)
        right = b.ew("where", same, binary(b, "add", last, 1.0), last)
    else:
        left, right = b.scalar(lo, "f32"), b.scalar(hi, "f32")
    width = binary(b, "sub", right, left)
    step = binary(b, "div", width, float(bins))
    half = (bins + 1) // 2

    def edge(j: Value) -> Value:  # torch.linspace(left, right, bins + 1)[j]
        jf = as_dtype(b, j, "f32")
        low = binary(b, "add", left, binary(b, "mul", step, jf))
        high = binary(b, "sub", right, binary(b, "mul", step, binary(b, "sub", float(bins), jf)))
        return b.ew("where", _is(b, "lt", j, half), low, high)

    guess = binary(b, "div", binary(b, "mul", binary(b, "sub", xf, left), float(bins)), width)
    pos = as_dtype(b, unary_float(b, "trunc", guess), "i32")
    first_edge = b.ew("maximum", binary(b, "sub", pos, 1), b.scalar(0))
    count = None  # edges at or below x among pos - 1 .. pos + 1 (within 0 .. bins)
    for d in (-1, 0, 1):
        j = binary(b, "add", pos, d)
        inside = b.ew("and", _is(b, "ge", j, 0), _is(b, "le", j, bins))
        jc = b.ew("minimum", b.ew("maximum", j, b.scalar(0)), b.scalar(bins))
        hit = as_dtype(b, b.ew("and", inside, _is(b, "le", edge(jc), xf)), "i32")
        count = hit if count is None else binary(b, "add", count, hit)
    slot = binary(b, "sub", binary(b, "add", first_edge, count), 1)
    slot = b.ew("minimum", slot, b.scalar(bins - 1))  # max itself: the last bin
    valid = b.ew("and", _is(b, "ge", xf, left), _is(b, "le", xf, right))
    grid = (bins, x.numel)
    mine = b.ew("and", _is(b, "eq", b.iota(grid, 0), b.expand(slot, grid)),
                b.expand(valid, grid))
    counts = b.reduce(as_dtype(b, mine, "i32"), "sum", [1])
    return as_dtype(b, counts, x.dtype if x.dtype != "bool" else "i32")


def _is(b: GraphBuilder, op: str, x, y) -> Value:
    """The bool comparison `op` of x and y."""
    return binary(b, op, x, y, out_dtype="bool")
