"""Sorting: sort (stable or not: both stable), topk, kthvalue; argsort and msort export
as sort.

All go through the one `sort` primitive (kernels/sort.wgsl: one workgroup sorts each
row in its memory, rows of at most SORT_LIMIT elements). A top-k of longer rows, k at
most SORT_LIMIT / 2, takes the first k of each chunk of SORT_LIMIT elements, then the
first k of those candidates (again in chunks while they are more than SORT_LIMIT): the
candidates keep the row's order, so ties still go to the lower index. A full sort of
a longer row is a CompileError naming the limit.
"""

from __future__ import annotations

from ..ir.ir import CompileError, GraphBuilder, Value
from ..kernels import SORT_LIMIT
from .elementwise import as_dtype
from .registry import register

I32_MAX = 2**31 - 1


def _last_dim(b: GraphBuilder, x: Value, dim: int) -> tuple[Value, list[int]]:
    """x with `dim` moved last, and the permutation that moves it back."""
    rank = len(x.shape)
    order = [d for d in range(rank) if d != dim] + [dim]
    back = [order.index(d) for d in range(rank)]
    return b.permute(x, order), back


def first_k(b: GraphBuilder, x: Value, dim: int, descending: bool,
            k: int | None = None) -> tuple[Value, Value]:
    """The values and indices of the first k (None: all) of x sorted stably along dim."""
    if not x.shape:
        return b.sort(x, 0, descending, k)
    dim %= len(x.shape)
    r = x.shape[dim]
    k = r if k is None else k
    if r <= SORT_LIMIT:
        return b.sort(x, dim, descending, k)
    if k > SORT_LIMIT // 2:
        raise CompileError(f"sort of rows of {r} elements, the first {k} of each: rows longer "
                           f"than {SORT_LIMIT} are sorted only for at most the first "
                           f"{SORT_LIMIT // 2}")
    keys = as_dtype(b, x, "i32") if x.dtype == "bool" else x
    rows, back = _last_dim(b, keys, dim)
    idx = b.permute(_chunked_indices(b, rows, descending, k), back)
    return b.gather(x, dim, idx), idx


def _chunked_indices(b: GraphBuilder, x: Value, descending: bool, k: int) -> Value:
    """The indices of the first k of x's rows along its last dim, longer than SORT_LIMIT:
    the first k of each chunk of SORT_LIMIT (the last padded with values sorting after
    every element), then of the candidates."""
    *lead, r = x.shape
    n = -(-r // SORT_LIMIT)
    if x.dtype == "i32":
        fill = -I32_MAX - 1 if descending else I32_MAX
    else:
        fill = float("-inf") if descending else float("nan")  # ties: after the row's own
    padded = b.pad(x, [(0, 0)] * len(lead) + [(0, n * SORT_LIMIT - r)], fill)
    chunks = b.reshape(padded, (*lead, n, SORT_LIMIT))
    _, local = b.sort(chunks, -1, descending, k)
    offsets = b.iota((*lead, n, k), len(lead), 0, SORT_LIMIT)
    cand = b.reshape(b.ew("add", local, offsets), (*lead, n * k))
    values = b.gather(padded, len(lead), cand)
    if n * k > SORT_LIMIT:
        pick = _chunked_indices(b, values, descending, k)
    else:
        _, pick = b.sort(values, -1, descending, k)
    return b.gather(cand, len(lead), pick)


@register("aten.sort.default")
def sort(b, x, dim=-1, descending=False):
    return first_k(b, x, dim, descending)


@register("aten.sort.stable")
def sort_stable(b, x, *, stable=None, dim=-1, descending=False):
    return first_k(b, x, dim, descending)


@register("aten.argsort.default")
def argsort(b, x, dim=-1, descending=False):
    return first_k(b, x, dim, descending)[1]


@register("aten.argsort.stable")
def argsort_stable(b, x, *, stable=False, dim=-1, descending=False):
    return first_k(b, x, dim, descending)[1]


@register("aten.topk.default")
def topk(b, x, k, dim=-1, largest=True, sorted=True):
    return first_k(b, x, dim, largest, k)


@register("aten.kthvalue.default")
def kthvalue(b, x, k, dim=-1, keepdim=False):
    dim = dim % len(x.shape) if x.shape else 0
    values, idx = first_k(b, x, dim, False, k)
    if not x.shape:
        return values, idx
    values, idx = (b.slice(v, dim, k - 1, k) for v in (values, idx))
    if keepdim:
        return values, idx
    shape = [s for d, s in enumerate(values.shape) if d != dim]
    return b.reshape(values, shape), b.reshape(idx, shape)
