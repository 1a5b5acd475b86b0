"""The accelerated matmul on a device's matrix units (f16 operands, f32 accumulation):
the unit's choice, knobs, space and generator (kernels/matmul_coop.wgsl). One generator
with two spellings of the matrix operations (options.MatrixUnit.api): Dawn's subgroup
matrices (`chromium_experimental_subgroup_matrix`) and wgpu-native's cooperative
matrices (`wgpu_cooperative_matrix`)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..ir.ir import CompileError
from ..options import CompileOptions, MatrixUnit
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

COOP_TILE = 16  # wgpu-native's cooperative matrices: 16 x 16 f16 operands, f32 results
COOP_SUBGROUP = 32  # invocations per subgroup wgpu-native's path is written for (NVIDIA's)
COOP_UNIT = MatrixUnit("cooperative-matrix", COOP_TILE, COOP_TILE, COOP_TILE, COOP_SUBGROUP)
# How the staged tiles meet the matrix loads: the load and store builtins and whether
# the tiles are laid out row-major (tile_a [m][k], tile_b [k][n]) or column-major
# (tile_a [k][m], tile_b [n][k]). naga's coopLoad reads column-major; coopLoadT reads
# rows (tools/coop_matmul.py tries the three on a device). Dawn's subgroupMatrixLoad
# takes the order as an argument: "row" and "col" both.
COOP_LOADS = {"col": ("coopLoad", "coopStore", False), "row": ("coopLoad", "coopStore", True),
              "rowT": ("coopLoadT", "coopStoreT", True)}
MATRIX_LOADS = {"cooperative-matrix": ("col", "row", "rowT"), "subgroup-matrix": ("row", "col")}
# Block and warp tiles, in units of the matrix's sides (m, n): BM, BN, WM, WN.
COOP_WARP_TILES = ((4, 4, 2, 2), (8, 4, 4, 2), (4, 8, 2, 4), (8, 8, 4, 2), (8, 8, 2, 4),
                   (8, 8, 4, 4))
COOP_BKS = (16, 32, 64)
COOP_WORKGROUP_BYTES = 32768  # the space keeps to 32 KiB (the defaults use at most 27 KiB)


def matrix_unit(features: Iterable[str], configs: Iterable) -> MatrixUnit | None:
    """The matrix unit the accelerated matmul uses on a device with `features`
    (kernelwright's names) and subgroup-matrix `configs` (runtimes.SubgroupMatrixConfig):
    a subgroup-matrix config with f16 operands, f32 results and one subgroup size (the
    workgroup is a whole number of subgroups), the largest product first; else
    wgpu-native's 16 x 16 x 16 cooperative matrices; None: neither (or no shader-f16 or
    subgroups)."""
    features = set(features)
    if not {"shader-f16", "subgroups"} <= features:
        return None
    if "subgroup-matrix" in features:
        usable = [c for c in configs if c.component == "f16" and c.result == "f32"
                  and c.min_subgroup == c.max_subgroup]
        if usable:
            c = max(usable, key=lambda c: (c.m * c.n * c.k, -c.max_subgroup))
            return MatrixUnit("subgroup-matrix", c.m, c.n, c.k, c.max_subgroup)
    if "cooperative-matrix" in features:
        return COOP_UNIT
    return None


def matmul_coop_knobs(m: int, n: int, unit: MatrixUnit = COOP_UNIT) -> dict:
    """8 x 8 matrices per tile in 8 subgroups of 4 x 2 accumulators for products of at
    least that, else 4 x 4 in 4 subgroups of 2 x 2 (on 16 x 16 matrices: 128 x 128 tiles
    with 64 x 32 warp tiles, or 64 x 64 with 32 x 32); BK 32; rows of the staged tiles
    padded by 8 f16 (16 bytes); the tiles' order the spelling's first."""
    large = m >= 8 * unit.m and n >= 8 * unit.n
    bm, bn, wm, wn = (8, 8, 4, 2) if large else (4, 4, 2, 2)
    return {"BM": bm * unit.m, "BN": bn * unit.n, "WM": wm * unit.m, "WN": wn * unit.n,
            "BK": max(32, unit.k), "PAD": 8, "LOAD": MATRIX_LOADS[unit.api][0]}


def _coop_layout(knobs: dict, unit: MatrixUnit = COOP_UNIT) -> dict:
    """Strides and sizes of the staged tiles for the knobs' LOAD (f16 elements)."""
    bm, bn, bk, pad = knobs["BM"], knobs["BN"], knobs["BK"], knobs["PAD"]
    row_major = COOP_LOADS[knobs["LOAD"]][2]
    if row_major:  # tile_a [m][k], tile_b [k][n]
        sa, sb = bk + pad, bn + pad
        a_words, b_words = bm * sa, bk * sb
    else:  # tile_a [k][m], tile_b [n][k]
        sa, sb = bm + pad, bk + pad
        a_words, b_words = bk * sa, bn * sb
    nsg = (bm // knobs["WM"]) * (bn // knobs["WN"])
    cell = unit.m * unit.n
    return dict(row_major=row_major, sa=sa, sb=sb, a_words=a_words, b_words=b_words, nsg=nsg,
                cell=cell, bytes=2 * (a_words + b_words) + 4 * nsg * cell)


def matmul_coop_space(m: int, n: int, k: int, unit: MatrixUnit = COOP_UNIT,
                      load: str | None = None) -> list[dict]:
    """Warp tilings and BK (the load order and padding stay the defaults'): tiles at
    most twice the product's sides (rounded up to a power of two), BK at most K's, the
    workgroup memory within COOP_WORKGROUP_BYTES."""
    load = load or MATRIX_LOADS[unit.api][0]
    space = []
    for bm, bn, wm, wn in COOP_WARP_TILES:
        for bk in COOP_BKS:
            knobs = {"BM": bm * unit.m, "BN": bn * unit.n, "WM": wm * unit.m,
                     "WN": wn * unit.n, "BK": bk, "PAD": 8, "LOAD": load}
            if (knobs["BM"] <= 2 * pow2_ceil(m) and knobs["BN"] <= 2 * pow2_ceil(n)
                    and bk % unit.k == 0 and bk <= max(16, pow2_ceil(k))
                    and _coop_layout(knobs, unit)["bytes"] <= COOP_WORKGROUP_BYTES):
                space.append(knobs)
    return space


def accelerates(unit: MatrixUnit | None, m: int, n: int, k: int) -> bool:
    """Whether an f32 product of m x k by k x n goes to the matrix units: at least one
    matrix on every side (smaller ones stay exact, on the strict matmul)."""
    return unit is not None and m >= unit.m and n >= unit.n and k >= unit.k


class _Spelling:
    """The WGSL of one matrix api: enable lines, and the statements that load an
    operand fragment, start an accumulator and store one to workgroup memory."""

    def __init__(self, unit: MatrixUnit, load: str):
        self.unit, self.load = unit, load
        self.sub = unit.api == "subgroup-matrix"
        self.row_major = COOP_LOADS[load][2]

    @property
    def enable(self) -> str:
        if self.sub:
            return "enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;"
        return "enable f16;\nenable wgpu_cooperative_matrix;"

    def operand(self, side: str, offset: str, stride: int) -> str:
        """Fragment `side` ("a" left, "b" right) at element `offset` of its tile."""
        u = self.unit
        if self.sub:
            kind = (f"subgroup_matrix_left<f16, {u.k}, {u.m}>" if side == "a"
                    else f"subgroup_matrix_right<f16, {u.n}, {u.k}>")
            col = "false" if self.row_major else "true"
            return f"subgroupMatrixLoad<{kind}>(&tile_{side}, u32({offset}), {col}, {stride}u)"
        role = "A" if side == "a" else "B"
        return (f"{COOP_LOADS[self.load][0]}<coop_mat{u.m}x{u.n}<f16, {role}>>"
                f"(&tile_{side}[{offset}], {stride}u)")

    def accumulator(self) -> str:
        """A zero accumulator (wgpu-native's: loaded from the zeroed tile_c)."""
        u = self.unit
        if self.sub:
            return f"subgroup_matrix_result<f32, {u.n}, {u.m}>()"
        return f"{COOP_LOADS[self.load][0]}<coop_mat{u.m}x{u.n}<f32, C>>(&tile_c[cbase], {u.n}u)"

    def store(self, acc: str) -> str:
        """`acc` to this subgroup's slice of tile_c, row-major for Dawn's (stride n) and
        in the LOAD's order for wgpu-native's."""
        if self.sub:
            return f"subgroupMatrixStore(&tile_c, u32(cbase), {acc}, false, {self.unit.n}u);"
        return f"{COOP_LOADS[self.load][1]}({acc}, &tile_c[cbase], {self.unit.n}u);"

    @property
    def cell(self) -> str:
        """The tile_c index of row r, column c of a stored accumulator."""
        n, m = self.unit.n, self.unit.m
        return f"r * {n} + c" if self.sub or self.row_major else f"c * {m} + r"


def _matmul_coop(src, materialized, out, tnode, knobs, options: CompileOptions):
    unit = options.matrix
    if unit is None:
        raise CompileError("the accelerated matmul needs a matrix unit (CompileOptions.matrix)")
    a, b = tnode.inputs
    nb, m, k = a.shape
    n = b.shape[2]
    knobs = merge_knobs(matmul_coop_knobs(m, n, unit), knobs)
    bm, bn, wm, wn, bk, pad = (knobs[x] for x in ("BM", "BN", "WM", "WN", "BK", "PAD"))
    loads = MATRIX_LOADS[unit.api]
    require(knobs["LOAD"] in loads, knobs, f"LOAD must be one of {list(loads)} on {unit.api}")
    require(all(isinstance(v, int) and v >= 1 for v in (bm, bn, wm, wn, bk)), knobs,
            "tile sizes must be positive integers")
    require(wm % unit.m == 0 and wn % unit.n == 0 and bk % unit.k == 0, knobs,
            f"WM, WN and BK must be multiples of the matrix's {unit.m}, {unit.n} and {unit.k}")
    require(bm % wm == 0 and bn % wn == 0, knobs, "WM must divide BM and WN divide BN")
    require(isinstance(pad, int) and pad >= 0 and pad % 8 == 0, knobs,
            "PAD must be a multiple of 8 (16 bytes: matrix loads want aligned rows)")
    spell = _Spelling(unit, knobs["LOAD"])
    lay = _coop_layout(knobs, unit)
    nsg, wg = lay["nsg"], lay["nsg"] * unit.subgroup
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
    staging = []
    for name, (hi, lo, width), count, cond, call, at in operands:
        for u in range(-(-count // wg)):
            load = (f"let t = lin + {u * wg}; let {hi} = t / {width}; let {lo} = t % {width};"
                    f" var v = 0.0; if ({cond}) {{ v = {call}; }} tile_{name}[{at}] = f16(v);")
            if (u + 1) * wg > count:  # a last round that only part of the workgroup loads
                load = f"if (lin + {u * wg} < {count}) {{ {load} }}"
            staging.append(f"        {{ {load} }}")
    a_frag = "(wm + {o}) * {s} + kk" if row_major else "kk * {s} + wm + {o}"
    b_frag = "kk * {s} + wn + {o}" if row_major else "(wn + {o}) * {s} + kk"
    ti, tj = wm // unit.m, wn // unit.n
    mult = [f"            let a{i} = {spell.operand('a', a_frag.format(o=i * unit.m, s=sa), sa)};"
            for i in range(ti)]
    mult += [f"            let b{j} = {spell.operand('b', b_frag.format(o=j * unit.n, s=sb), sb)};"
             for j in range(tj)]
    mult += [f"            acc_{i}_{j} = {_mma(unit)}(a{i}, b{j}, acc_{i}_{j});"
             for i in range(ti) for j in range(tj)]
    accs = [f"    var acc_{i}_{j} = {spell.accumulator()};" for i in range(ti) for j in range(tj)]
    stores = []
    for i in range(ti):
        for j in range(tj):
            stores += snippet("matmul_coop_store").substitute(
                STORE_ACC=spell.store(f"acc_{i}_{j}"), SUBGROUP=unit.subgroup, CELLS=lay["cell"],
                COLS=unit.n, ROW_OFF=i * unit.m, COL_OFF=j * unit.n, M=m, N=n,
                CELL=spell.cell).split("\n")
    slots = dict(functions=functions, ENABLE=spell.enable, M=m, N=n, K=k, BM=bm, BN=bn, BK=bk,
                 TK=unit.k, WG=wg, NSG=nsg, CELLS=lay["cell"], WARPS_N=bn // wn, WM=wm, WN=wn,
                 A_WORDS=lay["a_words"], B_WORDS=lay["b_words"], ACCUMULATORS="\n".join(accs),
                 LOAD_TILES="\n".join(staging), MULTIPLY="\n".join(mult),
                 STORE_BLOCK="\n".join(stores), workgroup_bytes=lay["bytes"])
    return "matmul_coop", slots, (math.ceil(n / bn), math.ceil(m / bm), nb), knobs


def _mma(unit: MatrixUnit) -> str:
    """The multiply-accumulate builtin of the unit's api."""
    return ("subgroupMatrixMultiplyAccumulate" if unit.api == "subgroup-matrix"
            else "coopMultiplyAdd")


def _matmul_coop_space(out, tnode, options: CompileOptions):
    a, b = tnode.inputs
    return matmul_coop_space(a.shape[1], b.shape[2], a.shape[2], options.matrix or COOP_UNIT)
