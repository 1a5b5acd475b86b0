"""The linear recurrence (GraphBuilder.recur: h_r = a_r * h_(r-1) + b_r along R):
knobs, space and generator for kernels/recur.wgsl."""

from __future__ import annotations

from ..options import CompileOptions
from .common import check_wg, grid_1d, loader, merge_knobs


def recur_knobs() -> dict:
    """64 invocations per workgroup: a recurrence has one per column (Mamba's B x D x N,
    24576 for Mamba-130M at batch 1), so smaller workgroups spread them over more SMs."""
    return {"WG": 64}


def recur_space() -> list[dict]:
    return [{"WG": wg} for wg in (32, 64, 128, 256)]


def _recur(src, materialized, out, tnode, knobs, options: CompileOptions):
    a, b, h0 = tnode.inputs
    p, r, q = a.shape
    knobs = merge_knobs(recur_knobs(), knobs)
    wg = check_wg(knobs)
    functions = (loader(src, materialized, "load_a", a) + loader(src, materialized, "load_b", b)
                 + loader(src, materialized, "load_h", h0))
    grid, row = grid_1d(p * q, wg)
    return "recur", dict(functions=functions, WG=wg, R=r, Q=q, COLS=p * q,
                         GRID_X=row // wg), grid, knobs
