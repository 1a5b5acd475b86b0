"""Reductions, scans-free: sum, mean, prod, max/min (with indices), argmax/argmin,
var/std, softmax and log_softmax, logsumexp.

All reduce through the one `reduce` primitive (kernels/reduce_*.wgsl); the
elementwise work around it (the 1/N of a mean, the exp of a softmax) fuses into
the reduction's loader or epilogue, or into the elementwise kernel that follows.
"""

from __future__ import annotations

import math

from ..ir import GraphBuilder, Value
from . import register
from .elementwise import as_dtype, binary, device_dtype, unary_float
from .linalg import summed_product


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
    operands instead (linalg.summed_product), until settle_sums sees the finished graph
    read the product elsewhere."""
    chain: list[Value] = []
    s = summed_product(b, x, sorted(dims), chain)
    if s is None:
        return b.reduce(x, "sum", dims, keepdim)
    if keepdim:
        s = b.reshape(s, tuple(1 if d in dims else n for d, n in enumerate(x.shape)))
    b.sums_of_products.append((s, x, dims, keepdim, chain))
    return s


def settle_sums(b: GraphBuilder, outputs: list[Value]) -> list[Value]:
    """The lowered graph's sums of products (_sum) whose product, or a value between it
    and the summed x, the finished graph reads elsewhere (a node or one of `outputs`):
    the product is computed anyway, so the sum reduces x as it is, in place of the
    operands' reductions (which dead-code removal then drops). Returns `outputs` with
    those sums replaced."""
    reads: dict[int, int] = {}
    for n in b.graph.nodes:
        for v in n.inputs:
            reads[id(v)] = reads.get(id(v), 0) + 1
    for v in outputs:
        reads[id(v)] = reads.get(id(v), 0) + 1
    swap: dict[int, Value] = {}
    for s, x, dims, keepdim, chain in b.sums_of_products:
        # x is read by none but the sum (not built); each value below it by the one above
        if reads.get(id(x), 0) == 0 and all(reads.get(id(c), 0) == 1 for c in chain[1:]):
            continue
        swap[id(s)] = b.reduce(x, "sum", dims, keepdim)
    b.sums_of_products.clear()
    if swap:
        for n in b.graph.nodes:
            n.inputs = [swap.get(id(v), v) for v in n.inputs]
        b.graph.nodes = _producers_first(b.graph.nodes)  # (the new sums came last)
    return [swap.get(id(v), v) for v in outputs]


def _producers_first(nodes: list) -> list:
    """`nodes` reordered so that each comes after the nodes computing its inputs, the
    order otherwise kept (a depth-first walk of the inputs, in order)."""
    ours = {id(n) for n in nodes}
    done: set[int] = set()
    order = []
    for top in nodes:
        stack = [(top, False)]
        while stack:
            n, expanded = stack.pop()
            if id(n) in done:
                continue
            if expanded:
                done.add(id(n))
                order.append(n)
                continue
            stack.append((n, True))
            for v in reversed(n.inputs):
                if v.node is not None and id(v.node) in ours and id(v.node) not in done:
                    stack.append((v.node, False))
    return order


@register("aten.mean.dim", "aten.mean.default")
def mean(b, x, dim=None, keepdim=False, dtype=None):
    dims = _dims(x, dim)
    s = _sum(b, as_dtype(b, x, "f32"), dims, keepdim)
    return binary(b, "mul", s, 1.0 / _count(x, dims))


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
    dims = _dims(x, dim)
    if correction is None:
        correction = 0 if unbiased is False else 1
    m = mean(b, x, dims, keepdim=True)
    d = binary(b, "sub", x, m)
    ss = b.reduce(binary(b, "mul", d, d), "sum", dims, keepdim)
    v = binary(b, "div", ss, max(0, _count(x, dims) - correction))
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
                 as_dtype(b, as_dtype(b, x, "bool"), "i32"), "max", _dims(x, dim), keepdim)
    return as_dtype(b, r, "bool")


@register("aten.all.dim", "aten.all.dims", "aten.all.default")
def all_(b, x, dim=None, keepdim=False):
    r = b.reduce(as_dtype(b, as_dtype(b, x, "bool"), "i32"), "min", _dims(x, dim), keepdim)
    return as_dtype(b, r, "bool")
