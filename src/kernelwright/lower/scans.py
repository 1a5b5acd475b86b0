"""Scans: cumsum, cumprod, cummax/cummin (values and indices), logcumsumexp, and flip.

All go through the one `scan` primitive (kernels/scan.wgsl, an inclusive scan along one
dim). What users build from them needs no op of its own once exported:

* a reversed scan is flip + scan + flip (flip is index arithmetic, free to read);
* an exclusive scan is the inclusive one minus x (or a shifted slice + pad);
* a masked cumsum is the cumsum of x * mask, which fuses into the scan's loader.
"""

from __future__ import annotations

from ..ir.ir import GraphBuilder, Value
from .elementwise import as_dtype, device_dtype
from .registry import register


def _scan(b: GraphBuilder, x: Value, op: str, dim: int, dtype=None) -> Value:
    if dtype is not None:
        x = as_dtype(b, x, device_dtype(dtype))
    elif x.dtype == "bool":
        x = as_dtype(b, x, "i32")  # PyTorch: integral and bool inputs accumulate in int64
    return b.scan(x, op, dim)


@register("aten.cumsum.default")
def cumsum(b, x, dim, dtype=None):
    return _scan(b, x, "sum", dim, dtype)


@register("aten.cumprod.default")
def cumprod(b, x, dim, dtype=None):
    return _scan(b, x, "prod", dim, dtype)


def _cum_extreme(b, x, dim, op):
    values = b.scan(x, op, dim)
    return as_dtype(b, values, x.dtype), b.scan(x, f"arg{op}", dim)


@register("aten.cummax.default")
def cummax(b, x, dim):
    return _cum_extreme(b, x, dim, "max")


@register("aten.cummin.default")
def cummin(b, x, dim):
    return _cum_extreme(b, x, dim, "min")


@register("aten.logcumsumexp.default")
def logcumsumexp(b, x, dim):
    return b.scan(as_dtype(b, x, "f32"), "logaddexp", dim)


