"""Scans (cumulative sums, products, extrema): knobs, space, workgroup memory and
generator for the scan templates (kernels/scan*.wgsl)."""

from __future__ import annotations

import math

from ..codegen.codegen import (
    template,
    to_buffer,
)
from ..dtypes import element_type
from ..ir.ir import CompileError
from ..options import CompileOptions
from .common import (
    MAX_GRID,
    WORKGROUP_BYTES,
    XYZW,
    check_wg,
    fold_vals,
    loader,
    merge_knobs,
    pow2_ceil,
    require,
    vec4_view,
)

SCANNERS = {
    # op: (accumulator type, identity, combine body (a before b), leaf from v at r, final).
    # f32 max/min propagate NaN, and the arg scans follow torch.cummax: ties and NaNs go
    # to the later element, and a NaN, once seen, is the running max (or min).
    # logaddexp returns the other operand of a -inf (tested on its bits) rather than compute
    # with it: Mesa 26.1 folds abs(-inf - b) to -inf where it sees the identity (codegen's
    # F32_BITS note; logcumsumexp gave inf there on both runtimes).
    "sum": ("{t}", "{zero}", "return a + b;", "v", "acc"),
    "prod": ("{t}", "{one}", "return a * b;", "v", "acc"),
    "max": ("{t}", "{lowest}", "{nan_ab}return max(a, b);", "v", "acc"),
    "min": ("{t}", "{highest}", "{nan_ab}return min(a, b);", "v", "acc"),
    "logaddexp": ("f32", "{lowest}",
                  "if (bitcast<u32>(a) == 0xff800000u) {{ return b; }} "
                  "if (bitcast<u32>(b) == 0xff800000u) {{ return a; }} "
                  "let m = max(a, b); if ((bitcast<u32>(m) & 0x7fffffffu) == 0x7f800000u) "
                  "{{ return m; }} return m + log(1.0 + exp(-abs(a - b)));", "v", "acc"),
    "argmax": ("ArgAcc", "ArgAcc({lowest}, -1)",
               "if (b.i >= 0 && (a.i < 0 || {nan_b} || (!{nan_a} && b.v >= a.v))) "
               "{{ return b; }} return a;", "ArgAcc(v, r)", "acc.i"),
    "argmin": ("ArgAcc", "ArgAcc({highest}, -1)",
               "if (b.i >= 0 && (a.i < 0 || {nan_b} || (!{nan_a} && b.v <= a.v))) "
               "{{ return b; }} return a;", "ArgAcc(v, r)", "acc.i"),
}


# A scan along a dim that is not the last (x[A, R, B], B > 1) takes one invocation per
# column (STAGE 3, kernels/scan_cols.wgsl) when its columns are at least this many
# consecutive elements (a warp's loads coalesce into 64-byte runs or more) and there
# are enough of them to occupy the GPU (each column is one invocation: fewer would
# leave most SMs idle, where the row kernels run a workgroup per column).
SCAN_COLS_MIN_B = 16
SCAN_COLS_MIN_COLUMNS = 32768


def scan_columns(inner: int, columns: int) -> bool:
    """Whether a scan of `columns` columns (A * B) of B consecutive elements takes STAGE 3."""
    return inner >= SCAN_COLS_MIN_B and columns >= SCAN_COLS_MIN_COLUMNS


def scan_knobs(r: int, acc_bytes: int = 4, inner: int = 1, columns: int = 1,
               vec4_loads: bool = False) -> dict:
    """Columns (`scan_columns`: B = `inner` of at least 16, 32768 `columns` or more): STAGE 3,
    WG 256, one invocation per 4 adjacent columns (VEC 4: 16-byte loads and stores) with
    ITEMS 8 loads in flight where the input is read 16 bytes at a time (`vec4_loads`: a
    plain buffer, B a multiple of 4), else one per column with ITEMS 4. With a computed
    loader VEC 4 only quarters the invocations: Mamba-2's segment sums (level3/024,
    exp(-x) masked, 262144 columns of 256) took 0.476 ms against 0.376 with VEC 1
    (2026-12-02b, bench/results/profile_024_h200_2026-12-02b.json).
    Measured on the H200 (2026-12-02, bench/results/
    memory_variants_scan_cols_permute_h200_2026-12-02.json and
    memory_variants_scan_cols_vec4_h200_2026-12-02b.json), a 512 x 512 x 512 cumsum
    along dim 1: VEC 1 with ITEMS 1, 4, 8, 16 0.383, 0.307, 0.321, 0.310 ms (3.50 TB/s;
    PyTorch 0.38 ms); VEC 4 with ITEMS 4 and 8 0.294 and **0.291 ms** (3.69 TB/s, 86% of
    4.3); the row kernels of STAGE 0 and 1 (one workgroup per column, its loads 2 KiB
    apart) 2.89-3.40 ms. Short rows: one element per invocation (WG
    the row length's power of two, at least 32), or 2 or 3 (ITEMS) per invocation of 256,
    each read by its invocation (STAGE 0, kernels/scan.wgsl). Rows of more than 768: STAGE 2
    (kernels/scan_regs.wgsl), the chunk held in registers in groups of 4 consecutive
    elements (VEC 4) and the invocations' totals scanned by raking (SUMS 1, 3 barriers),
    ITEMS 4 to 32 (a chunk of at most the row; fewer where the arg scans' 8-byte totals
    would not fit). Measured on the H200, 16384 x 8192 cumsum (2026-12-01m,
    bench/results/memory_variants_scan_h200_2026-12-01m.json; PyTorch 0.59 ms): STAGE 2 VEC
    4 SUMS 1 with ITEMS 8, 16, 32: 0.277, 0.270, **0.264 ms** (4.07 TB/s, 95% of the copy
    bandwidth); SUMS 0 (the tree) 0.272 and 0.269 at 16 and 32; scalar groups (VEC 1) 0.285;
    STAGE 1, the default before, 0.413 ms (0.313 with SUMS 1); STAGE 0 ITEMS 4 0.630.
    (2026-12-01g: STAGE 0 with ITEMS 1, 2, 4, 8 1.43, 0.77, 0.63, 1.29 ms, STAGE 1 1.58,
    0.87, 0.52, 0.41.)"""
    if scan_columns(inner, columns):
        if vec4_loads and inner % 4 == 0:
            return {"WG": 256, "ITEMS": 8 if r >= 8 else 4, "STAGE": 3, "VEC": 4}
        return {"WG": 256, "ITEMS": min(4, r), "STAGE": 3}
    wg = min(256, max(32, pow2_ceil(r)))
    items = 1 if r <= wg else math.ceil(r / wg)
    if items < 4:
        return {"WG": wg, "ITEMS": items, "STAGE": 0}
    items = 4
    while items < 32 and wg * items * 2 <= r:
        items *= 2
    knobs = {"WG": wg, "ITEMS": items, "STAGE": 2, "VEC": 4, "SUMS": 1}
    while knobs["ITEMS"] > 4 and scan_workgroup_bytes(knobs, acc_bytes) > WORKGROUP_BYTES:
        knobs["ITEMS"] //= 2  # the arg scans' 8-byte totals stage half as many
    return knobs


# The scan template's knobs past WG, ITEMS and STAGE, and their values when a setting
# leaves them out (settings are written without them then, as before they existed):
# VEC (STAGE 2: elements per group, 4 with 16-byte loads and stores where the row
# allows) and SUMS (the scan of the invocations' totals: 0 the tree of scan_sums.wgsl,
# 1 the raking of scan_rake.wgsl).
SCAN_EXTRA_KNOBS = {"VEC": 1, "SUMS": 0}


def scan_space(r: int, inner: int = 1, columns: int = 1) -> list[dict]:
    """Columns (`scan_columns`): STAGE 3 at WG 64, 128 and 256 with 1, 4, 8 and 16 items (at
    most the column), and where B is a multiple of 4 with VEC 4 (4 columns per invocation,
    16-byte loads and stores: the default, scan_knobs) at WG 64 and 256 with 4 and 8 items, then
    the row settings. STAGE 0 and 1 at every WG and ITEMS up to 8
    whose chunk is at most twice the row (rows longer than 2048: from 4 items, and STAGE 0
    at 4 only: on the H200 at 8192, fewer items were 1.9-3.9x slower than the default, STAGE
    0 ITEMS 8 3.1x), then, at WG 256 (the settings tools/kernels.py --variants measures),
    the raked scan of the totals (SUMS 1) on STAGE 1 and the register-held rows of STAGE 2:
    ITEMS 8 in scalars (any loader) and VEC 4 groups of 8, 16 and 32 items, rows up to 8192
    in one pass (with the tree of SUMS 0 too, against the raking)."""
    long = r > 2048
    space = [{"WG": wg, "ITEMS": items, "STAGE": stage} for stage in (0, 1)
             for wg in (64, 128, 256) for items in (1, 2, 4, 8)
             if wg <= max(64, pow2_ceil(r)) and wg * items <= max(64, 2 * r)
             and not (long and (items < 4 or stage == 0 and items > 4))]
    new = [{"STAGE": 1, "ITEMS": 8, "SUMS": 1}, {"STAGE": 2, "ITEMS": 8, "SUMS": 1},
           {"STAGE": 2, "ITEMS": 8, "VEC": 4, "SUMS": 1},
           {"STAGE": 2, "ITEMS": 16, "VEC": 4, "SUMS": 1},
           {"STAGE": 2, "ITEMS": 32, "VEC": 4, "SUMS": 1},
           {"STAGE": 2, "ITEMS": 16, "VEC": 4}, {"STAGE": 2, "ITEMS": 32, "VEC": 4}]
    rows = space + [{"WG": 256, **k} for k in new if 256 * k["ITEMS"] <= 2 * r]
    if not scan_columns(inner, columns):
        return rows
    cols = [{"WG": wg, "ITEMS": items, "STAGE": 3} for wg in (256, 128, 64)
            for items in (8, 16, 4, 1) if items <= r]
    if inner % 4 == 0:  # 4 adjacent columns per invocation, 16-byte loads and stores
        cols += [{"WG": wg, "ITEMS": items, "STAGE": 3, "VEC": 4} for wg in (256, 64)
                 for items in (4, 8) if items <= r]
    return cols + rows


def _rake(wg: int) -> tuple[int, int]:
    """scan_rake.wgsl's split of WG totals: S per raker (about the square root of WG,
    the larger half), G rakers."""
    s = 1 << -(-(wg.bit_length() - 1) // 2)
    return s, wg // s


def scan_workgroup_bytes(knobs: dict, acc_bytes: int = 4) -> int:
    """Workgroup memory of the scan kernel: the invocations' totals (SUMS 1: with the
    rakers' padding and totals), and the staged chunk (STAGE 1) or the staged totals of
    its groups (STAGE 2), with one padding slot per 32."""
    knobs = {**SCAN_EXTRA_KNOBS, **knobs}
    wg = knobs["WG"]
    sums = wg + 2 * _rake(wg)[1] if knobs["SUMS"] else wg
    if knobs["STAGE"] == 3:
        return 0
    staged = {0: 0, 1: wg * knobs["ITEMS"], 2: wg * knobs["ITEMS"] // knobs["VEC"]}
    tile = staged[knobs["STAGE"]]
    return acc_bytes * (sums + tile + tile // 32)


def _scan(src, materialized, out, tnode, knobs, options: CompileOptions):
    (x,) = tnode.inputs
    _, r, inner = x.shape
    rows = x.numel // max(1, r)
    op = tnode.attrs["op"]
    xt = "i32" if x.dtype in ("i32", "bool") else "f32"
    f32 = xt == "f32"
    vals = fold_vals(xt)
    acc_t, init, combine, leaf, final = (s.format(**vals) for s in SCANNERS[tnode.attrs["op"]])
    if op == "logaddexp" and not f32:
        raise CompileError("logaddexp scan of an integer tensor")
    functions = loader(src, materialized, "load_x", x, xt)
    if acc_t == "ArgAcc":
        functions = f"struct ArgAcc {{ v: {xt}, i: i32 }}\n" + functions
    functions += (f"fn combine(a: {acc_t}, b: {acc_t}) -> {acc_t} {{ {combine} }}\n"
                  f"fn leaf(v: {xt}, r: i32) -> {acc_t} {{ return {leaf}; }}\n")
    acc_bytes = 8 if acc_t == "ArgAcc" else 4
    # a setting that leaves VEC or SUMS out means their SCAN_EXTRA_KNOBS values, not
    # the default's (settings were written before they existed)
    cols_view = vec4_view(x, materialized, 2) if inner % 4 == 0 else None  # STAGE 3, VEC 4
    knobs = merge_knobs({**SCAN_EXTRA_KNOBS,
                         **scan_knobs(r, acc_bytes, inner, rows, cols_view is not None)},
                        knobs and {**SCAN_EXTRA_KNOBS, **knobs})
    wg = check_wg(knobs, pow2=True)  # the scan of the invocations' totals is a tree
    items, stage, vec = knobs["ITEMS"], knobs["STAGE"], knobs["VEC"]
    require(isinstance(items, int) and items >= 1, knobs, "ITEMS must be a positive integer")
    require(stage in (0, 1, 2, 3), knobs, "STAGE is 0, 1, 2 or 3")
    require(vec == 1 or stage in (2, 3) and vec == 4, knobs, "VEC is 1, or 4 with STAGE 2 or 3")
    if stage == 3:
        require(knobs["SUMS"] == 0, knobs, "STAGE 3 takes no SUMS")
        return _scan_cols(src, out, x, functions, knobs, acc_t, init, final, cols_view)
    require(items % vec == 0, knobs, "ITEMS must be a multiple of VEC")
    require(knobs["SUMS"] in (0, 1), knobs, "SUMS is 0 or 1")
    wg_bytes = scan_workgroup_bytes(knobs, acc_bytes)
    require(wg_bytes <= WORKGROUP_BYTES, knobs,
            f"{wg_bytes} bytes of workgroup memory, more than {WORKGROUP_BYTES}")
    gx = min(max(1, rows), MAX_GRID)
    chunk = wg * items
    slots = dict(functions=functions, WG=wg, ITEMS=items, R=r, B=inner, ROWS=rows, GRID_X=gx,
                 ACC=acc_t, INIT=init, LEAF="leaf(load_x(a, r, b), r)", final=final,
                 CHUNK=chunk, TILE=chunk + chunk // 32, workgroup_bytes=wg_bytes,
                 LOADS="\n".join(f"        let x{k} = leaf(load_x(a, min(r0 + {k}, {r - 1}), b),"
                                 f" r0 + {k});" for k in range(items)),
                 RUNS="\n".join(f"        if (r0 + {k} < {r}) {{ run = combine(run, x{k}); }}"
                                f" let s{k} = run;" for k in range(items)),
                 STORES="\n".join(f"        if (live && r0 + {k} < {r}) {{ let r = r0 + {k};"
                                  f" let gi = (a * {r} + r) * {inner} + b;"
                                  f" let acc = combine(prefix, s{k}); $STORE }}"
                                  for k in range(items)))
    if stage == 2:
        slots.update(_scan_regs(src, materialized, out, x, knobs, acc_t, init, final))
    if knobs["SUMS"]:
        s_, g = _rake(wg)
        slots["SCAN_SUMS"] = template("scan_rake").substitute(
            ACC=acc_t, INIT=init, WG=wg, S=s_, G=g, SLOTS=wg + g,
            RAKE="\n".join([f"        let v{k} = sums[first + {k}];" for k in range(s_)]
                           + [f"        sums[first + {k}] = acc; acc = combine(acc, v{k});"
                              for k in range(s_)]),
            FOLD="\n".join(f"    if (group == {k}) {{ before = total; }}"
                           f" total = combine(total, groups[{k}]);" for k in range(g)))
    else:
        slots["SCAN_SUMS"] = template("scan_sums").substitute(ACC=acc_t, INIT=init, WG=wg)
    name = ("scan", "scan_staged", "scan_regs")[stage]
    # settings name VEC and SUMS only where they differ from SCAN_EXTRA_KNOBS
    used = {k: v for k, v in knobs.items() if SCAN_EXTRA_KNOBS.get(k) != v}
    return name, slots, (gx, math.ceil(max(1, rows) / gx), 1), used


def _scan_cols(src, out, x, functions, knobs, acc_t, init, final, plain):
    """STAGE 3 (kernels/scan_cols.wgsl): one invocation per column (VEC 1) or per 4
    adjacent columns (VEC 4: B a multiple of 4; 16-byte loads through `plain`, x's
    vec4_view along its last dim where it has one, 16-byte stores), ITEMS loads first."""
    _, r, inner = x.shape
    wg, items, vec = knobs["WG"], knobs["ITEMS"], knobs["VEC"]
    require(vec == 1 or inner % 4 == 0, knobs, "STAGE 3 with VEC 4 needs B a multiple of 4")
    whole = r % items == 0  # no clamped loads, no bounds tests
    lanes = x.numel // r // vec
    view, load = None, None
    if vec == 4 and plain is not None:
        root, offset, st = plain
        view = src.view4(root)
        load = f"{offset // 4} + a * {st[0] // 4} + {{ri}} * {st[1] // 4} + b / 4"
    def carry(e: int) -> str:  # VEC 1: one running value, `carry`, and leaves x<k>
        return f"carry{e}" if vec > 1 else "carry"

    def leaf(k: int, e: int) -> str:
        return f"x{k}_{e}" if vec > 1 else f"x{k}"
    setup = [f"    let a = col / {inner // vec};",
             f"    let b = (col % {inner // 4}) * 4;" if vec > 1 else f"    let b = col % {inner};"]
    setup += [f"    var {carry(e)}: {acc_t} = {init};" for e in range(vec)]
    loads, stores = [], []
    for k in range(items):
        ri = f"r0 + {k}" if whole else f"min(r0 + {k}, {r - 1})"
        if view:
            loads.append(f"        let q{k} = {view}[{load.format(ri=f'({ri})')}];")
        for e in range(vec):
            val = f"q{k}.{XYZW[e]}" if view else \
                f"load_x(a, {ri}, {f'b + {e}' if e else 'b'})"
            loads.append(f"        let {leaf(k, e)} = leaf({val}, r0 + {k});")
        test = "" if whole else f"if (r0 + {k} < {r}) "
        folds = " ".join(f"{carry(e)} = combine({carry(e)}, {leaf(k, e)});" for e in range(vec))
        where = f"let r = r0 + {k}; let gi = (a * {r} + r) * {inner} + b;"
        if vec == 1:
            store = "let acc = carry; $STORE"
        else:
            vals = [to_buffer(f"epilogue({final.replace('acc', carry(e))}, gi + {e})",
                              out.dtype) for e in range(vec)]
            store = f"out[gi / 4] = vec4<{element_type(out.dtype)}>({', '.join(vals)});"
        stores.append(f"        {test}{{ {folds} {where} {store} }}")
    src.out_vec4 = vec == 4
    groups = max(1, -(-lanes // wg))
    gx = min(groups, MAX_GRID)
    slots = dict(functions=functions, WG=wg, ITEMS=items, R=r, LANES=lanes, GRID_X=gx,
                 final=final, SETUP="\n".join(setup), LOADS="\n".join(loads),
                 STORES="\n".join(stores))
    used = {k: v for k, v in knobs.items() if SCAN_EXTRA_KNOBS.get(k) != v}
    return "scan_cols", slots, (gx, -(-groups // gx), 1), used


def _scan_regs(src, materialized, out, x, knobs, acc_t, init, final) -> dict:
    """scan_regs.wgsl's unrolled slots: V = ITEMS / VEC groups of VEC elements per
    invocation, group j of the chunk's (j * WG + li). With VEC 4 and B = 1, a row whose
    length is a multiple of 4 is loaded through a vec4 view of its buffer where x is
    one f32 buffer read at 16-byte aligned rows (plain_strides; else each element by
    load_x), and stored 16 bytes at a time; bounds tests (and the clamping of loads)
    are left out when the chunks tile the row."""
    _, r, inner = x.shape
    wg, vec = knobs["WG"], knobs["VEC"]
    v = knobs["ITEMS"] // vec
    tiled = r % (wg * knobs["ITEMS"]) == 0
    rows4 = vec == 4 and inner == 1 and r % 4 == 0  # groups never straddle a row's end
    view = None
    plain = vec4_view(x, materialized, 1) if rows4 else None
    if plain is not None:
        root, offset, st = plain
        view = src.view4(root)
    setup = ""
    if view:
        stride = st[0] // 4 if x.shape[0] > 1 else 0
        setup = f"    let o4 = {offset // 4} + a * {stride};  // the row's first vec4 in {view}"
    loads, runs, stores = [], [], []

    def clamp(i: str, last: int) -> str:
        return i if tiled else f"min({i}, {last})"

    def inside(i: str) -> str:
        return "" if tiled else f"{i} < {r}"
    for j in range(v):
        g, at = f"r{j}", f"{j * wg} + li" if j else "li"
        loads.append(f"        let {g} = base + {f'({at})' if j else at} * {vec};")
        if view:
            loads.append(f"        let q{j} = {view}[o4 + {clamp(g, r - 4)} / 4];")
        for e in range(vec):
            ri = f"{g} + {e}" if e else g
            val = f"q{j}.{XYZW[e]}" if view else f"load_x(a, {clamp(ri, r - 1)}, b)"
            loads.append(f"        let x{j}_{e} = leaf({val}, {ri});")
        runs.append(f"        var g{j}: {acc_t} = {init};")
        for e in range(vec):
            ri = f"{g} + {e}" if e else g
            fold = f"g{j} = combine(g{j}, x{j}_{e});"
            test = inside(ri)
            runs.append(f"        {f'if ({test}) {{ {fold} }}' if test else fold}"
                        f" let s{j}_{e} = g{j};")
        runs.append(f"        tile[pad({at})] = g{j};")
        stores.append(f"        let p{j} = tile[pad({at})];")
        test = " && ".join(t for t in ("live", inside(g)) if t)
        if rows4:
            vals = [to_buffer(f"epilogue({final.replace('acc', f'c{e}')}, gi + {e})", out.dtype)
                    for e in range(vec)]
            stores.append(f"        if ({test}) {{ let gi = a * {r} + {g}; "
                          + " ".join(f"let c{e} = combine(p{j}, s{j}_{e});" for e in range(vec))
                          + f" out[gi / 4] = vec4<{element_type(out.dtype)}>("
                          + f"{', '.join(vals)}); }}")
        else:
            for e in range(vec):
                ri = f"{g} + {e}" if e else g
                t = " && ".join(c for c in ("live", inside(ri)) if c)
                stores.append(f"        if ({t}) {{ let r = {ri};"
                              f" let gi = (a * {r} + r) * {inner} + b;"
                              f" let acc = combine(p{j}, s{j}_{e}); $STORE }}")
    src.out_vec4 = rows4
    totals = [f"        let t{k} = tile[pad(li * {v} + {k})];" for k in range(v)]
    totals.append(f"        var run: {acc_t} = {init};")
    totals += [f"        let u{k} = run; run = combine(run, t{k});" for k in range(v)]
    n = wg * v
    # every group must have read its prefix before the next chunk stages its totals
    after = "        workgroupBarrier();" if r > wg * knobs["ITEMS"] else ""
    return dict(SETUP=setup, NEXT=after, LOADS="\n".join(loads), RUNS="\n".join(runs),
                STORES="\n".join(stores), TOTALS="\n".join(totals), TILE=n + n // 32,
                PREFIXES="\n".join(f"        tile[pad(li * {v} + {k})] = combine(prefix, u{k});"
                                   for k in range(v)))
