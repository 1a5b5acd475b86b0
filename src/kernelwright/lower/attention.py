"""Attention: aten.scaled_dot_product_attention onto the fused attention templates.

capture.export_graph keeps SDPA whole (it is taken out of the decomposition table),
so F.scaled_dot_product_attention, nn.MultiheadAttention with need_weights=False and
nn.Transformer* layers reach this lowering as one op. It flattens the batch and head
dims, turns a boolean mask into an additive one (an elementwise op that fuses into
the kernel's mask loader, as do the broadcasts of a [L, S] mask) and emits one
`attention` node (kernels/attention.wgsl, online softmax over key blocks, the L x S
scores never stored) or decomposes: scores by matmul, scale, mask, each row's
log-sum-exp, exp(scores - lse) by V (zeros for fully masked rows). `fused` is the one
choice between them: few queries (a decoding step) always fuse, into `attention_decode`
(one workgroup per batch * head and span of keys; a long cache over few heads has its
keys split over several and the spans' parts combined by an elementwise kernel,
`_combine`); in the accelerated precision the node fuses whenever the kernel on the
matrix units fits (kernels.attention_template, which also names its kernel).

nn.MultiheadAttention with need_weights=True exports as explicit bmm / softmax / mean
(PyTorch computes the weights itself), which the matmul and reduction ops lower.

Training (train/step.capture_joint) keeps attention as the CPU's flash attention op
where `flash_fits` says our kernels take it: its forward (`flash_attention`) is the
same fused `attention` node, which then also stores each row's log-sum-exp, and its
backward (`flash_attention_backward`) the two `attention_grad` kernels (dK and dV; dQ)
after one row kernel for delta = rowsum(dO * O): no L x S value in either.
"""

from __future__ import annotations

import math

from ..ir.ir import CompileError, GraphBuilder, Value, broadcast_shapes
from ..kernels import attention_config, attention_grad_knobs, attention_template, decode_splits
from ..options import CompileOptions
from .elementwise import as_dtype, binary, unary_float
from .linalg import lse_probabilities, product
from .registry import register

FUSED: bool | None = None  # None: chosen by `fused`; True / False force a path (tests)
# The decomposition stores the scores of every batch and head (nb * L * S floats) and
# runs at the speed of the matmul and row kernels. On the H200 (2026-12-01f) the
# register-tiled fused kernel (kernels/attention.wgsl) lost to it unmasked (16 x 16
# heads, L = S = 1024, E = 64: 5.33 against 3.97 ms, bench/results/attention_*_h200.json)
# and won causal there (2.89 against 4.06 ms: it never loads key blocks past a block's
# last query), but lost causal on the suite's level1/105 (8 x 12 heads, L = S = 2048,
# E = 64: 8.14 against 7.13 ms, its efficiency per score halved at the longer sequence,
# not yet explained). Until that is understood, the fused kernel is for scores too
# large to store.
MAX_SCORES_BYTES = 1 << 31

NEG_INF = float("-inf")


def _repeat_heads(b: GraphBuilder, x: Value, groups: int) -> Value:
    """enable_gqa: key/value head h serves query heads h * groups .. (h + 1) * groups - 1
    (repeat_interleave on dim -3), as an expand that costs nothing to read."""
    *lead, h, s, e = x.shape
    x = b.reshape(x, (*lead, h, 1, s, e))
    x = b.expand(x, (*lead, h, groups, s, e))
    return b.reshape(x, (*lead, h * groups, s, e))


def _additive_mask(b: GraphBuilder, attn_mask) -> Value | None:
    """SDPA's attn_mask as an f32 value added to the scores (a bool mask: 0 where kept,
    -inf where not), or None."""
    if attn_mask is None:
        return None
    if not isinstance(attn_mask, Value):
        raise CompileError("attn_mask must be a tensor")
    if attn_mask.dtype == "bool":
        attn_mask = b.ew("where", attn_mask, b.scalar(0.0), b.scalar(NEG_INF))
    return as_dtype(b, attn_mask, "f32")


@register("aten.scaled_dot_product_attention.default")
def scaled_dot_product_attention(b: GraphBuilder, q: Value, k: Value, v: Value, attn_mask=None,
                                 dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        raise CompileError(f"attention dropout (p={dropout_p}) is random; compile the model "
                           "in eval mode or pass dropout_p=0")
    if is_causal and attn_mask is not None:
        raise CompileError("scaled_dot_product_attention takes attn_mask or is_causal, not both")
    if min(len(q.shape), len(k.shape), len(v.shape)) < 2:
        raise CompileError("attention needs q, k, v of at least 2 dims")
    if enable_gqa and len(q.shape) >= 3 and q.shape[-3] != k.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hq % hk or hq % v.shape[-3]:
            raise CompileError(f"grouped-query attention: {hq} query heads over {hk} key heads")
        k, v = _repeat_heads(b, k, hq // hk), _repeat_heads(b, v, hq // v.shape[-3])
    lq, e = q.shape[-2:]
    s, ev = k.shape[-2], v.shape[-1]
    if k.shape[-1] != e or v.shape[-2] != s:
        raise CompileError(f"attention shapes q {list(q.shape)}, k {list(k.shape)}, "
                           f"v {list(v.shape)} do not match")
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    q, k, v = (as_dtype(b, x, "f32") for x in (q, k, v))
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    attn_mask = _additive_mask(b, attn_mask)
    if attn_mask is not None:
        batch = broadcast_shapes(batch, attn_mask.shape[:-2])
    if fused(math.prod(batch), lq, s, e, ev, b.options):
        return _fused(b, q, k, v, attn_mask, is_causal, scale, batch)
    return _decomposed(b, q, k, v, attn_mask, is_causal, scale)


def fused(nb: int, lq: int, s: int, e: int, ev: int,
          options: CompileOptions | None = None) -> bool:
    """The one decision between a fused kernel and the decomposition for `options`: the
    kernel kernels.attention_template names for the shape. Few queries (at most
    kernels.attention_decode.DECODE_MAX_L = 8 per batch * head: a decoding step) always
    take `attention_decode`, one kernel (two for a long cache over few heads:
    decode_splits) where the decomposition is three launches of tiny work each; with
    more, the accelerated kernel (`attention_coop`, both products on the matrix units)
    whenever it fits, the strict one for scores too large to store (see FUSED and the
    measurements above MAX_SCORES_BYTES)."""
    kind = attention_template(options, lq, e, ev) if min(lq, e, ev) >= 1 else None
    if kind is None:
        return False  # head dims too wide for the kernels' workgroup tiles
    if FUSED is not None:
        return FUSED
    return kind in ("attention_decode", "attention_coop") or nb * lq * s * 4 >= MAX_SCORES_BYTES


def _fused(b, q, k, v, mask, causal, scale, batch) -> Value:
    nb = math.prod(batch)

    def flat(x, rows, cols):
        return b.reshape(b.expand(x, batch + (rows, cols)), (nb, rows, cols))

    lq, e = q.shape[-2:]
    s, ev = k.shape[-2], v.shape[-1]
    m3 = None if mask is None else flat(mask, lq, s)
    q3, k3, v3 = flat(q, lq, e), flat(k, s, e), flat(v, s, ev)
    split = 1
    if attention_template(b.options, lq, e, ev) == "attention_decode":
        waves = b.options.waves if b.options is not None else None
        split = decode_splits(nb, min(s, lq) if causal else s, waves)
    if split == 1:
        out = b.attention(q3, k3, v3, m3, causal, scale)
    else:
        out = _combine(b, b.attention(q3, k3, v3, m3, causal, scale, split), split, ev)
    return b.reshape(out, batch + (lq, ev))


def _combine(b: GraphBuilder, parts: Value, split: int, ev: int) -> Value:
    """The attention of the key spans' parts [B, L, split * (ev + 2)] (each span's
    unnormalized output, maximum m_p and sum l_p; GraphBuilder.attention): with
    M = max_p m_p and w_p = exp(m_p - M), sum_p w_p o_p / sum_p w_p l_p (zeros where
    every key is masked). Elementwise over the parts' slices: one small kernel, or none
    where its reader's loader takes it."""
    nb, lq = parts.shape[:2]
    parts = b.reshape(parts, (nb, lq, split, ev + 2))

    def part(p: int, lo: int, hi: int) -> Value:
        x = b.slice(b.slice(parts, 2, p, p + 1), 3, lo, hi)
        return b.reshape(x, (nb, lq, hi - lo))

    maxima = [part(p, ev, ev + 1) for p in range(split)]
    top = maxima[0]
    for m in maxima[1:]:
        top = b.ew("maximum", top, m)
    top = b.ew("where", b.ew("eq", top, b.scalar(NEG_INF), dtype="bool"), b.scalar(0.0), top)
    num = den = None
    for p, m in enumerate(maxima):
        w = b.ew("where", b.ew("eq", m, b.scalar(NEG_INF), dtype="bool"), b.scalar(0.0),
                 b.ew("exp", b.ew("sub", m, top)))
        o, total = b.ew("mul", w, part(p, 0, ev)), b.ew("mul", w, part(p, ev + 1, ev + 2))
        num = o if num is None else b.ew("add", num, o)
        den = total if den is None else b.ew("add", den, total)
    inv = b.ew("where", b.ew("eq", den, b.scalar(0.0), dtype="bool"), b.scalar(0.0),
               b.ew("div", b.scalar(1.0), den))
    return b.ew("mul", num, inv)


def causal_mask(b: GraphBuilder, lq: int, s: int) -> Value:
    """Boolean [L, S], true where key j may be seen by query i (j <= i): PyTorch's
    top-left aligned causal mask, two iotas compared inside the reading kernel."""
    return b.ew("le", b.iota((lq, s), 1), b.iota((lq, s), 0), dtype="bool")


def _decomposed(b, q, k, v, mask, causal, scale) -> Value:
    scores = product(b, binary(b, "mul", q, scale), b.transpose(k, -1, -2))
    lq, s = scores.shape[-2:]

    def masked(x: Value, fill: float) -> Value:
        """Causal: x where key j <= query i, else fill (a mask of its own per use, which
        each reader's loader computes; one shared mask would be stored)."""
        return b.ew("where", causal_mask(b, lq, s), x, b.scalar(fill)) if causal else x

    if mask is not None:
        scores = binary(b, "add", scores, mask)
    scores = masked(scores, NEG_INF)  # tiles past the diagonal: no product (k_range)
    dim = len(scores.shape) - 1
    # the max's input says again that the masked scores are -inf, so that the row kernel
    # of the max and the log-sum-exp loads each row only up to its diagonal
    # (kernels.rows._row_band_end)
    m = b.reduce(masked(scores, NEG_INF), "max", [dim], True)
    m = b.ew("where", b.ew("eq", m, b.scalar(NEG_INF), dtype="bool"), b.scalar(0.0), m)
    ex = masked(unary_float(b, "exp", binary(b, "sub", scores, m)), 0.0)
    total = b.reduce(ex, "sum", [dim], True)
    # one row kernel for the max and the log-sum-exp; the product by V computes the
    # probabilities (linalg.lse_probabilities), zero above the diagonal, said so: the
    # product then bounds each tile's K loop by its last query (linalg.k_range)
    return product(b, masked(lse_probabilities(b, scores, m, total), 0.0), v)


def flash_fits(e: int, ev: int, dropout_p: float) -> bool:
    """The one decision whether a training capture keeps an attention of head dims e
    (q, k) and ev (v) as the CPU's flash attention op (whose forward and backward lower
    here onto fused kernels) rather than the math backend's plain ops: no dropout (the
    kernels draw no random numbers) and tiles of the forward kernel and of both backward
    kernels that fit. PyTorch itself keeps the math backend where its flash kernel does
    not apply (e != ev, 3-d inputs, a mask that needs a gradient)."""
    return not dropout_p and attention_config(e, ev) is not None \
        and attention_grad_knobs(e, ev) is not None


def _flash_inputs(b: GraphBuilder, q: Value, k: Value, v: Value, attn_mask, scale):
    """The flash op's q [N, H, L, E], k, v [N, Hk, S, E] (H a multiple of Hk) as
    [N * H, L, E] and [N * Hk, S, E] f32 values, a function making its additive mask's
    [N * H, L, S] view (or None) and the scale. Each kernel reading the mask gets a view
    of its own, which its loader computes: one view read by several kernels would be
    stored, [N * H, L, S]."""
    if len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        raise CompileError("flash attention wants 4-d q, k, v")
    n, h, lq, e = q.shape
    hk, s = k.shape[1], k.shape[2]
    if h % hk or k.shape != (n, hk, s, e) or v.shape[:3] != (n, hk, s):
        raise CompileError(f"flash attention shapes q {list(q.shape)}, k {list(k.shape)}, "
                           f"v {list(v.shape)} do not match")
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    q3 = b.reshape(as_dtype(b, q, "f32"), (n * h, lq, e))
    k3 = b.reshape(as_dtype(b, k, "f32"), (n * hk, s, e))
    v3 = b.reshape(as_dtype(b, v, "f32"), (n * hk, s, v.shape[3]))
    attn_mask = _additive_mask(b, attn_mask)

    def mask() -> Value | None:
        if attn_mask is None:
            return None
        return b.reshape(b.expand(attn_mask, (n, h, lq, s)), (n * h, lq, s))
    return q3, k3, v3, mask, scale


@register("aten._scaled_dot_product_flash_attention_for_cpu.default")
def flash_attention(b: GraphBuilder, q: Value, k: Value, v: Value, dropout_p=0.0,
                    is_causal=False, attn_mask=None, scale=None):
    """(output [N, H, L, Ev], log-sum-exp [N, H, L]): one `attention` node with `lse`,
    key/value heads read by their groups of query heads through a view."""
    if dropout_p:
        raise CompileError(f"flash attention with dropout (p={dropout_p}) is not supported; "
                           "the training capture keeps it on the math backend (flash_fits)")
    q3, k3, v3, mask, scale = _flash_inputs(b, q, k, v, attn_mask, scale)
    n, h, lq, _ = q.shape
    hk, ev = k.shape[1], v.shape[3]
    if h != hk:
        k3 = b.reshape(_repeat_heads(b, b.reshape(k3, (n, hk) + k3.shape[1:]), h // hk),
                       (n * h,) + k3.shape[1:])
        v3 = b.reshape(_repeat_heads(b, b.reshape(v3, (n, hk) + v3.shape[1:]), h // hk),
                       (n * h,) + v3.shape[1:])
    both = b.attention(q3, k3, v3, mask(), is_causal, scale, lse=True)
    size = n * h * lq * ev
    out = b.reshape(b.slice(both, 0, 0, size), (n, h, lq, ev))
    return out, b.reshape(b.slice(both, 0, size, size + n * h * lq), (n, h, lq))


@register("aten._scaled_dot_product_flash_attention_for_cpu_backward.default")
def flash_attention_backward(b: GraphBuilder, grad: Value, q: Value, k: Value, v: Value,
                             out: Value, lse: Value, dropout_p=0.0, is_causal=False,
                             attn_mask=None, scale=None):
    """(dQ, dK, dV): delta = rowsum(dO * O) by a row kernel, then the `attention_grad`
    kernels of dQ and of dK and dV (kernels/attention_grad.py), which compute the
    scores again block by block from q, k and the forward's log-sum-exp."""
    if dropout_p:
        raise CompileError(f"flash attention's backward with dropout (p={dropout_p}) is "
                           "not supported")
    q3, k3, v3, mask, scale = _flash_inputs(b, q, k, v, attn_mask, scale)
    n, h, lq, e = q.shape
    hk, s, ev = k.shape[1], k.shape[2], v.shape[3]
    g3 = b.reshape(as_dtype(b, grad, "f32"), (n * h, lq, ev))
    o3 = b.reshape(as_dtype(b, out, "f32"), (n * h, lq, ev))
    lse2 = b.reshape(as_dtype(b, lse, "f32"), (n * h, lq))
    delta = b.reduce(b.ew("mul", g3, o3), "sum", [2])
    dq = b.attention_grad(q3, k3, v3, g3, lse2, delta, mask(), is_causal, scale, "q")
    dkv = b.attention_grad(q3, k3, v3, g3, lse2, delta, mask(), is_causal, scale, "kv")
    return (b.reshape(dq, (n, h, lq, e)), b.reshape(b.slice(dkv, 2, 0, e), (n, hk, s, e)),
            b.reshape(b.slice(dkv, 2, e, e + ev), (n, hk, s, ev)))
