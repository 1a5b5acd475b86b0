"""Attention of few queries in one kernel (kernels/attention_decode.wgsl): a decoding
step's new tokens against a KV cache. Which attentions take it, how their keys are
split over workgroups, knobs, space, generator.

A query block of the tiled kernel (kernels/attention.py: 32 rows) is padding at one
query, and the decomposition (scores by the gemv, each row's log-sum-exp, the
probabilities by V) is three launches of tiny work each: a decoding step is bound by
launches. This template gives a workgroup one batch * head and a span of keys: the
queries' scores, their softmax (online) and the product by V in one pass over the
span's keys, read once straight from the cache. It takes attentions of at most
DECODE_MAX_L queries per batch * head: at 8 queries each loaded key or value element
feeds 8 multiply-adds (2 per byte, a fifth of what an H100 does per byte of memory
bandwidth), so the kernel stays bound by the cache's bytes, and an invocation holds 8
scores, maxima and sums and 8 * CV outputs (the gemv's bound on rows, GEMV_MAX_M, for
the same reason); from 9 queries on the tiled kernel's query blocks are less than
three quarters padding. A model, not measured.

Few batch * heads (9 for SmolLM2's decode) leave most of a GPU idle on a long cache:
`decode_splits` then cuts the keys into spans of at least DECODE_SPAN, one workgroup
each, whose parts (output, maximum, sum) a small elementwise kernel combines."""

from __future__ import annotations

import math

from ..codegen.codegen import literal
from ..ir.ir import CompileError
from ..options import CompileOptions, Waves
from .common import MAX_WG, grid_1d, loader, merge_knobs, require
from .put import fused_puts

DECODE_MAX_L = 8  # queries per batch * head up to which attention takes this template
DECODE_WORKGROUP_BYTES = 32768  # as the other attention kernels'
DECODE_MAX_REGISTERS = 32  # outputs per invocation (LQ x CV), at most
DECODE_SETTINGS = (128, 256, 64, 32)  # invocations (= keys per block), first fitting first
# Keys a workgroup reads at least before the keys are split over several: a span of 512
# keys of 64 + 64 f32 dims is 256 KiB, about 5 us for one SM at 50 GB/s, as long as the
# launch of the combining kernel a split costs (about 6 us of GPU time a kernel in an
# H100 decode, launch-bound). A model, not measured. Splits are at most DECODE_MAX_SPLIT
# (the combining kernel reads each span's parts for every output).
DECODE_SPAN = 512
DECODE_MAX_SPLIT = 16
DECODE_SLOTS = 132  # workgroups that cover the device where its waves are unknown


def decode_fits(lq: int) -> bool:
    """Whether an attention of `lq` queries per batch * head takes this template."""
    return 1 <= lq <= DECODE_MAX_L


def decode_splits(nb: int, keys: int, waves: Waves | None) -> int:
    """Spans the keys of an attention of `nb` batch * heads are cut into: 1 (one kernel)
    when nb workgroups already cover the device (about one per SM: options.Waves.plain)
    or the keys are fewer than two DECODE_SPANs; else as many as reach one workgroup per
    SM, no span shorter than DECODE_SPAN, at most DECODE_MAX_SPLIT."""
    target = waves.plain if waves is not None else DECODE_SLOTS
    if nb >= target:
        return 1
    return max(1, min(keys // DECODE_SPAN, math.ceil(target / nb), DECODE_MAX_SPLIT))


def decode_config(lq: int, e: int, ev: int, knobs: dict | None = None) -> dict | None:
    """The template's derived slots for LQ queries, head dims E (q, k) and EV (v), and
    the knobs (default: the first of DECODE_SETTINGS that fits): CW value columns a
    group of invocations reads at once, KH groups (key slices of a block), CV columns
    per invocation, the tiles' sizes. None when they do not fit: more than DECODE_MAX_L
    queries, more than DECODE_MAX_REGISTERS outputs per invocation, or workgroup
    memory."""
    if not decode_fits(lq) or e < 1 or ev < 1:
        return None
    if knobs is None:
        for wg in DECODE_SETTINGS:
            cfg = decode_config(lq, e, ev, {"WG": wg})
            if cfg is not None:
                return cfg
        return None
    wg = knobs["WG"]
    if wg < 32 or wg > MAX_WG or wg & (wg - 1):
        return None
    cw = min(wg, 64 if ev > 32 else 32)
    kh, cv = wg // cw, -(-ev // cw)
    if lq * cv > DECODE_MAX_REGISTERS:
        return None
    qwords, swords, owords = lq * e, lq * wg, (kh * lq * cv * cw if kh > 1 else 0)
    size = 4 * (qwords + 2 * swords + owords)
    if size > DECODE_WORKGROUP_BYTES:
        return None
    return dict(WG=wg, CW=cw, KH=kh, CV=cv, QWORDS=qwords, SWORDS=swords, OWORDS=owords,
                workgroup_bytes=size)


def decode_space(lq: int, e: int, ev: int) -> list[dict]:
    """The settings that fit: DECODE_SETTINGS' workgroup sizes."""
    return [{"WG": wg} for wg in DECODE_SETTINGS if decode_config(lq, e, ev, {"WG": wg})]


def _decode_code(cfg: dict, lq: int, e: int, ev: int, np_: int, keep: str,
                 mask: str) -> dict:
    """The unrolled parts of kernels/attention_decode.wgsl: s_i the scores of key j (this
    invocation's), m_i the queries' running maxima (the same in every invocation), l_i
    this invocation's part of query i's sum, o_i_d its outputs (column c + CW * d)."""
    wg, cw, kh, cv = cfg["WG"], cfg["CW"], cfg["KH"], cfg["CV"]
    rows, cols = range(lq), range(cv)
    p8, p12 = " " * 8, " " * 12
    shared = [f"var<workgroup> q_tile: array<f32, {cfg['QWORDS']}>;  // [i][e], pre-scaled",
              f"var<workgroup> s_tile: array<vec4<f32>, {cfg['SWORDS'] // 4}>;  "
              "// [i][j]: a block's scores, at the end the sums' parts",
              f"var<workgroup> p_tile: array<f32, {cfg['SWORDS']}>;  // [i][j] probabilities"]
    if kh > 1:
        shared.append(f"var<workgroup> o_tile: array<f32, {cfg['OWORDS']}>;  "
                      "// [kh][i][d][c] the key slices' outputs")
    regs = [f"    var m_{i} = neg_inf;\n    var l_{i} = 0.0;" for i in rows]
    regs += [f"    var o_{i}_{d} = 0.0;" for i in rows for d in cols]
    scores = [f"{p8}var s_{i} = 0.0;" for i in rows]
    scores.append(f"{p8}if (j < k_hi) {{")
    scores.append(f"{p12}for (var e = 0; e < {e}; e += 1) {{")
    scores.append(f"{p12}    let kv = load_k(b, j, e);")
    scores += [f"{p12}    s_{i} = fma(q_tile[{i * e} + e], kv, s_{i});" for i in rows]
    scores.append(f"{p12}}}")
    scores.append(f"{p8}}}")
    for i in rows:
        scores.append(f"{p8}{{ let i = {i}; if (j < k_hi && {keep}) {{ s_{i} = s_{i}{mask}; }} "
                      f"else {{ s_{i} = neg_inf; }} }}")
        scores.append(f"{p8}s_tile[({i * wg} + t) / 4][t % 4] = s_{i};")
    maxima = [f"{p8}var mx_{i} = neg_inf;" for i in rows]
    maxima.append(f"{p8}for (var x = 0; x < {wg // 4}; x += 1) {{")
    for i in rows:
        maxima.append(f"{p12}let w{i} = s_tile[{i * wg // 4} + x];")
        maxima.append(f"{p12}mx_{i} = max(mx_{i}, max(max(w{i}.x, w{i}.y), "
                      f"max(w{i}.z, w{i}.w)));")
    maxima.append(f"{p8}}}")
    softmax = []
    for i in rows:
        softmax.append(f"{p8}let mn_{i} = max(m_{i}, mx_{i});")
        softmax.append(f"{p8}if (mn_{i} != neg_inf) {{")
        softmax.append(f"{p12}let alpha = select(exp(m_{i} - mn_{i}), 0.0, m_{i} == neg_inf);")
        softmax.append(f"{p12}l_{i} = l_{i} * alpha;")
        softmax += [f"{p12}o_{i}_{d} = o_{i}_{d} * alpha;" for d in cols]
        softmax.append(f"{p12}m_{i} = mn_{i};")
        softmax.append(f"{p8}}}")
        softmax.append(f"{p8}{{ let pr = select(exp(s_{i} - m_{i}), 0.0, s_{i} == neg_inf); "
                       f"l_{i} = l_{i} + pr; p_tile[{i * wg} + t] = pr; }}")
    outputs = []
    for d in cols:
        col = f"c + {cw * d}" if d else "c"
        if cw * (d + 1) <= ev:
            outputs.append(f"{p12}let v{d} = load_v(b, jv, {col});")
        else:
            outputs.append(f"{p12}var v{d} = 0.0;")
            outputs.append(f"{p12}if ({col} < {ev}) {{ v{d} = load_v(b, jv, {col}); }}")
    for i in rows:
        outputs.append(f"{p12}{{ let pr = p_tile[{i * wg} + jj]; "
                       + " ".join(f"o_{i}_{d} = fma(pr, v{d}, o_{i}_{d});" for d in cols)
                       + " }")
    totals = [f"    s_tile[({i * wg} + t) / 4][t % 4] = l_{i};" for i in rows]
    if kh > 1:
        totals += [f"    o_tile[((kh * {lq} + {i}) * {cv} + {d}) * {cw} + c] = o_{i}_{d};"
                   for i in rows for d in cols]
    totals.append("    workgroupBarrier();")
    totals += [f"    var lt_{i} = 0.0;" for i in rows]
    totals.append(f"    for (var x = 0; x < {wg // 4}; x += 1) {{")
    for i in rows:
        totals.append(f"        let u{i} = s_tile[{i * wg // 4} + x];")
        totals.append(f"        lt_{i} = lt_{i} + (u{i}.x + u{i}.y) + (u{i}.z + u{i}.w);")
    totals.append("    }")
    stores = ["    if (kh == 0) {"]
    for i in rows:
        if np_ == 1:
            stores.append(f"        let inv_{i} = select(1.0 / lt_{i}, 0.0, lt_{i} == 0.0);")
            base = f"(b * {lq} + {i}) * {ev}"
        else:
            base = f"((b * {lq} + {i}) * {np_} + p) * {ev + 2}"
        for d in cols:
            total = " + ".join(f"o_tile[(({h} * {lq} + {i}) * {cv} + {d}) * {cw} + c]"
                               for h in range(kh)) if kh > 1 else f"o_{i}_{d}"
            value = f"({total}) * inv_{i}" if np_ == 1 else f"{total}"
            col = f"c + {cw * d}" if d else "c"
            stores.append(f"        {{ let col = {col}; if (col < {ev}) {{ let gi = {base} + col; "
                          f"let acc = {value}; $STORE }} }}")
        if np_ > 1:
            stores.append(f"        if (c == 0) {{ {{ let gi = {base} + {ev}; let acc = m_{i}; "
                          f"$STORE }} {{ let gi = {base} + {ev + 1}; let acc = lt_{i}; "
                          "$STORE } }")
    stores.append("    }")
    return dict(SHARED="\n".join(shared), REGISTERS="\n".join(regs),
                SCORES="\n".join(scores), MAXIMA="\n".join(maxima),
                SOFTMAX="\n".join(softmax), OUTPUTS="\n".join(outputs),
                TOTALS="\n".join(totals), STORES="\n".join(stores))


def _attention_decode(src, materialized, out, tnode, knobs, options: CompileOptions):
    """The attention_decode kernel for the given knobs (WG)."""
    q, k, v = tnode.inputs[:3]
    bh, lq, e = q.shape
    s, ev = k.shape[1], v.shape[2]
    at = tnode.attrs
    default = decode_config(lq, e, ev)
    if default is None:
        raise CompileError(f"attention of {lq} queries, head dims {e}, {ev} does not fit "
                           "the decode kernel")
    knobs = merge_knobs({"WG": default["WG"]}, knobs)
    require(isinstance(knobs["WG"], int), knobs, "WG must be an integer")
    cfg = decode_config(lq, e, ev, knobs)
    require(cfg is not None, knobs, "WG must be a power of two from 32 whose tiles fit "
            "workgroup memory and registers")
    np_ = at.get("split", 1)
    functions = (loader(src, materialized, "load_q", q) + loader(src, materialized, "load_k", k)
                 + loader(src, materialized, "load_v", v))
    mask, keep, kend = "", "true", s
    if at["masked"]:
        functions += loader(src, materialized, "load_mask", tnode.inputs[3])
        mask = " + load_mask(b, i, j)"
    if at["causal"]:
        keep, kend = "j <= i", min(s, lq)
    puts = fused_puts(src, materialized)  # the new K/V its loaders read inline, stored
    functions += puts
    groups = bh * np_
    grid, gx = grid_1d(groups, 1)
    # each invocation of the grid stores its share of the puts' new elements
    call = f"    store_puts(flat * {cfg['WG']} + t, {groups * cfg['WG']});" if puts else ""
    slots = dict(functions=functions, PUTS=call, LQ=lq, E=e, NP=np_, SPAN=math.ceil(kend / np_),
                 KEND=kend, GROUPS=groups, GRID_X=gx, SCALE=literal(at["scale"], "f32"),
                 **cfg, **_decode_code(cfg, lq, e, ev, np_, keep, mask))
    return "attention_decode", slots, grid, knobs


def _attention_decode_space(out, tnode, options: CompileOptions) -> list[dict]:
    q, _, v = tnode.inputs[:3]
    return decode_space(q.shape[1], q.shape[2], v.shape[2])
