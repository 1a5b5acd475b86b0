"""Sorts along one dim (sort, topk): knobs, space and generator for the sort template
(kernels/sort.wgsl), one workgroup per row, the row sorted in workgroup memory."""

from __future__ import annotations

import math

from ..ir.ir import CompileError
from ..options import CompileOptions
from .common import MAX_GRID, MAX_WG, WORKGROUP_BYTES, check_wg, loader, merge_knobs, pow2_ceil

# The longest row one workgroup sorts: its (key, index) pairs, 8 bytes each, padded to
# a power of two, fill at most the workgroup memory. Longer rows are a CompileError
# unless the lowering splits them (lower/sorting.py: a top-k of a few per chunk).
SORT_LIMIT = WORKGROUP_BYTES // 8


def sort_knobs(r: int) -> dict:
    """One invocation per compare-exchange of a step (half the padded row), 32 to 256."""
    return {"WG": min(MAX_WG, max(32, pow2_ceil(r) // 2))}


def sort_space(r: int) -> list[dict]:
    """Workgroups of 32 to 256 invocations, at most one per pair of the padded row (32
    at least)."""
    return [{"WG": wg} for wg in (32, 64, 128, 256) if wg <= max(32, pow2_ceil(r) // 2)]


def _sort(src, materialized, out, tnode, knobs, options: CompileOptions):
    (x,) = tnode.inputs
    _, r, inner = x.shape
    rows = x.numel // max(1, r)
    p = pow2_ceil(r)
    if p > SORT_LIMIT:
        raise CompileError(f"sort of rows of {r} elements: one workgroup sorts at most "
                           f"{SORT_LIMIT}")
    xt = "i32" if x.dtype in ("i32", "bool") else "f32"
    knobs = merge_knobs(sort_knobs(r), knobs)
    wg = check_wg(knobs)
    gx = min(max(1, rows), MAX_GRID)
    slots = dict(functions=loader(src, materialized, "load_x", x, xt), WG=wg, P=p, R=r,
                 K=tnode.attrs["k"], B=inner, ROWS=rows, GRID_X=gx, KEY=f"key_{xt}",
                 FLIP="~" if tnode.attrs["descending"] else "", workgroup_bytes=8 * p)
    return "sort", slots, (gx, math.ceil(max(1, rows) / gx), 1), knobs
