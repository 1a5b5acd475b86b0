"""Sorts along one dim (sort, topk): knobs, space and generator for the sort templates.

A row of at most SORT_LIMIT elements is sorted by one workgroup in its memory
(kernels/sort.wgsl). A longer row is sorted by passes that the lowering builds
(lower/sorting.py, GraphBuilder.sort_pass) over (key, index) pairs: its chunks of
SORT_LIMIT sorted in workgroup memory (sort.wgsl, stage "chunks"), global compare-exchange
passes (sort_merge.wgsl, "merge") and bitonic merges of each chunk ("bitonic", sort.wgsl
again)."""

from __future__ import annotations

import math

from ..ir.ir import CompileError
from ..options import CompileOptions
from .common import (
    MAX_GRID,
    MAX_WG,
    WORKGROUP_BYTES,
    check_wg,
    grid_1d,
    loader,
    merge_knobs,
    pow2_ceil,
    snippet,
)

# The longest row one workgroup sorts: its (key, index) pairs, 8 bytes each, padded to
# a power of two, fill at most the workgroup memory. Longer rows are sorted in chunks of
# this many, merged by passes over the whole row (lower/sorting.py).
SORT_LIMIT = WORKGROUP_BYTES // 8


def sort_knobs(r: int) -> dict:
    """One invocation per compare-exchange of a step (half the padded row), 32 to 256."""
    return {"WG": min(MAX_WG, max(32, pow2_ceil(r) // 2))}


def sort_space(r: int) -> list[dict]:
    """Workgroups of 32 to 256 invocations, at most one per pair of the padded row (32
    at least)."""
    return [{"WG": wg} for wg in (32, 64, 128, 256) if wg <= max(32, pow2_ceil(r) // 2)]


# A merge pass (sort_merge.wgsl): one invocation per compare-exchange of the row's pairs.
MERGE_KNOBS = {"WG": 256}
MERGE_SPACE = [{"WG": wg} for wg in (64, 128, 256)]


def _sort_space(out, tnode, options: CompileOptions) -> list[dict]:
    """The tuner's settings for one sort kernel: by the length one workgroup sorts (the
    row, or a chunk of it), or the merge pass's workgroup sizes."""
    stage = tnode.attrs.get("stage")
    if stage == "merge":
        return MERGE_SPACE
    return sort_space(tnode.attrs["chunk"] if stage else tnode.inputs[0].shape[1])


def _sort(src, materialized, out, tnode, knobs, options: CompileOptions):
    (x,) = tnode.inputs
    _, r, inner = x.shape
    rows = x.numel // max(1, r)
    stage = tnode.attrs.get("stage")
    if stage == "merge":
        return _merge(src, materialized, tnode, knobs, rows)
    xt = "i32" if x.dtype in ("i32", "bool") else "f32"
    functions = loader(src, materialized, "load_x", x, xt)
    chunk = tnode.attrs.get("chunk", pow2_ceil(r))  # the length one workgroup sorts
    if chunk > SORT_LIMIT:
        raise CompileError(f"sort of rows of {r} elements: one workgroup sorts at most "
                           f"{SORT_LIMIT} (lower/sorting.py sorts longer rows in passes)")
    knobs = merge_knobs(sort_knobs(chunk), knobs)
    wg = check_wg(knobs)
    if stage is None:  # the whole row, the indices of its first K
        chunks, first = 1, 2
        load = _values_load(r, xt, tnode.attrs["descending"])
        stores = snippet("sort_store_first").substitute(K=tnode.attrs["k"], WG=wg, B=inner,
                                                        STORE="$STORE")
    else:  # a chunk of a long row (lower/sorting.py), its pairs stored
        padded = tnode.out.shape[1] // 2  # out: the stored value, maybe a reshape of it
        chunks = padded // chunk
        if stage == "chunks":
            first = 2
            load = _values_load(r, xt, tnode.attrs["descending"])
        else:  # "bitonic": the chunk is a bitonic sequence, one merge sorts it
            first = chunk
            load = snippet("sort_load_pairs").substitute()
        stores = snippet("sort_store_pairs").substitute(P=chunk, PADDED=padded, B=inner, WG=wg,
                                                        STORE="$STORE")
    groups = max(1, rows * chunks)
    gx = min(groups, MAX_GRID)
    slots = dict(functions=functions, WG=wg, P=chunk, FIRST=first, CHUNKS=chunks, B=inner,
                 GROUPS=groups, GRID_X=gx, LOAD=load, STORES=stores, workgroup_bytes=8 * chunk)
    return "sort", slots, (gx, math.ceil(groups / gx), 1), knobs


def _values_load(r: int, xt: str, descending: bool) -> str:
    """sort.wgsl's LOAD of each element's key (inverted for a descending sort) and index."""
    return snippet("sort_load_values").substitute(R=r, KEY=f"key_{xt}",
                                                  FLIP="~" if descending else "")


def _merge(src, materialized, tnode, knobs, rows: int):
    """A compare-exchange pass over pairs (sort_merge.wgsl), one invocation per pair."""
    (x,) = tnode.inputs
    p = x.shape[1] // 2
    knobs = merge_knobs(MERGE_KNOBS, knobs)
    wg = check_wg(knobs)
    pairs = rows * p // 2
    grid, per_row = grid_1d(pairs, wg)
    slots = dict(functions=loader(src, materialized, "load_x", x, "i32"), WG=wg, P=p,
                 H=tnode.attrs["half"], MASK=tnode.attrs["mask"], B=x.shape[2], PAIRS=pairs,
                 GRID_X=per_row)
    return "sort_merge", slots, grid, knobs
