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
* avg_pool2d/3d_backward: the same view of the output's gradient, each window's value
  divided by its divisor (a constant per window: PyTorch's, for padding, ceil mode and
  divisor_override), summed over the taps.
* _adaptive_avg_pool2d/3d_backward: separable, one product per pooled dim by a
  constant [O, I] matrix of 1 / (window length) inside each window.
* adaptive_max_pool2d/3d_backward: where the pooled dims divide evenly, the max pool's
  gradient (kernel = stride = I / O); else each input element sums the gradients of its
  plane's windows whose index names it (movement.scatter_rows).
* replication_pad1d/2d/3d_backward: per padded dim, the borders' gradients summed into
  the first and last input entries (slices, sums and a cat).
* slice_scatter, select_scatter (the backward of slice and select, e.g. of a rotary
  embedding's halves): the source spread to the input's size along the dim (entry k at
  start + k * step, by a pad and reshape, as the pooling gradients spread theirs), then
  chosen over the input where a constant mask marks the slice's positions.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..ir.ir import CompileError, GraphBuilder, Value
from .conv import convolution, per_dim
from .elementwise import as_dtype
from .linalg import product
from .movement import scatter_rows
from .registry import register


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


def _pool_args(nd: int, kernel_size, stride, padding, dilation=1):
    kernel = per_dim(kernel_size, nd, "kernel_size")
    stride = kernel if not stride else per_dim(stride, nd, "stride")
    return kernel, stride, per_dim(padding, nd, "padding"), per_dim(dilation, nd, "dilation")


def _windows_over(b: GraphBuilder, v: Value, kernel, stride, padding, dilation,
                  size) -> Value:
    """For a pooling of geometry (kernel, stride, padding, dilation) over the last nd dims,
    sized `size`, whose outputs are v [*lead, *O]: at each input position i [*lead, *K,
    *size], the value of v at each window that tap k of which reads i (k flipped:
    window o with o * stride - padding + (K - 1 - k) * dilation = i), 0 where none does.
    v is spread by the stride first (entry o at o * stride, zeros between)."""
    nd = len(kernel)
    lead = len(v.shape) - nd
    for j, s in enumerate(stride):
        if s == 1:
            continue
        shape = list(v.shape)
        dim = lead + j
        v = b.pad(b.reshape(v, (*shape[:dim + 1], 1, *shape[dim + 1:])),
                  [(0, 0)] * (dim + 1) + [(0, s - 1)] + [(0, 0)] * (len(shape) - dim - 1))
        shape[dim] *= s
        v = b.reshape(v, shape)
    # input i reads spread entry i + p - k d = i - ((K - 1) d - p) + k' d, k' = K - 1 - k
    reach = [(k - 1) * d - p for k, d, p in zip(kernel, dilation, padding)]
    return b.window(v, kernel, [1] * nd, reach, dilation, size)


def _max_pool_backward(b: GraphBuilder, nd: int, gy: Value, x: Value, kernel_size, stride,
                       padding, dilation, indices: Value) -> Value:
    kernel, stride, padding, dilation = _pool_args(nd, kernel_size, stride, padding, dilation)
    lead, size = x.shape[:len(x.shape) - nd], list(x.shape[len(x.shape) - nd:])
    # the indices plus one: the view's zeros name no position
    idx = b.ew("add", as_dtype(b, indices, "i32"), b.scalar(1, "i32"))
    gw = _windows_over(b, as_dtype(b, gy, "f32"), kernel, stride, padding, dilation, size)
    iw = _windows_over(b, idx, kernel, stride, padding, dilation, size)
    full = (*lead, *kernel, *size)
    pos = None  # each input element's flat position in its plane, plus one
    for j, n in enumerate(size):
        coord = b.iota(full, len(lead) + nd + j)
        pos = coord if pos is None else b.ew("add", b.ew("mul", pos, b.scalar(n, "i32")),
                                              coord)
    pos = b.ew("add", pos, b.scalar(1, "i32"))
    picked = b.ew("where", b.ew("eq", iw, pos, dtype="bool"), gw, b.scalar(0.0))
    return b.reduce(picked, "sum", list(range(len(lead), len(lead) + nd)))


def _avg_pool_backward(b: GraphBuilder, nd: int, gy: Value, x: Value, kernel_size, stride,
                       padding, ceil_mode, count_include_pad, divisor_override) -> Value:
    """Each input element sums gy / divisor over the windows containing it; the divisor
    of each window (PyTorch's, padding and ceil mode included) is a constant, found by
    pooling ones on the host."""
    kernel, stride, padding, _ = _pool_args(nd, kernel_size, stride, padding)
    lead, size = x.shape[:len(x.shape) - nd], list(x.shape[len(x.shape) - nd:])
    pool = torch.nn.functional.avg_pool2d if nd == 2 else torch.nn.functional.avg_pool3d
    ones = torch.ones(1, 1, *size)
    share = pool(ones, kernel, stride, padding, ceil_mode, count_include_pad,
                 divisor_override)  # (elements counted) / divisor
    counted = pool(ones, kernel, stride, padding, ceil_mode, count_include_pad, 1)
    scale = (share / counted.clamp(min=1)).reshape(gy.shape[len(gy.shape) - nd:])
    g = b.ew("mul", as_dtype(b, gy, "f32"), b.const(scale.numpy().astype(np.float32), "f32"))
    gw = _windows_over(b, g, kernel, stride, padding, [1] * nd, size)
    return b.reduce(gw, "sum", list(range(len(lead), len(lead) + nd)))


def _adaptive_avg_pool_backward(b: GraphBuilder, nd: int, gy: Value, x: Value) -> Value:
    """Adaptive average pooling is separable: per pooled dim, output o averages
    [floor(o I / O), ceil((o + 1) I / O)); the gradient is gy times, along each dim, the
    [O, I] matrix of 1 / (window length) inside each window, a product per dim."""
    lead = len(x.shape) - nd
    g = as_dtype(b, gy, "f32")
    for j in range(nd):
        dim = lead + j
        i_size, o_size = x.shape[dim], g.shape[dim]
        m = np.zeros((o_size, i_size), np.float32)
        for o in range(o_size):
            start, end = o * i_size // o_size, -(-(o + 1) * i_size // o_size)
            m[o, start:end] = 1.0 / (end - start)
        order = [d for d in range(len(g.shape)) if d != dim] + [dim]
        moved = b.permute(g, order)
        rows = b.reshape(moved, (-1, o_size))
        out = b.reshape(product(b, rows, b.const(m, "f32")), (*moved.shape[:-1], i_size))
        g = b.permute(out, [order.index(d) for d in range(len(order))])
    return g


@register("aten.max_pool2d_with_indices_backward.default")
def max_pool2d_with_indices_backward(b, gy, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _max_pool_backward(b, 2, gy, x, kernel_size, stride, padding, dilation, indices)


@register("aten.max_pool3d_with_indices_backward.default")
def max_pool3d_with_indices_backward(b, gy, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _max_pool_backward(b, 3, gy, x, kernel_size, stride, padding, dilation, indices)


@register("aten.avg_pool2d_backward.default")
def avg_pool2d_backward(b, gy, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(b, 2, gy, x, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


@register("aten.avg_pool3d_backward.default")
def avg_pool3d_backward(b, gy, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(b, 3, gy, x, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


@register("aten._adaptive_avg_pool2d_backward.default")
def adaptive_avg_pool2d_backward(b, gy, x):
    return _adaptive_avg_pool_backward(b, 2, gy, x)


@register("aten._adaptive_avg_pool3d_backward.default")
def adaptive_avg_pool3d_backward(b, gy, x):
    return _adaptive_avg_pool_backward(b, 3, gy, x)


def _adaptive_max_pool_backward(b: GraphBuilder, nd: int, gy: Value, x: Value,
                                indices: Value) -> Value:
    """Each input element collects the gradients of the windows whose recorded index (a
    flat position in its plane) names it. Where every pooled dim divides evenly, the
    windows are a max pool's (kernel = stride = I / O) and its gradient is used; else
    each input element searches its plane's indices (`scatter_rows`, summing: O(I * O)
    comparisons per plane)."""
    lead, size = x.shape[:len(x.shape) - nd], list(x.shape[len(x.shape) - nd:])
    out = list(gy.shape[len(gy.shape) - nd:])
    if all(i % o == 0 for i, o in zip(size, out)):
        kernel = [i // o for i, o in zip(size, out)]
        return _max_pool_backward(b, nd, gy, x, kernel, kernel, 0, 1, indices)
    planes, j, k = math.prod(lead), math.prod(size), math.prod(out)
    zeros = b.expand(b.scalar(0.0), (planes, j, 1))
    g = scatter_rows(b, zeros, b.reshape(as_dtype(b, indices, "i32"), (planes, k)),
                     b.reshape(as_dtype(b, gy, "f32"), (planes, k, 1)), "sum")
    return b.reshape(g, x.shape)


@register("aten.adaptive_max_pool2d_backward.default")
def adaptive_max_pool2d_backward(b, gy, x, indices):
    return _adaptive_max_pool_backward(b, 2, gy, x, indices)


@register("aten.adaptive_max_pool3d_backward.default")
def adaptive_max_pool3d_backward(b, gy, x, indices):
    return _adaptive_max_pool_backward(b, 3, gy, x, indices)


@register("aten.replication_pad1d_backward.default", "aten.replication_pad2d_backward.default",
          "aten.replication_pad3d_backward.default")
def replication_pad_backward(b: GraphBuilder, gy: Value, x: Value, padding) -> Value:
    """Per padded dim (the last, then the one before, as `padding` lists them), the
    gradient of the first input entry sums the output's left border and it, that of the
    last entry it and the right border, the entries between pass through."""
    g = as_dtype(b, gy, "f32")
    for j in range(len(padding) // 2):
        left, right = padding[2 * j], padding[2 * j + 1]
        dim = len(x.shape) - 1 - j
        size = x.shape[dim]
        if left < 0 or right < 0:
            raise CompileError(f"replication_pad_backward of a negative padding {padding}")
        if size == 1:
            g = b.reduce(g, "sum", [dim], keepdim=True)
            continue
        parts = [b.reduce(b.slice(g, dim, 0, left + 1), "sum", [dim], keepdim=True)]
        if size > 2:
            parts.append(b.slice(g, dim, left + 1, left + size - 1))
        parts.append(b.reduce(b.slice(g, dim, left + size - 1, left + size + right), "sum",
                              [dim], keepdim=True))
        g = b.cat(parts, dim)
    return g


@register("aten.slice_scatter.default")
def slice_scatter(b: GraphBuilder, x: Value, src: Value, dim: int = 0, start=None, end=None,
                  step: int = 1) -> Value:
    """x with x[start:end:step] along `dim` replaced by src."""
    dim %= len(x.shape)
    size = x.shape[dim]
    start = 0 if start is None else start + size if start < 0 else start
    end = size if end is None else end + size if end < 0 else end
    start, end = max(0, min(size, start)), max(0, min(size, end))
    count = src.shape[dim]
    spread = as_dtype(b, src, x.dtype)
    if step > 1:  # entry k at k * step, zeros between
        shape = list(spread.shape)
        spread = b.pad(b.reshape(spread, (*shape[:dim + 1], 1, *shape[dim + 1:])),
                       [(0, 0)] * (dim + 1) + [(0, step - 1)] + [(0, 0)] * (len(shape) - dim - 1))
        shape[dim] *= step
        spread = b.reshape(spread, shape)
    pads = [(0, 0)] * len(x.shape)
    pads[dim] = (start, size - start - spread.shape[dim])  # negative: a crop
    spread = b.pad(spread, pads)
    # the positions src is written at, from the index along dim (no constant buffer)
    last = start + (min(count, len(range(start, end, step))) - 1) * step
    at = b.iota(x.shape, dim, -start)  # i - start
    chosen = b.ew("and", b.ew("ge", at, b.scalar(0), dtype="bool"),
                  b.ew("le", at, b.scalar(last - start), dtype="bool"), dtype="bool")
    if step > 1:  # every step-th position (exact in f32 below 2 ** 24)
        on = b.ew("remainder", b.cast(at, "f32"), b.scalar(float(step)))
        chosen = b.ew("and", chosen, b.ew("eq", on, b.scalar(0.0), dtype="bool"),
                      dtype="bool")
    return b.ew("where", chosen, spread, x, dtype=x.dtype)


@register("aten.select_scatter.default")
def select_scatter(b: GraphBuilder, x: Value, src: Value, dim: int, index: int) -> Value:
    """x with x.select(dim, index) replaced by src."""
    dim %= len(x.shape)
    index %= x.shape[dim]
    src = b.reshape(src, (*x.shape[:dim], 1, *x.shape[dim + 1:]))
    return slice_scatter(b, x, src, dim, index, index + 1, 1)
