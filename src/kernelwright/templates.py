"""Fill a WGSL template for one scheduled kernel: its loaders, epilogue and knobs.

`generate(group, ...)` picks the template by the group's template node (none: the
elementwise kernel), generates the loader functions for the node's inputs and the
epilogue for the stored value (codegen.Emitter), chooses the knobs (tile sizes,
workgroup size) from the shapes, and returns the WGSL text with its bindings and
dispatch grid. Knob choices are heuristics here; the autotuner will override them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .codegen import (
    HELPERS,
    WGSL_TYPE,
    Emitter,
    Index,
    KernelSource,
    _cast,
    literal,
    template,
    to_buffer,
)
from .ir import CompileError, Node, Value

MAX_GRID = 65535


@dataclass
class Generated:
    name: str
    source: str
    reads: list[Value]
    grid: tuple[int, int, int]


def grid_1d(n: int, wg: int) -> tuple[tuple[int, int, int], int]:
    """Workgroups for n invocations, folded into 2-D past the per-dimension limit;
    returns the grid and the number of invocations per grid row."""
    groups = max(1, math.ceil(n / wg))
    gx = min(groups, MAX_GRID)
    return (gx, math.ceil(groups / gx), 1), gx * wg


def _loader(src: KernelSource, materialized, name: str, x: Value, dtype: str = "f32") -> str:
    em = Emitter(src, materialized)
    params = [f"i{d}" for d in range(len(x.shape))]
    val = em.value(x, Index(x.shape, dims=list(params)))
    if x.dtype != dtype:
        val = _cast(val, {}, x.dtype, dtype)
    return em.function(name, [f"{p}: i32" for p in params], dtype, val)


def _epilogue(src: KernelSource, materialized, out: Value, root: Value | None,
              acc_dtype: str) -> str:
    em = Emitter(src, materialized, root=root, computes=out)
    val = em.value(out, Index(out.shape, flat="gi"))
    params = ([f"acc: {WGSL_TYPE[acc_dtype]}"] if root is not None else []) + ["gi: i32"]
    return em.function("epilogue", params, out.dtype, val)


def generate(out: Value, tnode: Node | None, materialized, buffer_of) -> Generated:
    src = KernelSource(buffer_of)
    epi = _epilogue(src, materialized, out, tnode.out if tnode else None,
                    tnode.out.dtype if tnode else out.dtype)
    kind = tnode.op if tnode else "elementwise"
    fill = {"elementwise": _elementwise, "reduce": _reduce, "matmul": _matmul,
            "conv2d": _conv2d, "pool2d": _pool2d}.get(kind)
    if fill is None:
        raise CompileError(f"no kernel template for '{kind}'")
    tmpl, slots, grid = fill(src, materialized, out, tnode)
    result = f"epilogue({slots.pop('final', 'acc')}, gi)" if tnode else "epilogue(gi)"
    store = f"out[gi] = {to_buffer(result, out.dtype)};"
    functions = "".join(HELPERS[h] for h in sorted(src.helpers)) + slots.pop("functions") + epi
    source = template(tmpl).substitute(BINDINGS=src.bindings(out), FUNCTIONS=functions,
                                       STORE=store, **slots)
    return Generated(kind, source, list(src.reads), grid)


def _elementwise(src, materialized, out, tnode):
    wg = 256
    grid, row = grid_1d(out.numel, wg)
    return "elementwise", dict(functions="", WG=wg, ROW=row, NUMEL=out.numel), grid


REDUCERS = {
    # op: (accumulator type, init, combine body, leaf from element v at r, final)
    "sum": ("{t}", "{zero}", "return a + b;", "v", "acc"),
    "prod": ("{t}", "{one}", "return a * b;", "v", "acc"),
    "max": ("{t}", "{lowest}", "return max(a, b);", "v", "acc"),
    "min": ("{t}", "{highest}", "return min(a, b);", "v", "acc"),
    "argmax": ("ArgAcc", "ArgAcc({lowest}, 2147483647)",
               "if (b.v > a.v || (b.v == a.v && b.i < a.i)) {{ return b; }} return a;",
               "ArgAcc(v, r)", "acc.i"),
    "argmin": ("ArgAcc", "ArgAcc({highest}, 2147483647)",
               "if (b.v < a.v || (b.v == a.v && b.i < a.i)) {{ return b; }} return a;",
               "ArgAcc(v, r)", "acc.i"),
}


def _reduce(src, materialized, out, tnode):
    (x,) = tnode.inputs
    o, r = x.shape
    op = tnode.attrs["op"]
    xt = "i32" if x.dtype in ("i32", "bool") else "f32"
    lims = {"f32": ("bitcast<f32>(0xff800000u)", "bitcast<f32>(0x7f800000u)"),
            "i32": ("i32(-2147483647 - 1)", "i32(2147483647)")}[xt]
    vals = dict(t=xt, zero=literal(0, xt), one=literal(1, xt), lowest=lims[0], highest=lims[1])
    acc_t, init, combine, leaf, final = (s.format(**vals) for s in REDUCERS[op])
    functions = _loader(src, materialized, "load_x", x, xt)
    if acc_t == "ArgAcc":
        functions = f"struct ArgAcc {{ v: {xt}, i: i32 }}\n" + functions
    functions += f"fn combine(a: {acc_t}, b: {acc_t}) -> {acc_t} {{ {combine} }}\n"
    leaf_expr = "leaf(load_x(o, r), r)"
    functions += f"fn leaf(v: {xt}, r: i32) -> {acc_t} {{ return {leaf}; }}\n"
    slots = dict(functions=functions, O=o, R=r, ACC=acc_t, INIT=init, LEAF=leaf_expr)
    row_wise = r > 64 or o < 1024
    if row_wise:
        wg = 256 if r >= 1024 else 128 if r >= 128 else 64
        gx = min(o, MAX_GRID)
        grid = (gx, math.ceil(o / gx), 1)
        tmpl = "reduce_row"
        slots.update(WG=wg, GRID_X=gx)
    else:
        wg = 256
        grid, row = grid_1d(o, wg)
        tmpl = "reduce_thread"
        slots.update(WG=wg, ROW=row)
    slots["final"] = final
    return tmpl, slots, grid


def _matmul(src, materialized, out, tnode):
    a, b = tnode.inputs
    nb, m, k = a.shape
    n = b.shape[2]
    if m <= 16:
        bm, bn, tm, tn = 16, 64, 1, 4
    elif n <= 16:
        bm, bn, tm, tn = 64, 16, 4, 1
    else:
        bm, bn, tm, tn = 64, 64, 4, 4
    bk = 16
    functions = (_loader(src, materialized, "load_a", a) + _loader(src, materialized, "load_b", b))
    tx, ty = bn // tn, bm // tm
    if nb > MAX_GRID:
        raise CompileError(f"matmul batch {nb} exceeds the grid limit {MAX_GRID}")
    slots = dict(functions=functions, M=m, N=n, K=k, BM=bm, BN=bn, BK=bk, TM=tm, TN=tn,
                 TX=tx, TY=ty, NT=tx * ty)
    return "matmul", slots, (math.ceil(n / bn), math.ceil(m / bm), nb)


def _conv2d(src, materialized, out, tnode):
    x, w = tnode.inputs
    _, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    _, _, ho, wo = tnode.out.shape
    at = tnode.attrs
    functions = _loader(src, materialized, "load_x", x) + _loader(src, materialized, "load_w", w)
    wg = 256
    grid, row = grid_1d(tnode.out.numel, wg)
    slots = dict(functions=functions, WG=wg, ROW=row, NUMEL=tnode.out.numel, CO=co, HO=ho,
                 WO=wo, H=h, W=wd, CG=cg, COG=co // at["groups"], KH=kh, KW=kw,
                 SH=at["stride"][0], SW=at["stride"][1], PH=at["padding"][0],
                 PW=at["padding"][1], DH=at["dilation"][0], DW=at["dilation"][1])
    return "conv2d", slots, grid


def _pool2d(src, materialized, out, tnode):
    (x,) = tnode.inputs
    _, c, h, wd = x.shape
    _, _, ho, wo = tnode.out.shape
    at = tnode.attrs
    kh, kw = at["kernel"]
    sh, sw = at["stride"]
    ph, pw = at["padding"]
    if at["op"] == "max":
        init, fold, divisor = "bitcast<f32>(0xff800000u)", "acc = max(acc, v);", "1"
    else:
        init, fold = "0.0", "acc = acc + v;"
        if at["divisor"]:
            divisor = str(at["divisor"])
        elif at["count_include_pad"]:
            divisor = (f"(min(h0 + {kh}, {h + ph}) - h0) * (min(w0 + {kw}, {wd + pw}) - w0)")
        else:
            divisor = "count"
    functions = _loader(src, materialized, "load_x", x)
    wg = 256
    grid, row = grid_1d(tnode.out.numel, wg)
    slots = dict(functions=functions, WG=wg, ROW=row, NUMEL=tnode.out.numel, C=c, HO=ho, WO=wo,
                 H=h, W=wd, KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw, DH=at["dilation"][0],
                 DW=at["dilation"][1], INIT=init, FOLD=fold, DIVISOR_EXPR=divisor)
    return "pool2d", slots, grid
