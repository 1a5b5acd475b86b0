"""Fused attention on the matrix units (the accelerated precision mode: Q K^T and P V on
Dawn's subgroup matrices, f16 operands, f32 accumulation and softmax): knobs, space,
generator (kernels/attention_coop.wgsl), and `attention_template`, the one choice of
the kernel that computes an attention."""

from __future__ import annotations

from ..ir.ir import CompileError
from ..options import CompileOptions, MatrixUnit
from .attention import attention_config, attention_slots
from .attention_decode import decode_config
from .common import MAX_WG, merge_knobs, require

ATTENTION_COOP_BYTES = 32768  # as the accelerated matmul's space
# Subgroups per workgroup and keys per block, first fitting first (each subgroup owns one
# matrix of query rows by default). Not yet measured on a GPU.
ATTENTION_COOP_SETTINGS = ((4, 32), (2, 32), (4, 16), (2, 16), (1, 16))
F16_PAD, F32_PAD = 8, 4  # row padding of the f16 and f32 tiles: 16 bytes


def attention_template(options: CompileOptions | None, lq: int, e: int, ev: int) -> str | None:
    """The kernel that computes a fused attention of `lq` queries per batch * head and
    head dims `e` (q, k) and `ev` (v) for `options`: "attention_decode" for few queries
    (kernels/attention_decode.py: at most DECODE_MAX_L, in either precision: its work is
    the cache's bytes, not multiply-adds) when its tiles fit; else "attention_coop" in
    the accelerated precision on subgroup matrices when its tiles fit, else "attention"
    when the strict kernel's do, else None (the lowering decomposes). The one place this
    is decided (lower/attention.py's `fused` and kernels.template_kind both ask it)."""
    if decode_config(lq, e, ev) is not None:
        return "attention_decode"
    if (options is not None and options.precision == "accelerated"
            and options.matrix is not None and options.matrix.api == "subgroup-matrix"
            and attention_coop_knobs(e, ev, options.matrix) is not None):
        return "attention_coop"
    return "attention" if attention_config(e, ev) is not None else None


def attention_coop_knobs(e: int, ev: int, unit: MatrixUnit) -> dict | None:
    """NSG subgroups of WQ query rows, BK keys per block: the first of
    ATTENTION_COOP_SETTINGS whose tiles fit (attention_coop_layout); None when none does."""
    for nsg, bk in ATTENTION_COOP_SETTINGS:
        knobs = {"NSG": nsg, "WQ": unit.m, "BK": bk}
        if attention_coop_layout(e, ev, knobs, unit) is not None:
            return knobs
    return None


def attention_coop_space(e: int, ev: int, unit: MatrixUnit) -> list[dict]:
    """The settings that fit: ATTENTION_COOP_SETTINGS with one or two matrices of query
    rows per subgroup."""
    space = ({"NSG": nsg, "WQ": rows * unit.m, "BK": bk}
             for rows in (1, 2) for nsg, bk in ATTENTION_COOP_SETTINGS)
    return [k for k in space if attention_coop_layout(e, ev, k, unit) is not None]


def attention_coop_layout(e: int, ev: int, knobs: dict, unit: MatrixUnit) -> dict | None:
    """The template's derived slots for head dims E, EV, the knobs and the matrix unit:
    the padded head dims, the tiles' strides and sizes; None when the knobs are not
    whole matrices or the tiles exceed the invocations or ATTENTION_COOP_BYTES."""
    nsg, wq, bk = knobs["NSG"], knobs["WQ"], knobs["BK"]
    if (wq % unit.m or bk % unit.n or bk % unit.k or nsg * unit.subgroup > MAX_WG):
        return None
    ep, evp = -(-e // unit.k) * unit.k, -(-ev // unit.n) * unit.n
    bq = nsg * wq
    qs, ps, ks, vs = ep + F16_PAD, bk + F16_PAD, ep + F16_PAD, evp + F16_PAD
    fs = max(bk, evp) + F32_PAD
    h_words, kv_words, f_words = bq * max(qs, ps), bk * max(ks, vs), bq * fs
    size = 2 * (h_words + kv_words) + 4 * (f_words + 3 * bq)
    if size > ATTENTION_COOP_BYTES:
        return None
    return dict(EP=ep, EVP=evp, BQ=bq, BK=bk, WQ=wq, WG=nsg * unit.subgroup, QS=qs, PS=ps,
                KS=ks, VS=vs, FS=fs, H_WORDS=h_words, KV_WORDS=kv_words, F_WORDS=f_words,
                TK=unit.k, workgroup_bytes=size)


def _matrix_code(lay: dict, unit: MatrixUnit) -> dict:
    """The unrolled matrix operations: q_i_e the query fragments (row matrix i, depth
    step e), o_i_d the output accumulators (column matrix d), the scores' products and
    stores, the outputs' store to and load from f_tile, and one depth step of P V."""
    m, n, k = unit.m, unit.n, unit.k
    ti, te, tc, td = lay["WQ"] // m, lay["EP"] // k, lay["BK"] // n, lay["EVP"] // n
    qs, ps, ks, vs, fs = (lay[x] for x in ("QS", "PS", "KS", "VS", "FS"))
    left, right = f"subgroup_matrix_left<f16, {k}, {m}>", f"subgroup_matrix_right<f16, {n}, {k}>"
    result = f"subgroup_matrix_result<f32, {n}, {m}>"
    mma = "subgroupMatrixMultiplyAccumulate"
    p4, p8, p12 = " " * 4, " " * 8, " " * 12
    frags = [f"{p4}let q_{i}_{s} = subgroupMatrixLoad<{left}>(&h_tile, "
             f"u32((wq + {i * m}) * {qs} + {s * k}), false, {qs}u);"
             for i in range(ti) for s in range(te)]
    accs = [f"{p4}var o_{i}_{d} = {result}();" for i in range(ti) for d in range(td)]
    scores = []
    for c in range(tc):
        scores += [f"{p8}var s_{i} = {result}();" if c == 0 else f"{p8}s_{i} = {result}();"
                   for i in range(ti)]
        for s in range(te):
            scores.append(f"{p8}{{ let kf = subgroupMatrixLoad<{right}>(&kv_tile, "
                          f"u32({c * n * ks + s * k}), true, {ks}u);")
            scores += [f"{p12}s_{i} = {mma}(q_{i}_{s}, kf, s_{i});" for i in range(ti)]
            scores.append(f"{p8}}}")
        scores += [f"{p8}subgroupMatrixStore(&f_tile, u32((wq + {i * m}) * {fs} + {c * n}), "
                   f"s_{i}, false, {fs}u);" for i in range(ti)]
    at = "u32((wq + {row}) * {fs} + {col})"
    o_store = [f"{p8}subgroupMatrixStore(&f_tile, {at.format(row=i * m, fs=fs, col=d * n)}, "
               f"o_{i}_{d}, false, {fs}u);" for i in range(ti) for d in range(td)]
    o_load = [f"{p8}o_{i}_{d} = subgroupMatrixLoad<{result}>(&f_tile, "
              f"{at.format(row=i * m, fs=fs, col=d * n)}, false, {fs}u);"
              for i in range(ti) for d in range(td)]
    pv = [f"{p12}let p_{i} = subgroupMatrixLoad<{left}>(&h_tile, "
          f"u32((wq + {i * m}) * {ps} + jj), false, {ps}u);" for i in range(ti)]
    for d in range(td):
        pv.append(f"{p12}{{ let vf = subgroupMatrixLoad<{right}>(&kv_tile, "
                  f"u32(jj * {vs} + {d * n}), false, {vs}u);")
        pv += [f"{p12}    o_{i}_{d} = {mma}(p_{i}, vf, o_{i}_{d});" for i in range(ti)]
        pv.append(f"{p12}}}")
    return dict(Q_FRAGMENTS="\n".join(frags), O_ACCUMULATORS="\n".join(accs),
                SCORES="\n".join(scores), O_STORE="\n".join(o_store), O_LOAD="\n".join(o_load),
                PV_PRODUCT="\n".join(pv))


def _attention_coop(src, materialized, out, tnode, knobs, options: CompileOptions):
    unit = options.matrix
    if unit is None or unit.api != "subgroup-matrix":
        raise CompileError("the accelerated attention needs subgroup matrices "
                           "(CompileOptions.matrix)")
    q, _, v = tnode.inputs[:3]
    _, lq, e = q.shape
    ev = v.shape[2]
    default = attention_coop_knobs(e, ev, unit)
    if default is None:
        raise CompileError(f"attention head dims {e}, {ev} do not fit the accelerated "
                           "kernel's tiles")
    knobs = merge_knobs(default, knobs)
    require(all(isinstance(knobs[x], int) and knobs[x] >= 1 for x in ("NSG", "WQ", "BK")),
            knobs, "NSG, WQ and BK must be positive integers")
    lay = attention_coop_layout(e, ev, knobs, unit)
    require(lay is not None, knobs, f"WQ and BK must be whole {unit.m} x {unit.n} x {unit.k} "
            "matrices and the tiles fit the invocations and workgroup memory")
    shared, keep, mask, grid = attention_slots(src, materialized, tnode, lay["BQ"])
    enable = "enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;"
    slots = dict(shared, ENABLE=enable, KEEP=keep, MASK=mask, **lay, **_matrix_code(lay, unit))
    return "attention_coop", slots, grid, knobs


def _attention_coop_space(out, tnode, options: CompileOptions) -> list[dict]:
    q, _, v = tnode.inputs[:3]
    if options.matrix is None:
        return []
    return attention_coop_space(q.shape[2], v.shape[2], options.matrix)
