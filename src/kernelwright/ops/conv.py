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
  A transposed convolution is the same product in gather form: the input read with
  `spacing` = stride (zeros between its elements), taps flipped, channels swapped;
  no scatter, no atomics, but 1 - 1/prod(stride) of its taps are zeros.
* the direct kernel (`conv` primitive, kernels/conv.wgsl, conv_transpose.wgsl) for
  the rest: depthwise and other convolutions with few channels per group.

F.conv*d's string padding ('same') arrives already lowered to an explicit pad by
torch.export. F.unfold (aten.im2col) is the same window view, reshaped.
"""

from __future__ import annotations

import math

from ..ir import CompileError, GraphBuilder, Value
from ..templates import MAX_GRID
from . import register
from .elementwise import binary
from .linalg import product

# When the implicit GEMM replaces the direct kernel (not yet measured on the GPU;
# knobs for the lead's crossover measurement). The matmul template spends a tile's
# work on every (output channel, output position) pair of a group, the smallest tile
# being 16 output channels by 64 positions deep 16 (templates.matmul_tiles): with
# fewer output channels per group than GEMM_MIN_COUT, or a reduction shallower than
# GEMM_MIN_K (input channels per group times kernel volume), most of that tile is
# padding, and the direct kernel (one output per invocation, no staging) wins:
# depthwise convolutions (1 or 2 output channels per group) and tiny channel counts.
GEMM_MIN_COUT = 4
GEMM_MIN_K = 8
# A transposed convolution as a GEMM multiplies prod(stride) - 1 zero taps for each
# real one; the direct transposed kernel visits only the real taps. Up to this
# factor the GEMM's tiling is expected to win (to be measured: the direct kernel ran
# at 2.4 TFLOP/s, the matmul template at ~20).
GEMM_MAX_TRANSPOSED_WASTE = 4


def implicit_gemm(n: int, cin: int, cout: int, kernel, stride, groups: int,
                  transposed: bool) -> bool:
    """The one decision between the implicit GEMM and the direct kernel (see above)."""
    cg, cog = cin // groups, cout // groups
    if cog < GEMM_MIN_COUT or cg * math.prod(kernel) < GEMM_MIN_K or n * groups > MAX_GRID:
        return False
    return not transposed or math.prod(stride) <= GEMM_MAX_TRANSPOSED_WASTE


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
    y = multiply(b, a, b.reshape(cols, (n, groups, depth, math.prod(out))))
    return b.reshape(y, (n, co, *out))


def conv_transpose_gemm(b: GraphBuilder, x: Value, w: Value, stride, padding, dilation,
                        output_padding, groups: int, multiply=product) -> Value:
    """A transposed convolution of x [N, C, *S] by w [C, CO / groups, *K] as an implicit
    GEMM in gather form: out[o] sums x[i] w[k] over o = i * stride - padding + k * dilation,
    i.e. over the flipped taps k' = K - 1 - k of the input spaced by `stride`, padded by
    dilation * (K - 1) - padding, at stride 1."""
    nd = len(x.shape) - 2
    n, c, *size = x.shape
    cog, kernel = w.shape[1], list(w.shape[2:])
    out = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, s, p, d, k, op in
           zip(size, stride, padding, dilation, kernel, output_padding)]
    cols = b.window(x, kernel, [1] * nd, [d * (k - 1) - p for d, k, p in
                                           zip(dilation, kernel, padding)],
                    dilation, spacing=stride, out=out)  # [N, C, *K, *O]
    cg = c // groups
    wg = b.flip(b.reshape(w, (groups, cg, cog, *kernel)), range(3, 3 + nd))
    wg = b.permute(wg, [0, 2, 1, *range(3, 3 + nd)])  # [G, CO/G, C/G, *K]
    depth = cg * math.prod(kernel)
    y = multiply(b, b.reshape(wg, (groups, cog, depth)),
                 b.reshape(cols, (n, groups, depth, math.prod(out))))
    return b.reshape(y, (n, cog * groups, *out))


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

    def gemm(gb: GraphBuilder, multiply=product) -> Value:
        if transposed:
            return conv_transpose_gemm(gb, x, w, stride, padding, dilation, output_padding,
                                       groups, multiply)
        return conv_gemm(gb, x, w, stride, padding, dilation, groups, multiply)

    if implicit_gemm(x.shape[0], x.shape[1], cout, w.shape[2:], stride, groups, transposed):
        out = gemm(b)
        # the other lowering, for rewrites (optimize/rewrite.py), when the product is one
        # matmul (not split-K, not a small-K sum: those are not one kernel)
        mark_lowering(out, "matmul", "implicit_gemm", {"direct": direct})
    else:
        out = direct(b)
        mark_lowering(out, "conv", "direct", {
            "implicit_gemm": lambda gb: gemm(gb, lambda g, p, q: g.matmul(p, q))})
    if bias is not None:
        out = binary(b, "add", out, b.reshape(bias, (1, -1) + (1,) * nd))
    return out


@register("aten.im2col.default")
def im2col(b: GraphBuilder, x: Value, kernel_size, dilation, padding, stride):
    """F.unfold: x [N, C, H, W] (or [C, H, W]) to [N, C * kh * kw, L], the window view."""
    cols = b.window(x, per_dim(kernel_size, 2, "kernel_size"), per_dim(stride, 2, "stride"),
                    per_dim(padding, 2, "padding"), per_dim(dilation, 2, "dilation"))
    lead = x.shape[:-3]
    c, kh, kw, oh, ow = cols.shape[-5:]
    return b.reshape(cols, (*lead, c * kh * kw, oh * ow))
