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
    plain_strides,
    pow2_ceil,
    require,
    snippet,
)
from .matmul import _tile_origin, output_index

COOP_TILE = 16  # wgpu-native's cooperative matrices: 16 x 16 f16 operands, f32 results
COOP_SUBGROUP = 32  # invocations per subgroup wgpu-native's path is written for (NVIDIA's)
COOP_UNIT = MatrixUnit("cooperative-matrix", COOP_TILE, COOP_TILE, COOP_TILE, COOP_SUBGROUP)
# How the staged tiles meet the matrix loads: the load and store builtins and whether
# the tiles are laid out row-major (tile_a [m][k], tile_b [k][n]) or column-major
# (tile_a [k][m], tile_b [n][k]). naga's coopLoad reads column-major; coopLoadT reads
# rows (tools/coop_matmul.py tries the three on a device). Dawn's subgroupMatrixLoad
# takes the order as an argument: "row" and "col" both, and TILE_ORDERS' mixed ones.
COOP_LOADS = {"col": ("coopLoad", "coopStore", False), "row": ("coopLoad", "coopStore", True),
              "rowT": ("coopLoadT", "coopStoreT", True)}
# Dawn's loads take the order each, so its tiles may also each follow the operand's
# contiguous dim: "k", both K-contiguous (tile_a [m][k], tile_b [n][k]: A @ B^T, a
# linear's weight), or "mn" (tile_a [k][m], tile_b [k][n]). Whether tile_a and tile_b
# are row-major, by LOAD:
TILE_ORDERS = {"row": (True, True), "col": (False, False), "rowT": (True, True),
               "k": (True, False), "mn": (False, True)}
MATRIX_LOADS = {"cooperative-matrix": ("col", "row", "rowT"),
                "subgroup-matrix": ("row", "col", "k", "mn")}
# Block and warp tiles, in units of the matrix's sides (m, n): BM, BN, WM, WN. The last
# two (128 x 256 and 256 x 128 on 16 x 16 matrices) are 8 subgroups of 4 x 4
# accumulators: 128 f32 registers a lane for the accumulators on NVIDIA's.
COOP_WARP_TILES = ((4, 4, 2, 2), (8, 4, 4, 2), (4, 8, 2, 4), (8, 8, 4, 2), (8, 8, 2, 4),
                   (8, 8, 4, 4), (8, 16, 4, 4), (16, 8, 4, 4))
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
    padded by 8 f16 (16 bytes); the tiles' order the spelling's first; four elements a
    load into registers during the multiplies (VEC 4, PREFETCH 1), one workgroup buffer,
    tiles in grid order, the epilogue one accumulator at a time (STAGES 1, GROUP 0, EPI
    "acc"). Measured on an H100 through Dawn (baselines/coop_matmul_dawn_h100.json,
    `tools/coop_matmul.py --quick`): 4096^3 0.92 ms against 1.51 with VEC 1, PREFETCH 0
    (the first kernel), 8192^3 8.0 against 11.4; two staged buffers, a row epilogue, BK
    16 or 64 x 64 warp tiles were no faster, 64 KiB of workgroup memory does not fit
    (the adapter's limit is 48 KiB)."""
    large = m >= 8 * unit.m and n >= 8 * unit.n
    bm, bn, wm, wn = (8, 8, 4, 2) if large else (4, 4, 2, 2)
    return {"BM": bm * unit.m, "BN": bn * unit.n, "WM": wm * unit.m, "WN": wn * unit.n,
            "BK": max(32, unit.k), "PAD": 8, "LOAD": MATRIX_LOADS[unit.api][0], "VEC": 4,
            "PREFETCH": 1, "STAGES": 1, "GROUP": 0, "EPI": "acc"}


def _coop_layout(knobs: dict, unit: MatrixUnit = COOP_UNIT) -> dict:
    """Strides and sizes of the staged tiles for the knobs' LOAD (f16 elements; a_words
    and b_words per stage) and of the f32 scratch the epilogue stores through."""
    bm, bn, bk, pad = knobs["BM"], knobs["BN"], knobs["BK"], knobs["PAD"]
    a_row, b_row = TILE_ORDERS[knobs["LOAD"]]
    sa = bk + pad if a_row else bm + pad  # tile_a [m][k] or [k][m]
    sb = bn + pad if b_row else bk + pad  # tile_b [k][n] or [n][k]
    a_words = (bm if a_row else bk) * sa
    b_words = (bk if b_row else bn) * sb
    nsg = (bm // knobs["WM"]) * (bn // knobs["WN"])
    cell = unit.m * unit.n
    scratch = cell if knobs.get("EPI", "acc") == "acc" else unit.m * knobs["WN"]
    stages = knobs.get("STAGES", 1)
    return dict(a_row=a_row, b_row=b_row, sa=sa, sb=sb, a_words=a_words, b_words=b_words, nsg=nsg,
                cell=cell, scratch=scratch,
                bytes=2 * stages * (a_words + b_words) + 4 * nsg * scratch)


# The pipelines the space offers (VEC, PREFETCH, STAGES, EPI): the defaults' (wide loads
# into registers during the multiplies), the first-measured kernel's (scalar loads staged
# at once), and two staged buffers or the epilogue a row of accumulators at a time.
COOP_PIPELINES = ((4, 1, 1, "acc"), (1, 0, 1, "acc"), (4, 1, 1, "row"), (4, 1, 2, "row"))
COOP_GROUP = 8  # tile rows per band in the space's GROUP variants of large products


def matmul_coop_space(m: int, n: int, k: int, unit: MatrixUnit = COOP_UNIT,
                      load: str | None = None,
                      workgroup_bytes: int = COOP_WORKGROUP_BYTES) -> list[dict]:
    """Warp tilings, BK and the pipelines of COOP_PIPELINES (the load order and padding
    stay the defaults'; GROUP COOP_GROUP beside 0 where the grid has more than one band
    of tiles): tiles at most twice the product's sides (rounded up to a power of two),
    BK at most K's, the workgroup memory within `workgroup_bytes`."""
    load = load or MATRIX_LOADS[unit.api][0]
    space = []
    for bm, bn, wm, wn in COOP_WARP_TILES:
        for bk in COOP_BKS:
            for vec, prefetch, stages, epi in COOP_PIPELINES:
                knobs = {"BM": bm * unit.m, "BN": bn * unit.n, "WM": wm * unit.m,
                         "WN": wn * unit.n, "BK": bk, "PAD": 8, "LOAD": load, "VEC": vec,
                         "PREFETCH": prefetch, "STAGES": stages, "GROUP": 0, "EPI": epi}
                if not (knobs["BM"] <= 2 * pow2_ceil(m) and knobs["BN"] <= 2 * pow2_ceil(n)
                        and bk % unit.k == 0 and bk <= max(16, pow2_ceil(k))
                        and _coop_layout(knobs, unit)["bytes"] <= workgroup_bytes):
                    continue
                space.append(knobs)
                if prefetch and m > COOP_GROUP * knobs["BM"] and n > knobs["BN"]:
                    space.append({**knobs, "GROUP": COOP_GROUP})
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
        self.rows = TILE_ORDERS[load]  # whether tile_a, tile_b are row-major
        self.row_major = self.rows[0]  # wgpu-native's: one order for both

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
            col = "false" if self.rows[side == "b"] else "true"
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

    def scratch_major(self) -> bool:
        """Whether results sit row-major in tile_c (Dawn's always; wgpu-native's in the
        LOAD's order)."""
        return self.sub or self.row_major

    def store(self, acc: str, j: int, width: int) -> str:
        """`acc`, the j-th of a row of accumulators `width` columns wide in all, to this
        subgroup's slice of tile_c: row-major with stride `width`, or column-major (the
        matrices one after another, stride m)."""
        u = self.unit
        off = j * u.n if self.scratch_major() else j * u.n * u.m
        at = f"cbase + {off}" if off else "cbase"
        stride = width if self.scratch_major() else u.m
        if self.sub:
            return f"subgroupMatrixStore(&tile_c, u32({at}), {acc}, false, {stride}u);"
        return f"{COOP_LOADS[self.load][1]}({acc}, &tile_c[{at}], {stride}u);"

    def cell(self, width: int) -> str:
        """The tile_c index of row r, column c of a stored row of accumulators."""
        return f"r * {width} + c" if self.scratch_major() else f"c * {self.unit.m} + r"


_LANES = "xyzw"


class _Staging:
    """How one operand's BK-deep tile travels from its loader to workgroup memory: each
    invocation's rounds of one element or four consecutive ones along the operand's
    contiguous dim (VEC 4: a 16-byte load through a vec4 view of a plain f32 buffer, else
    one `load_a4`/`load_b4` call whose four lanes share their index arithmetic), held in
    registers `<n>r<u>` between the fetch (at K offset `kb`) and the store (rounded to
    f16, at the tile offset the PUT is given)."""

    def __init__(self, src, materialized, name: str, x, knobs: dict, lay: dict, wg: int,
                 kdim: int):
        self.name = name
        a = name == "a"
        row_dim = 1 if a else 2
        self.rows = knobs["BM" if a else "BN"]
        self.size = x.shape[row_dim]
        self.base = "m0" if a else "n0"
        self.kdim = kdim
        self.bk = bk = knobs["BK"]
        cdim = contiguous_dim(x, materialized)
        # consecutive invocations walk the contiguous dim (A: K unless M is; B: N unless K is)
        along_rows = cdim == row_dim if a else cdim != 3 - row_dim
        vdim = row_dim if along_rows else 3 - row_dim
        self.along_rows = along_rows
        self.view = self.lanes = None
        width = 1
        if knobs["VEC"] == 4 and x.shape[vdim] % 4 == 0:
            plain = plain_strides(x, materialized)
            if plain is not None:
                root, offset, st = plain
                if (st[vdim] == 1 and offset % 4 == 0
                        and all(s % 4 == 0 for d, s in enumerate(st) if d != vdim)):
                    self.view = (src.view4(root), offset, st)
            if self.view is None:
                self.lanes = vdim
            width = 4
        self.width = width
        self.units = self.rows * bk // width
        self.lo_width = (self.rows if along_rows else bk) // width
        self.rounds = -(-self.units // wg)
        self.wg = wg
        if a:  # tile_a [m][k] (row-major) or [k][m]
            self.stride_r, self.stride_k = (lay["sa"], 1) if lay["a_row"] else (1, lay["sa"])
        else:  # tile_b [k][n] (row-major) or [n][k]
            self.stride_r, self.stride_k = (1, lay["sb"]) if lay["b_row"] else (lay["sb"], 1)
        self.row_dim, self.x = row_dim, x

    def call(self, row: str, k: str, suffix: str = "") -> str:
        n = self.name
        return (f"load_{n}{suffix}(b, {row}, {k})" if n == "a"
                else f"load_{n}{suffix}(b, {k}, {row})")

    def _partial(self, u: int, stmt: str) -> str:
        if (u + 1) * self.wg > self.units:  # a last round that only part of the group loads
            return f"if (lin + {u * self.wg} < {self.units}) {{ {stmt} }}"
        return stmt

    def registers(self) -> list[str]:
        t = "f32" if self.width == 1 else "vec4<f32>"
        return [f"    var {self.name}r{u}: {t};" for u in range(self.rounds)]

    def setup(self) -> list[str]:
        """Per round, what does not depend on kb: the tile row and K offset, the tile
        slot, the row's bounds test and a vec4 view's address but for its K term."""
        n, lines = self.name, []
        for u in range(self.rounds):
            lo = f"{n}t{u} % {self.lo_width}" + (f" * {self.width}" if self.width > 1 else "")
            hi = f"{n}t{u} / {self.lo_width}"
            r, kq = (f"{n}l{u}", f"{n}h{u}") if self.along_rows else (f"{n}h{u}", f"{n}l{u}")
            line = (f"    let {n}t{u} = lin + {u * self.wg}; let {n}h{u} = {hi};"
                    f" let {n}l{u} = {lo};"
                    f" let {n}s{u} = {_term(r, self.stride_r)} + {_term(kq, self.stride_k)};")
            if self.view is not None:
                _, offset, st = self.view
                terms = [str(offset // 4)] if offset else []
                for dim, idx in ((0, "b"), (self.row_dim, f"({self.base} + {r})"),
                                 (self.kdim, kq)):
                    if st[dim] == 1:
                        terms.append(f"{idx} / 4")
                    elif st[dim]:
                        terms.append(f"{idx} * {st[dim] // 4}")
                line += f" let {n}i{u} = {' + '.join(terms) or '0'};"
            lines.append(line)
        return lines

    def fetch(self, k: int) -> list[str]:
        """The loads of the tile at K offset `kb` into the registers; a bounds test is
        written only where a tile can cross M, N or K."""
        n, lines = self.name, []
        for u in range(self.rounds):
            r, kq = (f"{n}l{u}", f"{n}h{u}") if self.along_rows else (f"{n}h{u}", f"{n}l{u}")
            reg = f"{n}r{u}"
            tests = []
            if self.size % self.rows:
                tests.append(f"{self.base} + {r} < {self.size}")
            if k % self.bk:  # (a tile past K is never fetched: the K loop tests kb)
                tests.append(f"kb + {kq} < {k}")
            if self.view is not None:
                name, _, st = self.view
                kst = st[self.kdim]
                kterm = "kb / 4" if kst == 1 else f"kb * {kst // 4}"
                value = f"{name}[{n}i{u} + {kterm}]"
            else:
                value = self.call(f"{self.base} + {r}", f"kb + {kq}",
                                  "4" if self.lanes is not None else "")
            zero = "0.0" if self.width == 1 else "vec4<f32>(0.0)"
            body = (f"{reg} = {zero}; if ({' && '.join(tests)}) {{ {reg} = {value}; }}"
                    if tests else f"{reg} = {value};")
            lines.append(f"        {{ {self._partial(u, body)} }}")
        return lines

    def put(self, off: str) -> list[str]:
        """The registers rounded to f16 into the staged tile at `off` + each slot."""
        n, lines = self.name, []
        step = self.stride_r if self.along_rows else self.stride_k
        for u in range(self.rounds):
            if self.width == 1:
                body = f"tile_{n}[{off}{n}s{u}] = f16({n}r{u});"
            else:
                body = " ".join(f"tile_{n}[{off}{n}s{u}{f' + {e * step}' if e else ''}]"
                                f" = f16({n}r{u}.{_LANES[e]});" for e in range(4))
            lines.append(f"        {{ {self._partial(u, body)} }}")
        return lines


def _term(var: str, stride: int) -> str:
    return var if stride == 1 else f"{var} * {stride}"


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
    require(knobs["VEC"] in (1, 4) and bk % 4 == 0, knobs, "VEC is 1 or 4 (BK a multiple of 4)")
    require(knobs["PREFETCH"] in (0, 1), knobs, "PREFETCH is 0 or 1")
    require(knobs["STAGES"] in (1, 2), knobs, "STAGES is 1 or 2")
    require(isinstance(knobs["GROUP"], int) and knobs["GROUP"] >= 0, knobs,
            "GROUP must be a non-negative integer")
    require(knobs["EPI"] in ("acc", "row"), knobs, 'EPI is "acc" or "row"')
    spell = _Spelling(unit, knobs["LOAD"])
    lay = _coop_layout(knobs, unit)
    nsg, wg = lay["nsg"], lay["nsg"] * unit.subgroup
    require(wg <= MAX_WG, knobs, f"more than {MAX_WG} invocations")
    if nb > MAX_GRID:
        raise CompileError(f"matmul batch {nb} exceeds the grid limit {MAX_GRID}")
    scalar = loader(src, materialized, "load_a", a) + loader(src, materialized, "load_b", b)
    ops = [_Staging(src, materialized, "a", a, knobs, lay, wg, 2),
           _Staging(src, materialized, "b", b, knobs, lay, wg, 1)]
    functions = scalar + "".join(loader(src, materialized, f"load_{op.name}4", x, lanes=op.lanes)
                                 for op, x in zip(ops, (a, b)) if op.lanes is not None)
    sa, sb = lay["sa"], lay["sb"]
    two = knobs["STAGES"] == 2
    prefetch = knobs["PREFETCH"] == 1
    a_frag = "(wm + {o}) * {s} + kk" if lay["a_row"] else "kk * {s} + wm + {o}"
    b_frag = "kk * {s} + wn + {o}" if lay["b_row"] else "(wn + {o}) * {s} + kk"
    if two:
        a_frag, b_frag = "ra + " + a_frag, "rb + " + b_frag
    ti, tj = wm // unit.m, wn // unit.n
    mult = [f"            let a{i} = {spell.operand('a', a_frag.format(o=i * unit.m, s=sa), sa)};"
            for i in range(ti)]
    mult += [f"            let b{j} = {spell.operand('b', b_frag.format(o=j * unit.n, s=sb), sb)};"
             for j in range(tj)]
    mult += [f"            acc_{i}_{j} = {_mma(unit)}(a{i}, b{j}, acc_{i}_{j});"
             for i in range(ti) for j in range(tj)]
    accs = [f"    var acc_{i}_{j} = {spell.accumulator()};" for i in range(ti) for j in range(tj)]

    def block(lines: list[str], guard: str, inner: bool) -> str:
        """Statements in a block (`guard`: its condition), inside the K loop or not."""
        pad = "    " if inner else ""
        return "\n".join([f"    {pad}{guard}{{"] + [pad + x for x in lines] + [f"    {pad}}}"])

    def fetch(kb: str, guard: str = "", put: str | None = None, inner: bool = True) -> str:
        body = [f"        let kb = {kb};"] + ops[0].fetch(k) + ops[1].fetch(k)
        if put is not None:
            body += ops[0].put(put.format("a")) + ops[1].put(put.format("b"))
        return block(body, guard, inner)

    def put(off: str, guard: str = "") -> str:
        return block(ops[0].put(off.format("a")) + ops[1].put(off.format("b")), guard, True)

    more = f"if (k0 + {bk} < {k}) "
    if two:
        loop = snippet("matmul_coop_loop2").substitute(
            K=k, BK=bk, TK=unit.k, A_STAGE=lay["a_words"], B_STAGE=lay["b_words"],
            FIRST=fetch("0", put="", inner=False), MULTIPLY="\n".join(mult),
            FETCH_NEXT=fetch(f"k0 + {bk}", more, None if prefetch else "w{} + "),
            PUT_LATE=put("w{} + ", more) if prefetch else "")
    else:
        loop = snippet("matmul_coop_loop1").substitute(
            K=k, BK=bk, TK=unit.k, FETCH_FIRST=fetch("0", inner=False) if prefetch else "",
            FETCH_NOW="" if prefetch else fetch("k0"), PUT=put(""),
            FETCH_NEXT=fetch(f"k0 + {bk}", more) if prefetch else "",
            MULTIPLY="\n".join(mult))
    stores = []
    for i in range(ti):
        if knobs["EPI"] == "acc":
            for j in range(tj):
                stores += snippet("matmul_coop_store").substitute(
                    STORE_ACC=spell.store(f"acc_{i}_{j}", 0, unit.n), SUBGROUP=unit.subgroup,
                    CELLS=lay["cell"], COLS=unit.n, ROW_OFF=i * unit.m, COL_OFF=j * unit.n,
                    M=m, N=n, GI=output_index(tnode), CELL=spell.cell(unit.n)).split("\n")
        else:
            stores += snippet("matmul_coop_store_row").substitute(
                STORE_ACCS="\n    ".join(spell.store(f"acc_{i}_{j}", j, wn) for j in range(tj)),
                SUBGROUP=unit.subgroup, STRIP=lay["scratch"], WN=wn, ROW_OFF=i * unit.m, M=m,
                N=n, GI=output_index(tnode), CELL=spell.cell(wn)).split("\n")
    gx, gy = math.ceil(n / bn), math.ceil(m / bm)
    slots = dict(functions=functions, key_functions=scalar, ENABLE=spell.enable, BM=bm, BN=bn,
                 WG=wg, NSG=nsg, SCRATCH=lay["scratch"], WARPS_N=bn // wn, WM=wm, WN=wn,
                 A_WORDS=lay["a_words"] * knobs["STAGES"],
                 B_WORDS=lay["b_words"] * knobs["STAGES"],
                 ORIGIN=_tile_origin(knobs["GROUP"], gx, gy, bm, bn),
                 REGISTERS="\n".join(ops[0].registers() + ops[1].registers()),
                 SETUP="\n".join(ops[0].setup() + ops[1].setup()),
                 ACCUMULATORS="\n".join(accs), K_LOOP=loop, STORE_BLOCK="\n".join(stores),
                 workgroup_bytes=lay["bytes"])
    return "matmul_coop", slots, (gx, gy, nb), knobs


def _mma(unit: MatrixUnit) -> str:
    """The multiply-accumulate builtin of the unit's api."""
    return ("subgroupMatrixMultiplyAccumulate" if unit.api == "subgroup-matrix"
            else "coopMultiplyAdd")


def _matmul_coop_space(out, tnode, options: CompileOptions):
    a, b = tnode.inputs
    return matmul_coop_space(a.shape[1], b.shape[2], a.shape[2], options.matrix or COOP_UNIT)
