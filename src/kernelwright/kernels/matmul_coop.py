"""The accelerated matmul on the cooperative-matrix units (f16 operands, f32
accumulation): knobs, space and generator (kernels/matmul_coop.wgsl)."""

from __future__ import annotations

import math

from ..ir.ir import CompileError
from ..options import CompileOptions
from .common import (
    MAX_GRID,
    MAX_WG,
    contiguous_dim,
    loader,
    merge_knobs,
    pow2_ceil,
    require,
    snippet,
)

COOP_TILE = 16  # the cooperative matrices' side: 16 x 16 f16 operands, 16 x 16 f32 results
COOP_SUBGROUP = 32  # invocations per subgroup the template is written for (NVIDIA's warp)
# How the staged tiles meet the cooperative loads: the WGSL builtins used and the
# memory order they are taken to read. naga's coopLoad reads column-major (tiles laid
# out [k][m] and [n][k]); "row" and "rowT" lay the tiles out row-major for a coopLoad
# or a coopLoadT that reads rows (bench/coop_matmul.py tries all three on a device).
COOP_LOADS = {"col": ("coopLoad", "coopStore", False), "row": ("coopLoad", "coopStore", True),
              "rowT": ("coopLoadT", "coopStoreT", True)}
COOP_WARP_TILES = ((64, 64, 32, 32), (128, 64, 64, 32), (64, 128, 32, 64),
                   (128, 128, 64, 32), (128, 128, 32, 64), (128, 128, 64, 64))
COOP_BKS = (16, 32, 64)
COOP_WORKGROUP_BYTES = 49152  # the space keeps to 48 KiB (the defaults use 27 KiB)


def matmul_coop_knobs(m: int, n: int) -> dict:
    """128 x 128 tiles of 8 subgroups with 64 x 32 warp tiles for products of at least
    128 x 128, else 64 x 64 tiles of 4 subgroups with 32 x 32; BK 32; rows of the
    staged tiles padded by 8 f16 (16 bytes)."""
    bm, bn, wm, wn = (128, 128, 64, 32) if m >= 128 and n >= 128 else (64, 64, 32, 32)
    return {"BM": bm, "BN": bn, "WM": wm, "WN": wn, "BK": 32, "PAD": 8, "LOAD": "col"}


def _coop_layout(knobs: dict) -> dict:
    """Strides and sizes of the staged tiles for the knobs' LOAD (f16 elements)."""
    bm, bn, bk, pad = knobs["BM"], knobs["BN"], knobs["BK"], knobs["PAD"]
    load, store, row_major = COOP_LOADS[knobs["LOAD"]]
    if row_major:  # tile_a [m][k], tile_b [k][n]
        sa, sb = bk + pad, bn + pad
        a_words, b_words = bm * sa, bk * sb
    else:  # tile_a [k][m], tile_b [n][k]
        sa, sb = bm + pad, bk + pad
        a_words, b_words = bk * sa, bn * sb
    nsg = (bm // knobs["WM"]) * (bn // knobs["WN"])
    return dict(load=load, store=store, row_major=row_major, sa=sa, sb=sb, a_words=a_words,
                b_words=b_words, nsg=nsg, bytes=2 * (a_words + b_words) + 4 * nsg * 256)


def matmul_coop_space(m: int, n: int, k: int, load: str = "col") -> list[dict]:
    """Warp tilings and BK (the load order and padding stay the defaults'): tiles at
    most twice the product's sides (rounded up to a power of two), BK at most K's."""
    space = []
    for bm, bn, wm, wn in COOP_WARP_TILES:
        for bk in COOP_BKS:
            knobs = {"BM": bm, "BN": bn, "WM": wm, "WN": wn, "BK": bk, "PAD": 8, "LOAD": load}
            if (bm <= 2 * pow2_ceil(m) and bn <= 2 * pow2_ceil(n)
                    and bk <= max(16, pow2_ceil(k))
                    and _coop_layout(knobs)["bytes"] <= COOP_WORKGROUP_BYTES):
                space.append(knobs)
    return space


def _matmul_coop(src, materialized, out, tnode, knobs, options: CompileOptions):
    a, b = tnode.inputs
    nb, m, k = a.shape
    n = b.shape[2]
    knobs = merge_knobs(matmul_coop_knobs(m, n), knobs)
    bm, bn, wm, wn, bk, pad = (knobs[x] for x in ("BM", "BN", "WM", "WN", "BK", "PAD"))
    t = COOP_TILE
    require(knobs["LOAD"] in COOP_LOADS, knobs, f"LOAD must be one of {sorted(COOP_LOADS)}")
    require(all(isinstance(v, int) and v >= 1 for v in (bm, bn, wm, wn, bk)), knobs,
            "tile sizes must be positive integers")
    require(wm % t == 0 and wn % t == 0 and bk % t == 0, knobs,
            f"WM, WN and BK must be multiples of {t}")
    require(bm % wm == 0 and bn % wn == 0, knobs, "WM must divide BM and WN divide BN")
    require(isinstance(pad, int) and pad >= 0 and pad % 8 == 0, knobs,
            "PAD must be a multiple of 8 (16 bytes: cooperative loads want aligned rows)")
    lay = _coop_layout(knobs)
    nsg, wg = lay["nsg"], lay["nsg"] * COOP_SUBGROUP
    require(wg <= MAX_WG, knobs, f"more than {MAX_WG} invocations")
    if nb > MAX_GRID:
        raise CompileError(f"matmul batch {nb} exceeds the grid limit {MAX_GRID}")
    functions = (loader(src, materialized, "load_a", a) + loader(src, materialized, "load_b", b))
    sa, sb, row_major = lay["sa"], lay["sb"], lay["row_major"]
    # Staging: consecutive invocations walk the operand's contiguous dim.
    a_idx = ("kk", "mm", bm) if contiguous_dim(a, materialized) == 1 else ("mm", "kk", bk)
    b_idx = ("nn", "kk", bk) if contiguous_dim(b, materialized) == 1 else ("kk", "nn", bn)
    a_at = "mm * {s} + kk" if row_major else "kk * {s} + mm"
    b_at = "kk * {s} + nn" if row_major else "nn * {s} + kk"
    operands = (
        ("a", a_idx, bm * bk, f"m0 + mm < {m} && k0 + kk < {k}", "load_a(b, m0 + mm, k0 + kk)",
         a_at.format(s=sa)),
        ("b", b_idx, bk * bn, f"k0 + kk < {k} && n0 + nn < {n}", "load_b(b, k0 + kk, n0 + nn)",
         b_at.format(s=sb)))
    loads = []
    for name, (hi, lo, width), count, cond, call, at in operands:
        for u in range(-(-count // wg)):
            load = (f"let t = lin + {u * wg}; let {hi} = t / {width}; let {lo} = t % {width};"
                    f" var v = 0.0; if ({cond}) {{ v = {call}; }} tile_{name}[{at}] = f16(v);")
            if (u + 1) * wg > count:  # a last round that only part of the workgroup loads
                load = f"if (lin + {u * wg} < {count}) {{ {load} }}"
            loads.append(f"        {{ {load} }}")
    ld, st = lay["load"], lay["store"]
    a_frag = "(wm + {o}) * {s} + kk" if row_major else "kk * {s} + wm + {o}"
    b_frag = "kk * {s} + wn + {o}" if row_major else "(wn + {o}) * {s} + kk"
    ti, tj = wm // t, wn // t
    mult = [f"            let a{i} = {ld}<coop_mat16x16<f16, A>>"
            f"(&tile_a[{a_frag.format(o=i * t, s=sa)}], {sa}u);" for i in range(ti)]
    mult += [f"            let b{j} = {ld}<coop_mat16x16<f16, B>>"
             f"(&tile_b[{b_frag.format(o=j * t, s=sb)}], {sb}u);" for j in range(tj)]
    mult += [f"            acc_{i}_{j} = coopMultiplyAdd(a{i}, b{j}, acc_{i}_{j});"
             for i in range(ti) for j in range(tj)]
    accs = [f"    var acc_{i}_{j} = {ld}<coop_mat16x16<f32, C>>(&tile_c[cbase], 16u);"
            for i in range(ti) for j in range(tj)]
    cell = "r * 16 + c" if row_major else "c * 16 + r"
    stores = []
    for i in range(ti):
        for j in range(tj):
            stores += snippet("matmul_coop_store").substitute(
                STORE_OP=st, ACC=f"acc_{i}_{j}", SUBGROUP=COOP_SUBGROUP, ROW_OFF=i * t,
                COL_OFF=j * t, M=m, N=n, CELL=cell).split("\n")
    slots = dict(functions=functions, M=m, N=n, K=k, BM=bm, BN=bn, BK=bk, WG=wg, NSG=nsg,
                 WARPS_N=bn // wn, WM=wm, WN=wn, A_WORDS=lay["a_words"], B_WORDS=lay["b_words"],
                 ACCUMULATORS="\n".join(accs), LOAD_TILES="\n".join(loads),
                 MULTIPLY="\n".join(mult), STORE_BLOCK="\n".join(stores),
                 workgroup_bytes=lay["bytes"])
    return "matmul_coop", slots, (math.ceil(n / bn), math.ceil(m / bm), nb), knobs


def _matmul_coop_space(out, tnode):
    a, b = tnode.inputs
    return matmul_coop_space(a.shape[1], b.shape[2], a.shape[2])
