"""Flash attention's backward (kernels/attention_grad_kv.wgsl: the keys' and values'
gradients; kernels/attention_grad_q.wgsl: the queries'): knobs, space, generator.

Both kernels compute the scores again from Q and K block by block (BQ queries by BK
keys), with the forward's log-sum-exp of each row (GraphBuilder.attention with `lse`)
and DELTA = rowsum(dO * O), so that nothing L x S is stored. The dK / dV kernel owns a
key block and walks every query block of the query heads that read it (grouped-query
attention sums over them there); the dQ kernel owns a query block and walks the key
blocks. Each invocation computes BQ * BK / WG of a block's P and dS into workgroup
memory and accumulates the outputs it owns (BK * E / WG of dK and BK * Ev / WG of dV,
or BQ * E / WG of dQ) in named registers. A model of the flash backward, not measured
on a GPU (docs/PERF.md lists it as awaiting measurement).
"""

from __future__ import annotations

import math

from ..codegen.codegen import literal
from ..ir.ir import CompileError
from ..options import CompileOptions
from .common import MAX_WG, grid_1d, loader, merge_knobs, require

GRAD_WORKGROUP_BYTES = 32768  # as the forward's: the device's limit is checked at build
GRAD_MAX_REGISTERS = 32  # outputs an invocation accumulates, per output (dK, dV, dQ)
# Query rows BQ and keys BK per block, invocations WG: the first that fits is the
# default (a model: blocks large enough that each staged Q or K element feeds 16 or
# more multiply-adds, small enough for 64-wide heads in 32 KiB); not measured.
GRAD_SETTINGS = ((16, 32, 256), (32, 32, 256), (16, 16, 256), (32, 16, 256), (16, 16, 128),
                 (8, 16, 128), (8, 8, 64))


def attention_grad_config(e: int, ev: int, knobs: dict, wrt: str) -> dict | None:
    """The derived slots of the `wrt` ("q" or "kv") kernel for head dims E, EV and the
    knobs: the tiles' sizes in words and the registers per invocation; None when they
    do not fit (workgroup memory, invocations, registers)."""
    bq, bk, wg = knobs["BQ"], knobs["BK"], knobs["WG"]
    if min(bq, bk, wg) < 1 or wg > MAX_WG or wg % 32:
        return None
    words = dict(KWORDS=bk * e, VWORDS=bk * ev, QWORDS=bq * e, GWORDS=bq * ev,
                 PWORDS=bq * bk, RWORDS=2 * bq)
    tiles = sum(words.values()) + (bq * bk if wrt == "kv" else 0)  # kv: P and dS
    regs = [-(-bk * e // wg), -(-bk * ev // wg)] if wrt == "kv" else [-(-bq * e // wg)]
    if 4 * tiles > GRAD_WORKGROUP_BYTES or max(regs) > GRAD_MAX_REGISTERS:
        return None
    return dict(words, BQ=bq, BK=bk, WG=wg, workgroup_bytes=4 * tiles)


def attention_grad_knobs(e: int, ev: int) -> dict | None:
    """The first of GRAD_SETTINGS whose tiles fit both kernels; None when none does."""
    for k in attention_grad_space(e, ev):
        return k
    return None


def attention_grad_space(e: int, ev: int) -> list[dict]:
    """The settings of GRAD_SETTINGS that fit both kernels (the tuner's space)."""
    out = []
    for bq, bk, wg in GRAD_SETTINGS:
        knobs = {"BQ": bq, "BK": bk, "WG": wg}
        if all(attention_grad_config(e, ev, knobs, w) is not None for w in ("q", "kv")):
            out.append(knobs)
    return out


def _kv_code(cfg: dict, e: int, ev: int, s: int) -> dict:
    """dK entries y = t + WG n (key kj_n, dim ke_n) and dV entries (key vj_n, column
    vc_n) of the key block, accumulated over query rows r and stored (dK scaled)."""
    bk, wg = cfg["BK"], cfg["WG"]
    nk, nv = -(-bk * e // wg), -(-bk * ev // wg)
    regs, acc, stores = [], [], []
    p4, p16 = " " * 4, " " * 16
    for n in range(nk):
        regs.append(f"{p4}let yk_{n} = t + {wg * n}; let kj_{n} = yk_{n} / {e}; "
                    f"let ke_{n} = yk_{n} % {e}; var dk_{n} = 0.0;")
        acc.append(f"{p16}if (yk_{n} < {bk * e}) {{ dk_{n} = fma(ds_tile[r * {bk} + kj_{n}], "
                   f"q_tile[r * {e} + ke_{n}], dk_{n}); }}")
        stores.append(f"{p4}{{ let j = k0 + kj_{n}; if (yk_{n} < {bk * e} && j < {s}) {{ "
                      f"let gi = (bk * {s} + j) * {e + ev} + ke_{n}; "
                      f"let acc = dk_{n} * $SCALE; $STORE }} }}")
    for n in range(nv):
        regs.append(f"{p4}let yv_{n} = t + {wg * n}; let vj_{n} = yv_{n} / {ev}; "
                    f"let vc_{n} = yv_{n} % {ev}; var dv_{n} = 0.0;")
        acc.append(f"{p16}if (yv_{n} < {bk * ev}) {{ dv_{n} = fma(p_tile[r * {bk} + vj_{n}], "
                   f"g_tile[r * {ev} + vc_{n}], dv_{n}); }}")
        stores.append(f"{p4}{{ let j = k0 + vj_{n}; if (yv_{n} < {bk * ev} && j < {s}) {{ "
                      f"let gi = (bk * {s} + j) * {e + ev} + {e} + vc_{n}; "
                      f"let acc = dv_{n}; $STORE }} }}")
    return dict(REGISTERS="\n".join(regs), ACCUMULATE="\n".join(acc), STORES="\n".join(stores))


def _q_code(cfg: dict, e: int, lq: int) -> dict:
    """dQ entries y = t + WG n (query row qi_n, dim qe_n) of the query block,
    accumulated over the keys c of each key block and stored scaled."""
    bq, bk, wg = cfg["BQ"], cfg["BK"], cfg["WG"]
    regs, acc, stores = [], [], []
    p4, p12 = " " * 4, " " * 12
    for n in range(-(-bq * e // wg)):
        regs.append(f"{p4}let y_{n} = t + {wg * n}; let qi_{n} = y_{n} / {e}; "
                    f"let qe_{n} = y_{n} % {e}; var dq_{n} = 0.0;")
        acc.append(f"{p12}if (y_{n} < {bq * e}) {{ dq_{n} = fma(ds_tile[qi_{n} * {bk} + c], "
                   f"k_tile[c * {e} + qe_{n}], dq_{n}); }}")
        stores.append(f"{p4}{{ let i = q0 + qi_{n}; if (y_{n} < {bq * e} && i < {lq}) {{ "
                      f"let gi = (b * {lq} + i) * {e} + qe_{n}; "
                      f"let acc = dq_{n} * $SCALE; $STORE }} }}")
    return dict(REGISTERS="\n".join(regs), ACCUMULATE="\n".join(acc), STORES="\n".join(stores))


def _attention_grad(src, materialized, out, tnode, knobs, options: CompileOptions):
    q, k, v = tnode.inputs[:3]
    bh, lq, e = q.shape
    bkv, s, ev = v.shape
    at = tnode.attrs
    wrt = at["wrt"]
    default = attention_grad_knobs(e, ev)
    if default is None:
        raise CompileError(f"attention's gradient: head dims {e}, {ev} do not fit the "
                           "kernels' tiles")
    knobs = merge_knobs(default, knobs)
    require(all(isinstance(knobs[n], int) and knobs[n] >= 1 for n in knobs), knobs,
            "block sizes must be positive integers")
    cfg = attention_grad_config(e, ev, knobs, wrt)
    require(cfg is not None, knobs, "tiles exceed workgroup memory, invocations or "
            "registers")
    names = ("load_q", "load_k", "load_v", "load_do", "load_lse", "load_delta")
    functions = "".join(loader(src, materialized, n, x) for n, x in zip(names, tnode.inputs))
    mask = ""
    if at["masked"]:
        functions += loader(src, materialized, "load_mask", tnode.inputs[6])
        mask = " + load_mask(b, i, j)"
    bq, bk = cfg["BQ"], cfg["BK"]
    keep = f"j < {s} && i < {lq}" + (" && j <= i" if at["causal"] else "")
    slots = dict(functions=functions, L=lq, S=s, E=e, EV=ev, G=bh // bkv,
                 SCALE=literal(at["scale"], "f32"), KEEP=keep, MASK=mask, **cfg)
    if wrt == "kv":
        nkb = math.ceil(s / bk)
        grid, gx = grid_1d(bkv * nkb, 1)
        code = _kv_code(cfg, e, ev, s)
        slots.update(NKB=nkb, GROUPS=bkv * nkb, GRID_X=gx,
                     QSTART=f"(k0 / {bq}) * {bq}" if at["causal"] else "0")
    else:
        nqb = math.ceil(lq / bq)
        grid, gx = grid_1d(bh * nqb, 1)
        code = _q_code(cfg, e, lq)
        slots.update(NQB=nqb, GROUPS=bh * nqb, GRID_X=gx,
                     KEND=f"min({s}, q0 + {bq})" if at["causal"] else str(s))
    code = {n: c.replace("$SCALE", slots["SCALE"]) for n, c in code.items()}
    return f"attention_grad_{wrt}", dict(slots, **code), grid, knobs


def _attention_grad_space(out, tnode, options):
    q, _, v = tnode.inputs[:3]
    return attention_grad_space(q.shape[2], v.shape[2])
