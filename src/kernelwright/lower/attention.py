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
"""

from __future__ import annotations

import math

from ..ir.ir import CompileError, GraphBuilder, Value, broadcast_shapes
from ..kernels import attention_template, decode_splits
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
    if attn_mask is not None:
        if not isinstance(attn_mask, Value):
            raise CompileError("attn_mask must be a tensor")
        if attn_mask.dtype == "bool":
            attn_mask = b.ew("where", attn_mask, b.scalar(0.0), b.scalar(NEG_INF))
        attn_mask = as_dtype(b, attn_mask, "f32")
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
