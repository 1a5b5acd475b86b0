"""Backward ATen ops that survive decomposition of a joint forward-backward graph
(train/step.py): each written in the forward primitives, gather-form (no atomics, so
every gradient is deterministic).

* convolution_backward (1-3 spatial dims, groups, stride, padding, dilation, plain and
  transposed): the input's gradient is the transposed convolution of the output's
  gradient by the same weights (a plain convolution for a transposed forward); the
  weight's gradient a batched product per group over the batch and the output
  positions, of the output's gradient by the input's sliding windows (the same `window`
  view the forward's implicit GEMM reads: gW[g, co, c k] = sum over n, o of
  gy[n, g, co, o] * cols[n, g, c k, o]; for a transposed forward the roles of input and
  output swap); the bias's gradient a sum over batch and positions.
* max_pool2d/3d_with_indices_backward: each input element collects the gradients of the
  windows whose recorded index names it. The windows containing input position i along
  a dim are those o with o * stride - padding + k * dilation = i; the output's gradient
  and indices are spread out by the stride (zeros between, by a pad and reshape), so
  that a stride-1 `window` view with flipped taps reads, at each input element, every
  window that may contain it; the indices are read plus one, so that the view's zeros
  (outside the output, between the spread entries) name no position.
"""

from __future__ import annotations

import math

from ..ir import CompileError, GraphBuilder, Value
from . import register
from .conv import convolution, per_dim
from .elementwise import as_dtype
from .linalg import product


@register("aten.convolution_backward.default")
def convolution_backward(b: GraphBuilder, gy: Value, x: Value, w: Value, bias_sizes, stride,
                         padding, dilation, transposed, output_padding, groups, output_mask):
    nd = len(x.shape) - 2
    if nd not in (1, 2, 3):
        raise CompileError(f"convolution_backward of a {len(x.shape)}-d input: only 1 to 3 "
                           "spatial dims are supported")
    stride, padding, dilation, output_padding = (
        per_dim(v, nd, name) for v, name in ((stride, "stride"), (padding, "padding"),
                                             (dilation, "dilation"),
                                             (output_padding, "output_padding")))
    gy = as_dtype(b, gy, "f32")
    gx = gw = gb = None
    if output_mask[0]:
        gx = _input_grad(b, gy, x, w, stride, padding, dilation, bool(transposed), groups)
    if output_mask[1]:
        if transposed:  # y = conv_transpose(x, w): gw[c, co, k] = x . windows of gy
            gw = _weight_grad(b, x, gy, w.shape, stride, padding, dilation, groups,
                              list(x.shape[2:]))
        else:
            gw = _weight_grad(b, gy, x, w.shape, stride, padding, dilation, groups, None)
    if output_mask[2]:
        gb = b.reduce(gy, "sum", [0, *range(2, 2 + nd)])
    return gx, gw, gb


def _input_grad(b: GraphBuilder, gy: Value, x: Value, w: Value, stride, padding, dilation,
                transposed: bool, groups: int) -> Value:
    """The gradient of a convolution's input: the transposed convolution of gy by w (a
    plain one for a transposed forward), cropped to x's size by its output padding."""
    nd = len(x.shape) - 2
    if transposed:
        return convolution(b, gy, w, None, stride, padding, dilation, False, [0] * nd, groups)
    kernel = w.shape[2:]
    extra = [i - ((o - 1) * s - 2 * p + d * (k - 1) + 1) for i, o, s, p, d, k in
             zip(x.shape[2:], gy.shape[2:], stride, padding, dilation, kernel)]
    return convolution(b, gy, w, None, stride, padding, dilation, True, extra, groups)


def _weight_grad(b: GraphBuilder, a: Value, x: Value, wshape, stride, padding, dilation,
                 groups: int, out) -> Value:
    """sum over n, o of a[n, g, i, o] * window(x)[n, g, j, o] per group g, reshaped to
    `wshape`: a [N, A, *O] the side read whole, x [N, C, *S] the side read through
    windows of the convolution's geometry (`out`: the windows' count per dim, else
    that of the convolution)."""
    nd = len(x.shape) - 2
    n, ca = a.shape[:2]
    kernel = list(wshape[2:])
    cols = b.window(x, kernel, stride, padding, dilation, out)  # [N, C, *K, *O]
    positions = math.prod(cols.shape[2 + nd:])
    if positions != math.prod(a.shape[2:]):
        raise CompileError(f"convolution_backward: {positions} windows for "
                           f"{math.prod(a.shape[2:])} output positions")
    depth = x.shape[1] // groups * math.prod(kernel)
    lhs = b.reshape(b.permute(b.reshape(a, (n, groups, ca // groups, positions)), [1, 2, 0, 3]),
                    (groups, ca // groups, n * positions))
    rhs = b.reshape(b.permute(b.reshape(cols, (n, groups, depth, positions)), [1, 0, 3, 2]),
                    (groups, n * positions, depth))
    return b.reshape(product(b, lhs, rhs), tuple(wshape))


def _max_pool_backward(b: GraphBuilder, nd: int, gy: Value, x: Value, kernel_size, stride,
                       padding, dilation, indices: Value) -> Value:
    kernel = per_dim(kernel_size, nd, "kernel_size")
    stride = kernel if not stride else per_dim(stride, nd, "stride")
    padding, dilation = per_dim(padding, nd, "padding"), per_dim(dilation, nd, "dilation")
    lead, size = x.shape[:len(x.shape) - nd], list(x.shape[len(x.shape) - nd:])
    g, idx = as_dtype(b, gy, "f32"), b.ew("add", as_dtype(b, indices, "i32"),
                                           b.scalar(1, "i32"))
    for j, s in enumerate(stride):  # spread by the stride: entry o at o * s
        if s == 1:
            continue
        dim = len(lead) + j

        def spread(v: Value, dim=dim, s=s) -> Value:
            shape = list(v.shape)
            v = b.pad(b.reshape(v, (*shape[:dim + 1], 1, *shape[dim + 1:])),
                      [(0, 0)] * (dim + 1) + [(0, s - 1)] + [(0, 0)] * (len(shape) - dim - 1))
            shape[dim] *= s
            return b.reshape(v, shape)
        g, idx = spread(g), spread(idx)
    # input i reads spread entry i + p - k d = i - ((K - 1) d - p) + k' d, k' = K - 1 - k
    reach = [(k - 1) * d - p for k, d, p in zip(kernel, dilation, padding)]
    gw = b.window(g, kernel, [1] * nd, reach, dilation, size)  # [*lead, *K, *S]
    iw = b.window(idx, kernel, [1] * nd, reach, dilation, size)
    full = (*lead, *kernel, *size)
    pos = None  # each input element's flat position in its plane, plus one
    for j, n in enumerate(size):
        coord = b.iota(full, len(lead) + nd + j)
        pos = coord if pos is None else b.ew("add", b.ew("mul", pos, b.scalar(n, "i32")),
                                              coord)
    pos = b.ew("add", pos, b.scalar(1, "i32"))
    hit = b.ew("eq", iw, pos, dtype="bool")
    picked = b.ew("where", hit, gw, b.scalar(0.0))
    return b.reduce(picked, "sum", list(range(len(lead), len(lead) + nd)))


@register("aten.max_pool2d_with_indices_backward.default")
def max_pool2d_with_indices_backward(b, gy, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _max_pool_backward(b, 2, gy, x, kernel_size, stride, padding, dilation, indices)


@register("aten.max_pool3d_with_indices_backward.default")
def max_pool3d_with_indices_backward(b, gy, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _max_pool_backward(b, 3, gy, x, kernel_size, stride, padding, dilation, indices)
