"""Pooling windows (max, average): knobs, space, generator (kernels/pool.wgsl)."""

from __future__ import annotations

from ..codegen.codegen import (
    NEG_INF,
    is_nan,
)
from ..ir.ir import Node, Value
from ..options import CompileOptions
from .common import (
    XYZW,
    check_wg,
    dim_slots,
    grid_1d,
    loader,
    merge_knobs,
    require,
    vec4_view,
)


def pool_knobs(tnode: Node) -> dict:
    """The pool kernel: 256 invocations per workgroup; 4 outputs per invocation loaded 16
    bytes at a time (OPT 4, VEC 4) where `_pool_vec_ok` and the output rows hold 4, else
    one output per invocation with scalar loads. Measured on the H200 (2026-12-01m,
    bench/results/memory_variants_pool_h200_2026-12-01m.json), 3 x 3 stride-2 max pool
    of 32 x 64 x 256 x 256 (PyTorch 0.54 ms): OPT 1 0.258 ms (2.6 TB/s); OPT 2, 4, 8
    with scalar loads 0.228, 0.256, 0.474; with VEC 4 0.215, **0.178** (3.78 TB/s, 88%
    of the copy bandwidth), 0.201."""
    if tnode.out.shape[3] >= 4 and _pool_vec_ok(tnode, 4):
        return {"WG": 256, "OPT": 4, "VEC": 4}
    return {"WG": 256, "OPT": 1, "VEC": 1}


POOL_OPTS = (1, 2, 4, 8)


def _pool_row(tnode: Node) -> tuple[int, int, int, int] | None:
    """The windows along the last dim as (stride, taps, dilation, padding) when their
    size and spacing are static (every regular pooling; adaptive pooling where the
    output size divides the input's: windows of I / O taps, I / O apart), else None:
    OPT > 1 needs them (the union of its outputs' windows is then known)."""
    at, i, o = tnode.attrs, tnode.inputs[0].shape[3], tnode.out.shape[3]
    if not at["adaptive"]:
        return at["stride"][2], at["kernel"][2], at["dilation"][2], at["padding"][2]
    return (i // o, i // o, 1, 0) if i % o == 0 else None


def _pool_vec_ok(tnode: Node, opt: int) -> bool:
    """VEC 4 needs OPT > 1, rows of whole vec4s and a window offset that is the same in
    every invocation modulo 4 (OPT * stride a multiple of 4)."""
    row = _pool_row(tnode)
    return (opt > 1 and row is not None and tnode.inputs[0].shape[3] % 4 == 0
            and opt * row[0] % 4 == 0)


def pool_space(tnode: Node) -> list[dict]:
    """OPT 1 at WG 64, 128 and 256 (the former space); OPT 2, 4 and 8 (up to the row's
    width) at WG 128 and 256, each with scalar loads and, where `_pool_vec_ok`, vec4
    loads. Adaptive pooling whose windows along the last dim vary in size or spacing
    (the output size not dividing the input's) has OPT 1 only."""
    out_w = tnode.out.shape[3]
    opts = [o for o in POOL_OPTS[1:] if o <= out_w] if _pool_row(tnode) else []
    return ([{"WG": wg, "OPT": 1, "VEC": 1} for wg in (64, 128, 256)]
            + [{"WG": wg, "OPT": opt, "VEC": vec} for wg in (128, 256) for opt in opts
               for vec in (1, 4) if vec == 1 or _pool_vec_ok(tnode, opt)])


def _pool_columns(src, materialized, x: Value, opt: int, vec: int,
                  row: tuple[int, int, int, int]) -> tuple[str, str, str]:
    """The COLUMNS and ROW_TAPS code of kernels/pool.wgsl for OPT > 1 (ROW_TAPS without
    its folds: `_pool` appends them) and any extra loader: the columns w0 + c of the
    union of the OPT windows along the last dim, loaded once per window row into
    x<c> (their clamped index and whether they lie in the input set once, in COLUMNS)."""
    s, k, dil, p = row
    iw = x.shape[3]
    cols = sorted({j * s + t * dil for j in range(opt) for t in range(k)})
    columns = [f"    let okw{c} = w0 + {c} >= 0 && w0 + {c} < {iw};" for c in cols]
    pad, loads, extra = " " * 12, [], ""
    if vec == 1:
        columns += [f"    let cw{c} = clamp(w0 + {c}, 0, {iw - 1});" for c in cols]
        loads = [f"{pad}let x{c} = load_x(l, cd, ch, cw{c});" for c in cols]
        return "\n".join(columns), "\n".join(loads), extra
    # w0 + P = ow0 * S is a multiple of 4 (_pool_vec_ok): column c lies in vec4
    # b0 + (c - P) // 4, lane (c - P) % 4, for every invocation. A vec4 is wholly inside
    # the row or wholly outside it (IN_W % 4 == 0); one outside is loaded at a clamped
    # index and its columns do not count.
    blocks = {b: f"{'m' if b < 0 else ''}{abs(b)}" for b in sorted({(c - p) // 4 for c in cols})}
    columns.append(f"    let b0 = (w0 + {p}) / 4;")
    columns += [f"    let cb{n} = clamp(b0 {'-' if b < 0 else '+'} {abs(b)}, 0, {iw // 4 - 1});"
                for b, n in blocks.items()]
    names = {b: f"x4_{n}" for b, n in blocks.items()}
    plain = vec4_view(x, materialized, 3)  # rows starting on 16 bytes, contiguous
    if plain is not None:  # a plain buffer: 16-byte loads from its vec4 view
        root, offset, st = plain
        view = src.view4(root)
        loads.append(f"{pad}let r4 = ({offset} + l * {st[0]} + cd * {st[1]} + ch * {st[2]}) / 4;")
        loads += [f"{pad}let {names[b]} = {view}[r4 + cb{n}];" for b, n in blocks.items()]
    else:  # computed columns (a fused prologue, a strided view): 4 per loader call
        extra = loader(src, materialized, "load_x4", x, lanes=3)
        loads += [f"{pad}let {names[b]} = load_x4(l, cd, ch, cb{n} * 4);"
                  for b, n in blocks.items()]
    loads += [f"{pad}let x{c} = {names[(c - p) // 4]}.{XYZW[(c - p) % 4]};" for c in cols]
    return "\n".join(columns), "\n".join(loads), extra


def _pool(src, materialized, out, tnode, knobs, options: CompileOptions):
    (x,) = tnode.inputs
    size, out_size = x.shape[1:], tnode.out.shape[1:]
    at = tnode.attrs
    op, kernel, pad = at["op"], at["kernel"], at["padding"]
    knobs = merge_knobs(pool_knobs(tnode), knobs)
    opt, vec = knobs["OPT"], knobs["VEC"]
    row = _pool_row(tnode)
    require(opt in POOL_OPTS, knobs, f"OPT must be one of {POOL_OPTS}")
    require(opt == 1 or row is not None, knobs, "OPT > 1 needs windows of a static size "
            "and spacing along the last dim (adaptive: the output size dividing the input's)")
    require(vec == 1 or (vec == 4 and _pool_vec_ok(tnode, opt)), knobs,
            "VEC must be 1, or 4 with OPT > 1, a last dim of whole vec4s and OPT * stride "
            "a multiple of 4")
    outs = ["od", "oh", "ow0"]
    taps = [f"i{a}" for a in "dhw"]
    if at["adaptive"]:  # output o of O pools [floor(o I / O), ceil((o + 1) I / O))
        start = [f"({o} * {i}) / {n}" for o, i, n in zip(outs, size, out_size)]
        end = [f"(({o} + 1) * {i} + {n - 1}) / {n}" for o, i, n in zip(outs, size, out_size)]
        count = [f"{a}1 - {a}0" for a in "dhw"]  # exactly the window's taps
        ok, index = ["true"] * 3, taps
    else:
        start = [f"{o} * {s} - {p}" for o, s, p in zip(outs, at["stride"], pad)]
        end = list(size)
        count = list(kernel)
        ok = [f"{t} >= 0 && {t} < {a}1" for t, a in zip(taps, "dhw")]
        index = [f"clamp({t}, 0, {i - 1})" for t, i in zip(taps, size)]
    step = row[0] if row else 0  # output j's window starts at w0 + j * step

    def w_start(j: int) -> str:
        return f"(w0 + {j * step})" if j else "w0"

    def fold(j: int) -> str:
        if op == "avg":
            return f"acc{j} = acc{j} + select(0.0, v, ok);"
        # the first maximum in window order; a NaN wins (as PyTorch), tested on its
        # bits: compilers may fold `v != v` to false
        return (f"if (ok && (best{j} < 0 || v > acc{j} || {is_nan('v')})) "
                f"{{ acc{j} = v; best{j} = (id * {size[1]} + ih) * {size[2]} + iw; }}")

    def finish(j: int) -> str:
        if op != "avg":
            return ""
        if at["divisor"]:
            divisor = str(at["divisor"])
        elif at["count_include_pad"]:  # the window clipped to the padded input
            divisor = " * ".join(f"(min({a0} + {k}, {i + p}) - {a0})" for a0, k, i, p in
                                 zip(("d0", "h0", w_start(j)), kernel, size, pad))
        else:
            divisor = f"count{j}"
        return f"acc{j} = acc{j} / f32({divisor}); "

    init = "0.0" if op == "avg" else NEG_INF
    accs = "\n".join(f"    var acc{j}: f32 = {init};\n    var best{j} = -1;\n"
                     f"    var count{j} = 0;" for j in range(opt))
    # load_x first: its text (the key's) is then the same whatever the knobs bind
    load_x = loader(src, materialized, "load_x", x)
    pad12, extra = " " * 12, ""
    if opt == 1:  # the loop over the window's taps
        columns = ""
        row_taps = "\n".join([
            f"{pad12}for (var kw = 0; kw < {count[2]}; kw += 1) {{",
            f"{pad12}    let iw = w0 + kw * {at['dilation'][2]};",
            f"{pad12}    let ok = ok_h && {ok[2]};",
            f"{pad12}    let v = load_x(l, cd, ch, {index[2]});",
            f"{pad12}    {fold(0)}",
            f"{pad12}    count0 += select(0, 1, ok);",
            f"{pad12}}}"])
    else:  # the union's columns, then each output's taps from them
        columns, loads, extra = _pool_columns(src, materialized, x, opt, vec, row)
        s, k, dil, _ = row
        folds = [f"{pad12}{{ let iw = w0 + {c}; let ok = ok_h && okw{c}; let v = x{c};\n"
                 f"{pad12}  {fold(j)}\n{pad12}  count{j} += select(0, 1, ok); }}"
                 for j in range(opt) for c in (j * s + t * dil for t in range(k))]
        row_taps = "\n".join([loads] + folds)
    res = "best" if op == "argmax" else "acc"
    stores = "\n".join(
        f"    {'' if j == 0 else f'if (ow0 + {j} < {out_size[2]}) '}{{ {finish(j)}"
        f"let gi = base + {j}; let res = {res}{j}; $STORE }}" for j in range(opt))
    owb = -(-out_size[2] // opt)
    numel = tnode.out.numel // out_size[2] * owb
    grid, grid_row = grid_1d(numel, check_wg(knobs))
    slots = dict(functions=load_x + extra, key_functions=load_x, WG=knobs["WG"], ROW=grid_row,
                 NUMEL=numel, OWB=owb, OPT=opt, final="res", ACCUMULATORS=accs,
                 COLUMNS=columns, ROW_TAPS=row_taps, STORES=stores,
                 **dim_slots(OUT=out_size, DIL=at["dilation"], START=start,
                            END=end, TAPS=count, OK=ok, AT=index))
    return "pool", slots, grid, knobs
