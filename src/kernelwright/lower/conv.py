"""Convolution: aten.convolution in 1, 2 and 3 spatial dims, plain and transposed.

Two lowerings, chosen in one place (`implicit_gemm`):

* implicit GEMM (most convolutions): per group g,
      out[n, g, co, o] = sum_kk W[g, co, kk] * cols[n, g, kk, o]
  a batched matmul (batch N * groups, M = output channels per group, N = output
  spatial size, K = input channels per group * kernel volume) whose B operand is the
  input seen through a `window` view (im2col as index arithmetic inside the matmul's
  B loader: strides, padding -> 0, dilation), never materialized. With the weights
  as A and the windows as B the product's [N, G, CO/G, spatial] layout *is* NCHW, so
  the output needs no permute and bias and activations fuse as the matmul's epilogue.
  Where the output positions are few against the tile's columns (7 x 7 = 49 of 64) the
  batch folds into N instead (`fold_batch`, `conv_product`): G products of M x (N *
  spatial), B the windows through a permute, the folded matmul storing NCHW.
  A transposed convolution is gathered phase by phase (`conv_transpose_gemm`): the
  outputs o = stride * q + r of one phase r are reached by a fixed subset of the taps,
  so each phase is an ordinary stride-1 convolution (flipped taps, channels swapped),
  one implicit GEMM over only the taps that are not zeros (all phases' taps stored by
  one copy kernel); the prod(stride) phase results are interleaved by a `cat` view that
  the phases' products store into in place (schedule.placements). No scatter, no
  atomics, no multiplications by zero.
* the direct kernel (`conv` primitive, kernels/conv.wgsl, conv_transpose.wgsl) for
  the rest: depthwise and other convolutions with few channels per group.

F.conv*d's string padding ('same') arrives already lowered to an explicit pad by
torch.export. F.unfold (aten.im2col) is the same window view, reshaped.
"""

from __future__ import annotations

import itertools
import math
import weakref

from ..ir.ir import CAT_FANIN, CompileError, GraphBuilder, Value
from ..kernels import MAX_GRID, matmul_tiles, matmul_wide
from ..options import Waves
from .elementwise import binary
from .linalg import _unexpanded, folded_product, product
from .registry import register

# When the implicit GEMM replaces the direct kernel. The matmul template spends a
# tile's work on every (output channel, output position) pair of a group, the smallest
# tile being 16 output channels by 64 positions deep 16 (kernels.matmul_tiles): with
# fewer output channels per group than GEMM_MIN_COUT, or a reduction shallower than
# GEMM_MIN_K (input channels per group times kernel volume), part of that tile is
# padding, and the direct kernel (4 outputs per invocation, no staging) wins. Measured
# on the H200 (bench/results/conv_*_h200.json): 32 groups of 8 -> 8 channels, 3x3,
# 28x28, batch 32: direct 0.27 ms, GEMM 0.54 ms; depthwise (1 channel per group):
# direct 0.23 ms, GEMM 2.65 ms. Dense convolutions (64+ channels) are 2.5-7x faster
# as a GEMM.
GEMM_MIN_COUT = 16
GEMM_MIN_K = 8


def implicit_gemm(n: int, cin: int, cout: int, kernel, stride, groups: int,
                  transposed: bool) -> bool:
    """The one decision between the implicit GEMM and the direct kernel (see above); a
    transposed convolution's depth is that of its phases (about K / stride taps)."""
    cg, cog = cin // groups, cout // groups
    taps = math.prod(-(-k // s) for k, s in zip(kernel, stride)) if transposed \
        else math.prod(kernel)
    return cog >= GEMM_MIN_COUT and cg * taps >= GEMM_MIN_K and n * groups <= MAX_GRID


# When the batch folds into the GEMM's columns (fold_batch): the tiles of the product per
# batch entry leave at least this share of their columns as padding more than the
# folded product's tiles do.
FOLD_MIN_PADDING = 0.125


def _column_padding(m: int, n: int, nb: int, k: int, waves: Waves | None) -> float:
    """The share of padding in the columns of the tiles matmul_tiles gives nb products
    of M x N x K whose B operand reads windows."""
    bn = matmul_tiles(m, n, nb, window=True, wide=matmul_wide(m, n, k), waves=waves)[1]
    return 1 - n / (-(-n // bn) * bn)


def fold_batch(n: int, groups: int, m: int, positions: int, depth: int,
               waves: Waves | None) -> bool:
    """Whether an implicit GEMM of `groups` products of M (output channels per group) x
    `positions` x `depth` per batch entry of n folds the batch into the GEMM's columns
    (one product of n * positions columns per group, its tiles crossing the batch
    entries: conv_product): where the tiles of the product per entry are padded along
    its few positions (7 x 7 = 49 of a 64-wide tile: a quarter of each tile is
    padding) at least FOLD_MIN_PADDING more than the folded product's."""
    if n < 2:
        return False
    per_entry = _column_padding(m, positions, n * groups, depth, waves)
    folded = _column_padding(m, n * positions, groups, depth, waves)
    return per_entry - folded >= FOLD_MIN_PADDING


def conv_product(b: GraphBuilder, a: Value, cols: Value, multiply=product) -> Value:
    """The implicit GEMM of weights a [G, M, D] by windows cols [N, G, D, *O] as
    [N, G, M, P] (P = prod(O); NCHW, groups apart): N * G products of M x P, or, where
    fold_batch says so (and `multiply` is linalg.product), G products of M x N * P, the
    batch folded into the columns (B's loader addresses [D] x [N * P] through a permute
    of the window view, one reshape from a column to its (n, *o), whose four lanes
    share one decoding; the folded matmul stores its output as [N, G, M, P])."""
    n, g, d, *out = cols.shape
    p = math.prod(out)
    if multiply is product and fold_batch(n, g, a.shape[1], p, d, b.options.waves):
        y = b.reshape(b.permute(cols, [1, 2, 0, *range(3, 3 + len(out))]), (g, d, n * p))
        return folded_product(b, a, y, p)
    return multiply(b, a, b.reshape(cols, (n, g, d, p)))


def per_dim(v, nd: int, name: str) -> list[int]:
    """An int or a list of ints (one, or one per spatial dim) as one int per dim."""
    if isinstance(v, int):
        return [v] * nd
    v = [int(e) for e in v]
    if len(v) == 1:
        return v * nd
    if len(v) != nd:
        raise CompileError(f"{name} {v} for {nd} spatial dims")
    return v


def conv_gemm(b: GraphBuilder, x: Value, w: Value, stride, padding, dilation,
              groups: int, multiply=product) -> Value:
    """A convolution of x [N, C, *S] by w [CO, C / groups, *K] as an implicit GEMM
    (`multiply(b, a, b)`: linalg.product, or one matmul node whatever the depth)."""
    nd = len(x.shape) - 2
    n, c = x.shape[:2]
    co, kernel = w.shape[0], list(w.shape[2:])
    cols = b.window(x, kernel, stride, padding, dilation)  # [N, C, *K, *O]
    out = list(cols.shape[2 + nd:])
    depth = c // groups * math.prod(kernel)
    a = b.reshape(w, (groups, co // groups, depth))
    y = conv_product(b, a, b.reshape(cols, (n, groups, depth, *out)), multiply)
    return b.reshape(y, (n, co, *out))


def transposed_phase(r: int, size: int, kernel: int, stride: int, padding: int,
                     dilation: int) -> tuple[int, int, int, int] | None:
    """One dim of a transposed convolution, out[o] = sum over i * stride - padding + k *
    dilation = o of x[i] w[k], seen at the outputs o = stride * q + r of phase r: the
    taps that reach them are k = k0 + t * (stride / g) (g = gcd(stride, dilation)), each
    reading x[q + c0 - t * dilation / g], c0 = (r + padding - k0 * dilation) / stride.
    Returns (k0, taps, window padding, window dilation) for the stride-1 window over the
    flipped taps (x[q - padding + t' * dilation'], t' = taps - 1 - t); None when no tap
    reaches the phase."""
    g = math.gcd(stride, dilation)
    step = stride // g
    k0 = next((k for k in range(min(step, kernel))
               if (k * dilation - r - padding) % stride == 0), None)
    if k0 is None:
        return None
    taps = len(range(k0, kernel, step))
    c0 = (r + padding - k0 * dilation) // stride
    return k0, taps, (taps - 1) * (dilation // g) - c0, dilation // g


def conv_transpose_gemm(b: GraphBuilder, x: Value, w: Value, stride, padding, dilation,
                        output_padding, groups: int, multiply=product,
                        bias: Value | None = None) -> Value:
    """A transposed convolution of x [N, C, *S] by w [C, CO / groups, *K], phase by phase
    (transposed_phase): for each phase r (one residue of the output index modulo the
    stride per dim) an implicit GEMM of the stride-1 window of x by that phase's taps,
    flipped, with the channels swapped, plus `bias` [CO] (in the GEMM's epilogue); then
    the phases interleaved (out[s * q + r] = phase r's [q]) and cropped to the output
    size. The interleaving is a view: its kernel's pieces store in place into it where
    they can (schedule.placements), the products writing straight into the output."""
    nd = len(x.shape) - 2
    n, c, *size = x.shape
    cog, kernel = w.shape[1], list(w.shape[2:])
    out = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, s, p, d, k, op in
           zip(size, stride, padding, dilation, kernel, output_padding)]
    qs = [-(-o // s) for o, s in zip(out, stride)]  # outputs per phase, the last cropped
    cg = c // groups
    wg = b.permute(b.reshape(w, (groups, cg, cog, *kernel)),
                   [0, 2, 1, *range(3, 3 + nd)])  # [G, CO/G, C/G, *K]
    shift = None if bias is None else b.reshape(bias, (1, -1) + (1,) * nd)
    phases, taps_of = {}, {}
    for r in itertools.product(*(range(s) for s in stride)):
        dims = [transposed_phase(*a) for a in zip(r, size, kernel, stride, padding, dilation)]
        if None in dims:  # no tap reaches these outputs: zeros (the bias)
            zero = b.reshape(b.scalar(0.0, x.dtype), (1,) * (2 + nd)) if shift is None \
                else shift
            phases[r] = b.expand(zero, (n, cog * groups, *qs))
            continue
        wr = wg
        for j, ((k0, _, _, _), s, d) in enumerate(zip(dims, stride, dilation)):
            wr = b.slice(wr, 3 + j, k0, kernel[j], s // math.gcd(s, d))
        taps_of[r] = (dims, b.flip(wr, range(3, 3 + nd)))
    # Every phase's taps, flipped, stored K-contiguous by one small copy kernel (a cat of
    # the phases' taps, each read through its slice and flip): seen through the slice and
    # flip, A's K stride is -stride, so A had no vec4 view and was staged along M.
    # Measured on the H200 (2026-12-01h, suite, a copy kernel per phase then): level1/073
    # (1-d, 256 -> 128 channels, 4 taps, stride 2) 4.39 -> 2.77 ms, 074 (2-d) 3.46 ->
    # 2.80 ms, 075 (3-d, 8 phases) 3.35 -> 2.68 ms, with the vec4 loaders. Not at stride 1
    # (not measured): one phase, whose kernel reads the weight itself, so `kernelwright
    # optimize` can still put the direct kernel in its place (a rewrite binds the same
    # buffers)
    stored, at = None, {}
    if math.prod(stride) > 1 and taps_of:
        flat = [b.reshape(wr, (wr.numel,)) for _, wr in taps_of.values()]
        while len(flat) > CAT_FANIN:  # cats of cats, not materialized (GraphBuilder.cat):
            flat = [b.cat(flat[i:i + CAT_FANIN], 0)  # every piece reads the one weight
                    for i in range(0, len(flat), CAT_FANIN)]
        stored = b.materialize(b.cat(flat, 0))
        start = 0
        for r, (_, wr) in taps_of.items():
            at[r] = (start, start + wr.numel)
            start += wr.numel
    for r, (dims, wr) in taps_of.items():
        if stored is not None:
            wr = b.slice(stored, 0, *at[r])
        taps = [t for _, t, _, _ in dims]
        cols = b.window(x, taps, [1] * nd, [p for _, _, p, _ in dims],
                        [d for _, _, _, d in dims], out=qs)  # [N, C, *T, *Q]
        depth = cg * math.prod(taps)
        y = conv_product(b, b.reshape(wr, (groups, cog, depth)),
                         b.reshape(cols, (n, groups, depth, *qs)), multiply)
        y = b.reshape(y, (n, cog * groups, *qs))
        phases[r] = y if shift is None else binary(b, "add", y, shift)
    return _interleave(b, phases, stride, out)


def _interleave(b: GraphBuilder, phases: dict, stride, out) -> Value:
    """out[..., s * q + r, ...] = phases[r][..., q, ...] per spatial dim, cropped to `out`:
    each phase seen as [N, C, Q1, 1, Q2, 1, ...], joined by cats along the unit dims from
    the last spatial dim to the first, then reshaped and sliced."""
    nd = len(stride)
    n, c, *qs = next(iter(phases.values())).shape
    vals = {r: b.reshape(y, (n, c, *(e for q in qs for e in (q, 1)))) for r, y in phases.items()}
    for j in reversed(range(nd)):
        vals = {key: b.cat([vals[key + (t,)] for t in range(stride[j])], 3 + 2 * j)
                for key in {r[:j] for r in vals}}
    y = b.reshape(vals[()], (n, c, *(q * s for q, s in zip(qs, stride))))
    for j, o in enumerate(out):
        y = b.slice(y, 2 + j, 0, o)
    return y


def mark_lowering(v: Value, op: str, lowering: str, alternatives: dict) -> None:
    """Name the lowering of the `op` node computing v (seen through reshapes) and its
    alternatives (ir.Node.alternatives); nothing when no such node computes v."""
    while v.node is not None and v.node.op == "reshape":
        v = v.node.inputs[0]
    if v.node is not None and v.node.op == op:
        v.node.lowering, v.node.alternatives = lowering, alternatives


@register("aten.convolution.default")
def convolution(b: GraphBuilder, x: Value, w: Value, bias, stride, padding, dilation,
                transposed, output_padding, groups):
    nd = len(x.shape) - 2
    if nd not in (1, 2, 3):
        raise CompileError(f"convolution of a {len(x.shape)}-d input: only 1 to 3 spatial "
                           "dims (input [N, C, *S]) are supported")
    if x.dtype != "f32" or w.dtype != "f32":
        raise CompileError(f"convolution of {x.dtype} by {w.dtype}: f32 only")
    stride, padding, dilation, output_padding = (
        per_dim(v, nd, name) for v, name in ((stride, "stride"), (padding, "padding"),
                                             (dilation, "dilation"),
                                             (output_padding, "output_padding")))
    transposed = bool(transposed)
    cout = w.shape[1] * groups if transposed else w.shape[0]

    def direct(gb: GraphBuilder) -> Value:
        return gb.conv(x, w, stride, padding, dilation, groups, transposed, output_padding)

    # a strided transposed GEMM adds the bias per phase (its products' epilogues), so
    # that the phases' interleaving stays a view that they store into
    phased = transposed and math.prod(stride) > 1

    def gemm(gb: GraphBuilder, multiply=product) -> Value:
        if transposed:
            return conv_transpose_gemm(gb, x, w, stride, padding, dilation, output_padding,
                                       groups, multiply, bias if phased else None)
        return conv_gemm(gb, x, w, stride, padding, dilation, groups, multiply)

    if implicit_gemm(x.shape[0], x.shape[1], cout, w.shape[2:], stride, groups, transposed):
        out = gemm(b)
        if phased:
            return out
        # the other lowering, for rewrites (optimize/rewrite.py), when the product is one
        # matmul (not split-K, not a small-K sum: those are not one kernel)
        mark_lowering(out, "matmul", "implicit_gemm", {"direct": direct})
    else:
        out = direct(b)
        if not transposed or math.prod(stride) == 1:  # else the GEMM is one per phase
            mark_lowering(out, "conv", "direct", {
                "implicit_gemm": lambda gb: gemm(gb, lambda g, p, q: g.matmul(p, q))})
    if not transposed:
        _LOWERED[out] = (x, w, stride, padding, dilation, groups)
    if bias is not None:
        out = binary(b, "add", out, b.reshape(bias, (1, -1) + (1,) * nd))
    return out


# The convolutions lowered above (not transposed), by the value they compute before the
# bias: (x, w, stride, padding, dilation, groups), for pooled_convolution.
_LOWERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# A pooled convolution takes at most this many pool taps (the combined kernel is a sum
# of this many shifted copies of the weights).
POOLED_MAX_TAPS = 16


def pooled_convolution(b: GraphBuilder, v: Value, kernel: list[int], stride: list[int],
                       padding: list[int], ceil_mode: bool,
                       divisor) -> tuple[Value, list[Value]] | None:
    """avg_pool(conv(x, w) + bias) as one convolution, or None: a stride-1, undilated
    convolution averaged over windows of `kernel` taps every `stride` (no padding) is
    the convolution by the average of the weights shifted by each tap, a kernel of K + k
    - 1 taps, at the pool's stride (the bias passes through an average). Taken where it
    multiplies less, prod(K + k - 1) < prod(stride * K) (a 3 x 3 convolution under a 2 x
    2 pool: 16 taps at a quarter of the positions against 9 at all of them), the pool
    takes at most POOLED_MAX_TAPS taps, and nothing reads the convolution's output
    yet (suite level2/018, nn.Conv2d then nn.AvgPool2d(2)). Returns the pooled value
    and the values it skips (v, and the convolution below its bias), for the caller's
    GraphBuilder.tentatively: a reader made later (the convolution returned too) puts
    the plain pool back."""
    c, bias = v, None
    if v.node is not None and v.node.op == "ew" and v.node.attrs["fn"] == "add":
        c, t = v.node.inputs
        bias = _unexpanded(t)
        if (bias.kind == "scalar" or len(bias.shape) != len(v.shape)
                or any(n != 1 for n in bias.shape[2:]) or bias.dtype != "f32"):
            return None
    call = _LOWERED.get(c)
    readers = [n for n in b.graph.nodes for u in n.inputs if u is c or u is v]
    if call is None or len(readers) != (1 if bias is not None else 0):
        return None
    x, w, cstride, cpad, cdil, groups = call
    taps = list(w.shape[2:])
    if set(cstride) != {1} or set(cdil) != {1} or any(padding):
        return None
    if math.prod(kernel) > POOLED_MAX_TAPS or math.prod(
            t + k - 1 for t, k in zip(taps, kernel)) >= math.prod(stride) * math.prod(taps):
        return None
    if ceil_mode and any((o - k) % s for o, k, s in zip(c.shape[2:], kernel, stride)):
        return None  # (a last window past the end: PyTorch's ceil_mode rules)
    combined = None
    for shift in itertools.product(*(range(k) for k in kernel)):
        part = b.pad(w, [(0, 0), (0, 0)] + [(o, k - 1 - o) for o, k in zip(shift, kernel)])
        combined = part if combined is None else binary(b, "add", combined, part)
    # stored once (a small kernel), not computed in the product's loader for every tile
    combined = b.materialize(binary(b, "mul", combined, 1.0 / (divisor or math.prod(kernel))))
    out = convolution(b, x, combined, None, stride, cpad, cdil, False, [0] * len(taps),
                      groups)
    return (out, [v]) if bias is None else (binary(b, "add", out, bias), [v, c])


@register("aten.im2col.default")
def im2col(b: GraphBuilder, x: Value, kernel_size, dilation, padding, stride):
    """F.unfold: x [N, C, H, W] (or [C, H, W]) to [N, C * kh * kw, L], the window view."""
    cols = b.window(x, per_dim(kernel_size, 2, "kernel_size"), per_dim(stride, 2, "stride"),
                    per_dim(padding, 2, "padding"), per_dim(dilation, 2, "dilation"))
    lead = x.shape[:-3]
    c, kh, kw, oh, ow = cols.shape[-5:]
    return b.reshape(cols, (*lead, c * kh * kw, oh * ow))
