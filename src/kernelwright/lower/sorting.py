"""Sorting: sort (stable or not: both stable), topk, kthvalue; argsort and msort export
as sort.

A row of at most SORT_LIMIT elements goes through the one `sort` primitive
(kernels/sort.wgsl: one workgroup sorts each row in its memory). A top-k of longer rows,
k at most SORT_LIMIT / 2, takes the first k of each chunk of SORT_LIMIT elements, then the
first k of those candidates (again in chunks while they are more than SORT_LIMIT): the
candidates keep the row's order, so ties still go to the lower index. Any other sort of
a longer row is a bitonic sort in passes over its (key, index) pairs (`_long_indices`):
chunks sorted in workgroup memory, merged by passes over the whole row. Either way ties
go to the lower index: the order of torch.sort(stable=True), NaN the largest value.
"""

from __future__ import annotations

from ..ir.ir import GraphBuilder, Value
from ..kernels import SORT_LIMIT
from ..kernels.common import pow2_ceil
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
        rows, back = _last_dim(b, x, dim)
        lead = rows.shape[:-1]
        flat = b.reshape(rows, (-1, r, 1))
        idx = b.reshape(_long_indices(b, flat, descending, k, SORT_LIMIT), (*lead, k))
        idx = b.permute(idx, back)
        return b.gather(x, dim, idx), idx
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


def _long_indices(b: GraphBuilder, x: Value, descending: bool, k: int, chunk: int) -> Value:
    """The indices [N, k] of the first k of each row of x [N, R, 1] sorted stably, R longer
    than `chunk` (a power of two): a bitonic sort of the rows' (key, index) pairs padded to
    P, a power of two (GraphBuilder.sort_pass). Chunks of `chunk` pairs are sorted in
    workgroup memory; then for each block size s = 2 * chunk ... P, each sorted block of s / 2
    is merged with the next: a pass comparing each pair of the lower block with its mirror
    in the block of s, half-cleaners at distances s / 4 ... chunk (each leaves every pair in
    its half of the distance's blocks, each half a bitonic sequence), and a merge of each
    chunk, a bitonic sequence by then, in workgroup memory. Every block is sorted
    ascending by (key, index), the keys inverted for a descending sort."""
    n, r, _ = x.shape
    p = pow2_ceil(r)
    pairs = b.sort_pass(x, "chunks", chunk=chunk, padded=p, descending=descending)
    size = 2 * chunk
    while size <= p:
        pairs = b.sort_pass(pairs, "merge", half=size // 2, mask=size - 1)
        gap = size // 4
        while gap >= chunk:
            pairs = b.sort_pass(pairs, "merge", half=gap, mask=gap)
            gap //= 2
        pairs = b.sort_pass(pairs, "bitonic", chunk=chunk)
        size *= 2
    idx = b.slice(b.slice(b.reshape(pairs, (n, p, 2)), 2, 1, 2), 1, 0, k)
    return b.reshape(idx, (n, k))


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
