"""Fused attention (softmax(Q K^T) V in one kernel): knobs, space, generator
(kernels/attention.wgsl)."""

from __future__ import annotations

import math

from ..codegen.codegen import (
    literal,
)
from ..ir.ir import CompileError
from ..options import CompileOptions
from .common import (
    MAX_WG,
    grid_1d,
    loader,
    merge_knobs,
    require,
)

ATTENTION_WORKGROUP_BYTES = 32768  # as the matmul's: the device's limit is checked at build
ATTENTION_MAX_REGISTERS = 64  # outputs per invocation (RM x CV), at most
# Query rows and keys per block, invocations, fastest first as measured on the H200
# (2026-12-01f, bench/results/attention_variants_h200.json: 16 x 16 heads, L = S = 1024,
# E = 64; the order was the same with and without the causal mask): 32 rows of 16-key
# blocks on 128 invocations (4 rows each) took 5.33 ms unmasked and 2.89 ms causal, the
# previous first setting (64, 16, 128) 7.72 and 4.36 ms. (64, 32, 128) fits only heads
# narrower than 64 and is not measured.
ATTENTION_SETTINGS = ((32, 16, 128), (32, 32, 128), (64, 16, 256), (32, 16, 64),
                      (64, 16, 128), (64, 32, 128), (16, 16, 64), (32, 32, 64), (16, 16, 32))


def attention_knobs(e: int, ev: int) -> dict | None:
    """BQ query rows and BK keys per block, WG invocations: the first of
    ATTENTION_SETTINGS whose tiles fit (attention_config); None when none does."""
    for bq, bk, wg in ATTENTION_SETTINGS:
        knobs = {"BQ": bq, "BK": bk, "WG": wg}
        if attention_config(e, ev, knobs) is not None:
            return knobs
    return None


def attention_space(e: int, ev: int) -> list[dict]:
    return [k for k in ({"BQ": bq, "BK": bk, "WG": wg} for bq, bk, wg in ATTENTION_SETTINGS)
            if attention_config(e, ev, k) is not None]


def attention_config(e: int, ev: int, knobs: dict | None = None) -> dict | None:
    """The attention template's derived slots for head dims E (q, k) and EV (v) and the
    knobs (default: attention_knobs): RM rows per invocation (4 or 8: two or one 16-byte
    query loads per row group), CN keys and CV output columns per invocation, the tiles'
    strides and sizes. None when they do not fit: workgroup memory, invocations, or
    more than ATTENTION_MAX_REGISTERS outputs per invocation (lower/attention.py then
    decomposes instead)."""
    knobs = knobs or attention_knobs(e, ev)
    if knobs is None:
        return None
    bq, bk, wg = knobs["BQ"], knobs["BK"], knobs["WG"]
    if wg % 16 or wg > MAX_WG or bk % 16 or bq % (wg // 16):
        return None
    rm, cv = bq // (wg // 16), -(-ev // 16)
    if rm not in (4, 8) or rm * cv > ATTENTION_MAX_REGISTERS:
        return None
    qs, ks, evp = bq + 4, bk + 1, 16 * cv
    qwords, kvwords, pwords = e * qs // 4, max(e * ks, bk * evp), bq * bk // 4
    if 4 * (4 * qwords + kvwords + 4 * pwords) > ATTENTION_WORKGROUP_BYTES:
        return None
    return dict(BQ=bq, BK=bk, WG=wg, RM=rm, CN=bk // 16, CV=cv, QS=qs, KS=ks, EVP=evp,
                QWORDS=qwords, KVWORDS=kvwords, PWORDS=pwords,
                workgroup_bytes=4 * (4 * qwords + kvwords + 4 * pwords))


def _attention_code(cfg: dict, e: int, lq: int, ev: int, keep: str, mask: str,
                    lse: int = 0) -> dict:
    """The unrolled parts of kernels/attention.wgsl: s_a_c scores, m_a / l_a the row's
    running maximum and this invocation's part of its sum, o_a_d the outputs (row r0 +
    a, key tx + 16 c, value column tx + 16 d). With `lse` (the offset of the rows'
    log-sum-exp in the output, after the [B, L, Ev] output) each row's m + log(sum) is
    stored there by the row's first invocation."""
    rm, cn, cv, bk, qs, ks, evp = (cfg[k] for k in ("RM", "CN", "CV", "BK", "QS", "KS", "EVP"))
    rows, keys, cols = range(rm), range(cn), range(cv)
    p8, p12 = " " * 8, " " * 12
    regs = [f"    var m_{a} = neg_inf;\n    var l_{a} = 0.0;" for a in rows]
    regs += [f"    var o_{a}_{d} = 0.0;" for a in rows for d in cols]
    comp = "xyzw"
    scores = [f"{p8}var s_{a}_{c} = 0.0;" for a in rows for c in keys]
    scores.append(f"{p8}for (var e = 0; e < {e}; e += 1) {{")
    scores += [f"{p12}let q{g} = q_tile[(e * {qs} + r0) / 4 + {g}];" for g in range(rm // 4)]
    scores += [f"{p12}let k{c} = kv_tile[e * {ks} + tx + {16 * c}];" for c in keys]
    scores += [f"{p12}s_{a}_{c} = fma(q{a // 4}.{comp[a % 4]}, k{c}, s_{a}_{c});"
               for a in rows for c in keys]
    scores.append(f"{p8}}}")
    for a in rows:
        for c in keys:
            scores.append(f"{p8}{{ let i = q0 + r0 + {a}; let j = k0 + tx + {16 * c}; "
                          f"if ({keep}) {{ s_{a}_{c} = s_{a}_{c}{mask}; }} else {{ "
                          f"s_{a}_{c} = neg_inf; }} }}")
        top = f"s_{a}_0"
        for c in range(1, cn):
            top = f"max({top}, s_{a}_{c})"
        scores.append(f"{p8}p_tile[((r0 + {a}) * {bk} + tx) / 4][tx % 4] = {top};")
    softmax = []
    for a in rows:
        base = f"(r0 + {a}) * {bk // 4}"
        softmax.append(f"{p8}let w{a} = max(max(p_tile[{base}], p_tile[{base} + 1]), "
                       f"max(p_tile[{base} + 2], p_tile[{base} + 3]));")
        softmax.append(f"{p8}let mn_{a} = max(m_{a}, max(max(w{a}.x, w{a}.y), "
                       f"max(w{a}.z, w{a}.w)));")
    softmax.append(f"{p8}workgroupBarrier();  // every row's maxima read")
    for a in rows:
        softmax.append(f"{p8}if (mn_{a} != neg_inf) {{")
        softmax.append(f"{p12}let alpha = select(exp(m_{a} - mn_{a}), 0.0, m_{a} == neg_inf);")
        softmax.append(f"{p12}l_{a} = l_{a} * alpha;")
        softmax += [f"{p12}o_{a}_{d} = o_{a}_{d} * alpha;" for d in cols]
        softmax.append(f"{p12}m_{a} = mn_{a};")
        softmax.append(f"{p8}}}")
        for c in keys:
            softmax.append(f"{p8}{{ let p = select(exp(s_{a}_{c} - m_{a}), 0.0, "
                           f"s_{a}_{c} == neg_inf); l_{a} = l_{a} + p; "
                           f"p_tile[((r0 + {a}) * {bk} + tx + {16 * c}) / 4][tx % 4] = p; }}")
    outputs = [f"{p12}let p{a} = p_tile[((r0 + {a}) * {bk} + j) / 4];" for a in rows]
    for jj in range(4):
        outputs += [f"{p12}let v{jj}_{d} = kv_tile[(j + {jj}) * {evp} + tx + {16 * d}];"
                    for d in cols]
        outputs += [f"{p12}o_{a}_{d} = fma(p{a}.{comp[jj]}, v{jj}_{d}, o_{a}_{d});"
                    for a in rows for d in cols]
    totals = [f"    p_tile[((r0 + {a}) * {bk} + tx) / 4][tx % 4] = l_{a};" for a in rows]
    totals.append("    workgroupBarrier();")
    for a in rows:
        base = f"(r0 + {a}) * {bk // 4}"
        totals.append(f"    let u{a} = p_tile[{base}] + p_tile[{base} + 1] + p_tile[{base} + 2]"
                      f" + p_tile[{base} + 3];")
        totals.append(f"    let lt_{a} = u{a}.x + u{a}.y + u{a}.z + u{a}.w;")
        totals.append(f"    let inv_{a} = select(1.0 / lt_{a}, 0.0, lt_{a} == 0.0);")
    stores = [f"    {{ let i = q0 + r0 + {a}; let col = tx + {16 * d}; if (i < {lq} && "
              f"col < {ev}) {{ let gi = (b * {lq} + i) * {ev} + col; "
              f"let acc = o_{a}_{d} * inv_{a}; $STORE }} }}" for a in rows for d in cols]
    if lse:
        stores += [f"    {{ let i = q0 + r0 + {a}; if (tx == 0 && i < {lq}) {{ "
                   f"let gi = {lse} + b * {lq} + i; "
                   f"let acc = select(m_{a} + log(lt_{a}), neg_inf, lt_{a} == 0.0); $STORE }} }}"
                   for a in rows]
    return dict(REGISTERS="\n".join(regs), SCORES="\n".join(scores),
                SOFTMAX="\n".join(softmax), OUTPUTS="\n".join(outputs),
                TOTALS="\n".join(totals), STORES="\n".join(stores))


def _attention(src, materialized, out, tnode, knobs, options: CompileOptions):
    q, _, v = tnode.inputs[:3]
    _, lq, e = q.shape
    ev = v.shape[2]
    default = attention_knobs(e, ev)
    if default is None:
        raise CompileError(f"attention head dims {e}, {ev} do not fit the kernel's tiles")
    knobs = merge_knobs(default, knobs)
    require(all(isinstance(knobs[n], int) and knobs[n] >= 1 for n in knobs), knobs,
            "block sizes must be positive integers")
    cfg = attention_config(e, ev, knobs)
    require(cfg is not None, knobs, "tiles exceed workgroup memory, invocations or "
            "registers")
    shared, keep, mask, grid = attention_slots(src, materialized, tnode, cfg["BQ"])
    lse = q.shape[0] * lq * ev if tnode.attrs.get("lse") else 0
    code = _attention_code(cfg, e, lq, ev, keep, mask, lse)
    return "attention", dict(shared, **cfg, **code), grid, knobs


def attention_slots(src, materialized, tnode, bq: int) -> tuple[dict, str, str, tuple]:
    """What both attention kernels (this one and attention_coop) fill alike for queries
    in blocks of `bq`: the Q, K, V (and mask) loaders, sizes, the grid of (batch x head,
    query block) groups, the scale and the causal key bound KEND; with the condition a
    score is kept under (`keep`: in range, causal), the mask's term and the grid."""
    q, k, v = tnode.inputs[:3]
    bh, lq, e = q.shape
    s, ev = k.shape[1], v.shape[2]
    at = tnode.attrs
    functions = (loader(src, materialized, "load_q", q) + loader(src, materialized, "load_k", k)
                 + loader(src, materialized, "load_v", v))
    mask = ""
    if at["masked"]:
        functions += loader(src, materialized, "load_mask", tnode.inputs[3])
        mask = " + load_mask(b, i, j)"
    keep, kend = f"j < {s} && i < {lq}", str(s)
    if at["causal"]:
        keep += " && j <= i"
        kend = f"min({s}, q0 + {bq})"
    nqb = math.ceil(lq / bq)
    groups = bh * nqb
    grid, gx = grid_1d(groups, 1)
    slots = dict(functions=functions, L=lq, S=s, E=e, EV=ev, NQB=nqb, GROUPS=groups,
                 GRID_X=gx, SCALE=literal(at["scale"], "f32"), KEND=kend)
    return slots, keep, mask, grid


def _attention_space(out, tnode):
    q, _, v = tnode.inputs[:3]
    return attention_space(q.shape[2], v.shape[2])
