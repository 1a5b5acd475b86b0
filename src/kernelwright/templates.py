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
    buffer_address,
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
            "conv": _conv, "pool": _pool, "scan": _scan,
            "attention": _attention, "materialize": _materialize}.get(kind)
    if fill is None:
        raise CompileError(f"no kernel template for '{kind}'")
    tmpl, slots, grid = fill(src, materialized, out, tnode)
    result = f"epilogue({slots.pop('final', 'acc')}, gi)" if tnode else "epilogue(gi)"
    store = f"out[gi] = {to_buffer(result, out.dtype)};"
    functions = "".join(HELPERS[h] for h in sorted(src.helpers)) + slots.pop("functions") + epi
    # Generated slot text may itself place the store statement ("$STORE").
    slots = {k: v.replace("$STORE", store) if isinstance(v, str) else v for k, v in slots.items()}
    source = template(tmpl).substitute(BINDINGS=src.bindings(out), FUNCTIONS=functions,
                                       STORE=store, **slots)
    return Generated(kind, source, list(src.reads), grid)


def _elementwise(src, materialized, out, tnode):
    wg = 256
    ept = 4 if out.numel >= 1 << 20 else 1  # elements per invocation on large tensors
    threads = math.ceil(out.numel / ept)
    grid, row = grid_1d(threads, wg)
    return "elementwise", dict(functions="", WG=wg, ROW=row, THREADS=threads, EPT=ept,
                               NUMEL=out.numel), grid


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


_NAN = "((bitcast<u32>({x}) & 0x7fffffffu) > 0x7f800000u)"
SCANNERS = {
    # op: (accumulator type, identity, combine body (a before b), leaf from v at r, final).
    # f32 max/min propagate NaN, and the arg scans follow torch.cummax: ties and NaNs go
    # to the later element, and a NaN, once seen, is the running max (or min).
    "sum": ("{t}", "{zero}", "return a + b;", "v", "acc"),
    "prod": ("{t}", "{one}", "return a * b;", "v", "acc"),
    "max": ("{t}", "{lowest}", "{nan_ab}return max(a, b);", "v", "acc"),
    "min": ("{t}", "{highest}", "{nan_ab}return min(a, b);", "v", "acc"),
    "logaddexp": ("f32", "{lowest}",
                  "let m = max(a, b); if ((bitcast<u32>(m) & 0x7fffffffu) == 0x7f800000u) "
                  "{{ return m; }} return m + log(1.0 + exp(-abs(a - b)));", "v", "acc"),
    "argmax": ("ArgAcc", "ArgAcc({lowest}, -1)",
               "if (b.i >= 0 && (a.i < 0 || {nan_b} || (!{nan_a} && b.v >= a.v))) "
               "{{ return b; }} return a;", "ArgAcc(v, r)", "acc.i"),
    "argmin": ("ArgAcc", "ArgAcc({highest}, -1)",
               "if (b.i >= 0 && (a.i < 0 || {nan_b} || (!{nan_a} && b.v <= a.v))) "
               "{{ return b; }} return a;", "ArgAcc(v, r)", "acc.i"),
}


def _scan(src, materialized, out, tnode):
    (x,) = tnode.inputs
    _, r, inner = x.shape
    rows = x.numel // max(1, r)
    op = tnode.attrs["op"]
    xt = "i32" if x.dtype in ("i32", "bool") else "f32"
    lims = {"f32": ("bitcast<f32>(0xff800000u)", "bitcast<f32>(0x7f800000u)"),
            "i32": ("i32(-2147483647 - 1)", "i32(2147483647)")}[xt]
    f32 = xt == "f32"
    vals = dict(t=xt, zero=literal(0, xt), one=literal(1, xt), lowest=lims[0], highest=lims[1],
                nan_a=_NAN.format(x="a.v") if f32 else "false",
                nan_b=_NAN.format(x="b.v") if f32 else "false",
                nan_ab=(f"if ({_NAN.format(x='a')} || {_NAN.format(x='b')}) "
                        "{ return a + b; } ") if f32 else "")
    acc_t, init, combine, leaf, final = (s.format(**vals) for s in SCANNERS[tnode.attrs["op"]])
    if op == "logaddexp" and not f32:
        raise CompileError("logaddexp scan of an integer tensor")
    functions = _loader(src, materialized, "load_x", x, xt)
    if acc_t == "ArgAcc":
        functions = f"struct ArgAcc {{ v: {xt}, i: i32 }}\n" + functions
    functions += (f"fn combine(a: {acc_t}, b: {acc_t}) -> {acc_t} {{ {combine} }}\n"
                  f"fn leaf(v: {xt}, r: i32) -> {acc_t} {{ return {leaf}; }}\n")
    # Short rows: one element per invocation; long ones: up to 8 per invocation of 256.
    wg = min(256, max(32, 1 << max(0, r - 1).bit_length()))
    items = 1 if r <= wg else min(8, math.ceil(r / wg))
    gx = min(max(1, rows), MAX_GRID)
    slots = dict(functions=functions, WG=wg, ITEMS=items, R=r, B=inner, ROWS=rows, GRID_X=gx,
                 ACC=acc_t, INIT=init, LEAF="leaf(load_x(a, r, b), r)", final=final)
    return "scan", slots, (gx, math.ceil(max(1, rows) / gx), 1)


MATMUL_BK = 16  # the K depth of one staged tile


def matmul_tiles(m: int, n: int) -> tuple[int, int, int, int]:
    """The matmul template's (BM, BN, TM, TN) for an M x N product (ops/linalg.py reads
    the tile count to decide on split-K). Large products get 128 x 128 tiles with an
    8 x 8 block per invocation (BK = 16 keeps the staged tiles at 16 KiB, WebGPU's
    default workgroup memory)."""
    if m <= 16:
        return 16, 64, 1, 4
    if n <= 16:
        return 64, 16, 4, 1
    if m >= 512 and n >= 512:
        return 128, 128, 8, 8
    return 64, 64, 4, 4


def _contiguous_dim(v: Value, materialized) -> int | None:
    """Which of dims 1 and 2 of a [B, R, C] loader input is contiguous in memory."""
    _, r, c = v.shape
    base = buffer_address(v, (0, 0, 0), materialized)
    step_r = buffer_address(v, (0, 1, 0), materialized) if r > 1 else None
    step_c = buffer_address(v, (0, 0, 1), materialized) if c > 1 else None
    if base is None:
        return None
    if step_r is not None and abs(step_r - base) == 1:
        return 1
    if step_c is not None and abs(step_c - base) == 1:
        return 2
    return None


def _matmul(src, materialized, out, tnode):
    a, b = tnode.inputs
    nb, m, k = a.shape
    n = b.shape[2]
    bm, bn, tm, tn = matmul_tiles(m, n)
    bk = MATMUL_BK
    functions = (_loader(src, materialized, "load_a", a) + _loader(src, materialized, "load_b", b))
    tx, ty = bn // tn, bm // tm
    if nb > MAX_GRID:
        raise CompileError(f"matmul batch {nb} exceeds the grid limit {MAX_GRID}")
    # Tile loads: consecutive invocations walk the operand's contiguous dim.
    nt = tx * ty
    a_idx = (("kk", "mm", bm) if _contiguous_dim(a, materialized) == 1 else ("mm", "kk", bk))
    b_idx = (("nn", "kk", bk) if _contiguous_dim(b, materialized) == 1 else ("kk", "nn", bn))
    loads = []
    operands = (
        ("a", a_idx, bm * bk, f"m0 + mm < {m} && k0 + kk < {k}", "load_a(b, m0 + mm, k0 + kk)"),
        ("b", b_idx, bk * bn, f"k0 + kk < {k} && n0 + nn < {n}", "load_b(b, k0 + kk, n0 + nn)"))
    for name, (hi, lo, width), count, cond, call in operands:
        row = bm if name == "a" else bn
        for u in range(count // nt):
            loads.append(
                f"        {{ let t = lin + {u * nt}; let {hi} = t / {width};"
                f" let {lo} = t % {width};"
                f" var v = 0.0; if ({cond}) {{ v = {call}; }}"
                f" tile_{name}[kk * {row} + {'mm' if name == 'a' else 'nn'}] = v; }}")
    mult = [f"            let a{i} = tile_a[kk * {bm} + ty + {i * ty}];" for i in range(tm)]
    mult += [f"            let b{j} = tile_b[kk * {bn} + tx + {j * tx}];" for j in range(tn)]
    mult += [f"            acc_{i}_{j} = fma(a{i}, b{j}, acc_{i}_{j});"
             for i in range(tm) for j in range(tn)]
    accs = [f"    var acc_{i}_{j} = 0.0;" for i in range(tm) for j in range(tn)]
    stores = [f"    {{ let m = m0 + ty + {i * ty}; let n = n0 + tx + {j * tx};"
              f" if (m < {m} && n < {n}) {{ let gi = (b * {m} + m) * {n} + n;"
              f" let acc = acc_{i}_{j}; $STORE }} }}" for i in range(tm) for j in range(tn)]
    slots = dict(functions=functions, M=m, N=n, K=k, BM=bm, BN=bn, BK=bk, TX=tx, TY=ty,
                 ACCUMULATORS="\n".join(accs), LOAD_TILES="\n".join(loads),
                 MULTIPLY="\n".join(mult), STORE_BLOCK="\n".join(stores))
    return "matmul", slots, (math.ceil(n / bn), math.ceil(m / bm), nb)


WORKGROUP_BYTES = 16384  # WebGPU's default maxComputeWorkgroupStorageSize


def attention_config(e: int, ev: int) -> dict | None:
    """Block sizes of the attention template for head dims E (q, k) and EV (v): BQ
    query rows and BK keys per step, TPR invocations per query row, CPT output columns
    per invocation. The largest BQ first (each staged key serves BQ queries), then the
    largest BK, whose tiles fit in workgroup memory; None when even single rows do not
    (ops/attention.py then decomposes instead)."""
    tpr = 1
    while tpr < 8 and tpr * 8 < ev:
        tpr *= 2
    cpt = max(1, -(-ev // tpr))
    for bq, bk in ((bq, bk) for bq in (16, 8, 4, 2, 1) for bk in (16, 8, 4, 2, 1)):
        words = bq * e + bk * (e + 1) + bk * cpt * tpr + bq * (bk + 1)
        if words * 4 <= WORKGROUP_BYTES:
            return dict(BQ=bq, BK=bk, TPR=tpr, CPT=cpt, EVP=cpt * tpr, WG=bq * tpr, KS=e + 1,
                        SS=bk + 1)
    return None


def _attention(src, materialized, out, tnode):
    q, k, v = tnode.inputs[:3]
    bh, lq, e = q.shape
    s, ev = k.shape[1], v.shape[2]
    at = tnode.attrs
    cfg = attention_config(e, ev)
    if cfg is None:
        raise CompileError(f"attention head dims {e}, {ev} do not fit the kernel's tiles")
    functions = (_loader(src, materialized, "load_q", q) + _loader(src, materialized, "load_k", k)
                 + _loader(src, materialized, "load_v", v))
    mask = ""
    if at["masked"]:
        functions += _loader(src, materialized, "load_mask", tnode.inputs[3])
        mask = " + load_mask(b, i, j)"
    keep, kend = f"j < {s} && i < {lq}", str(s)
    if at["causal"]:
        keep += " && j <= i"
        kend = f"min({s}, q0 + {cfg['BQ']})"
    nqb = math.ceil(lq / cfg["BQ"])
    groups = bh * nqb
    grid, gx = grid_1d(groups, 1)
    slots = dict(functions=functions, L=lq, S=s, E=e, EV=ev, NQB=nqb, GROUPS=groups,
                 GRID_X=gx, SCALE=literal(at["scale"], "f32"), KEND=kend, KEEP=keep, MASK=mask,
                 **cfg)
    return "attention", slots, grid


def _materialize(src, materialized, out, tnode):
    """A copy of the node's input (computed inline by the loader) into its own buffer:
    the elementwise template with the loader's value as the epilogue's acc."""
    (x,) = tnode.inputs
    em = Emitter(src, materialized)
    val = em.value(x, Index(x.shape, flat="gi"))
    functions = em.function("load_x", ["gi: i32"], x.dtype, val)
    tmpl, slots, grid = _elementwise(src, materialized, out, None)
    return tmpl, {**slots, "functions": functions, "final": "load_x(gi)"}, grid


def _per_dim(**lists) -> dict:
    """Slots for the three spatial dims: NAME=[d, h, w] gives NAME_D, NAME_H, NAME_W."""
    return {f"{k}_{a}": v for k, vals in lists.items() for a, v in zip("DHW", vals)}


def _conv(src, materialized, out, tnode):
    x, w = tnode.inputs
    c, size = x.shape[1], x.shape[2:]
    co, out_size = tnode.out.shape[1], tnode.out.shape[2:]
    at = tnode.attrs
    groups, stride, dil = at["groups"], at["stride"], at["dilation"]
    functions = _loader(src, materialized, "load_x", x) + _loader(src, materialized, "load_w", w)
    wg = 256
    grid, row = grid_1d(tnode.out.numel, wg)
    slots = dict(functions=functions, WG=wg, ROW=row, NUMEL=tnode.out.numel, CO=co,
                 CG=c // groups, COG=co // groups,
                 **_per_dim(OUT=out_size, IN=size, K=w.shape[2:], S=stride, P=at["padding"],
                            DIL=dil))
    if not at["transposed"]:
        return "conv", slots, grid
    # The taps k of a transposed convolution that reach an output are those with
    # k * DIL = o + P (mod S): with g = gcd(S, DIL) they exist when g divides o + P and
    # are k0 + j * S / g, k0 = (o + P) / g * INV mod S / g, INV the inverse of DIL / g.
    gcd = [math.gcd(s, d) for s, d in zip(stride, dil)]
    step = [s // g for s, g in zip(stride, gcd)]
    inv = [pow(d // g, -1, m) if m > 1 else 0 for d, g, m in zip(dil, gcd, step)]
    slots.update(_per_dim(G=gcd, M=step, INV=inv))
    return "conv_transpose", slots, grid


def _pool(src, materialized, out, tnode):
    (x,) = tnode.inputs
    size, out_size = x.shape[1:], tnode.out.shape[1:]
    at = tnode.attrs
    op, kernel, pad = at["op"], at["kernel"], at["padding"]
    outs = ["od", "oh", "ow"]
    if at["adaptive"]:  # output o of O pools [floor(o I / O), ceil((o + 1) I / O))
        start = [f"({o} * {i}) / {n}" for o, i, n in zip(outs, size, out_size)]
        end = [f"(({o} + 1) * {i} + {n - 1}) / {n}" for o, i, n in zip(outs, size, out_size)]
    else:
        start = [f"{o} * {s} - {p}" for o, s, p in zip(outs, at["stride"], pad)]
        end = list(size)
    if op == "avg":
        init, fold, final = "0.0", "acc = acc + v;", "acc"
        if at["divisor"]:
            divisor = str(at["divisor"])
        elif at["count_include_pad"]:  # the window clipped to the padded input
            divisor = " * ".join(f"(min({a}0 + {k}, {i + p}) - {a}0)"
                                 for a, k, i, p in zip("dhw", kernel, size, pad))
        else:
            divisor = "count"
        finish = f"acc = acc / f32({divisor});"
    else:  # the first maximum in window order; a NaN wins (as PyTorch), tested on its
        # bits: compilers may fold `v != v` to false
        init = "bitcast<f32>(0xff800000u)"
        fold = ("if (best < 0 || v > acc || (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u) "
                f"{{ acc = v; best = (id * {size[1]} + ih) * {size[2]} + iw; }}")
        final, finish = ("best" if op == "argmax" else "acc"), ""
    functions = _loader(src, materialized, "load_x", x)
    wg = 256
    grid, row = grid_1d(tnode.out.numel, wg)
    slots = dict(functions=functions, WG=wg, ROW=row, NUMEL=tnode.out.numel, INIT=init,
                 FOLD=fold, FINISH=finish, final=final,
                 **_per_dim(OUT=out_size, IN=size, K=kernel, DIL=at["dilation"], START=start,
                            END=end))
    return "pool", slots, grid
