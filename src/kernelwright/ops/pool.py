"""Pooling: max (with its indices), average and adaptive pooling in 1, 2 and 3 dims,
onto the `pool` primitive (kernels/pool.wgsl).

The names are those torch.export + run_decompositions produces: F.max_pool1d,
F.avg_pool1d and the 1-d adaptive pools arrive as their 2-d ops over an unsqueezed
input (kernel 1 on the added dim), and adaptive average pooling to size 1 arrives as
aten.mean. The indices of the max pools (int64, as i32 on the device) are a second
`pool` node ('argmax'), which dead-code removal drops when nothing reads it.

Max unpooling (nn.MaxUnpool1d/2d/3d; 1-d arrives as 2-d) writes each input element at
the flat position its index names within its own plane: a scatter, lowered in the
gather-form of ops/movement.py (every output element searches its plane's indices).
"""

from __future__ import annotations

import math

from ..ir import CompileError, GraphBuilder, Value
from . import register
from .conv import per_dim
from .elementwise import as_dtype
from .movement import scatter_rows


def _args(nd: int, kernel_size, stride, padding, dilation=1):
    k = per_dim(kernel_size, nd, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) \
        else per_dim(stride, nd, "stride")
    return k, s, per_dim(padding, nd, "padding"), per_dim(dilation, nd, "dilation")


def _max_pool(b: GraphBuilder, nd: int, x: Value, kernel_size, stride, padding, dilation,
              ceil_mode):
    k, s, p, d = _args(nd, kernel_size, stride, padding, dilation)
    return (b.pool(x, "max", k, s, p, d, ceil_mode), b.pool(x, "argmax", k, s, p, d, ceil_mode))


@register("aten.max_pool2d_with_indices.default")
def max_pool2d_with_indices(b, x, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False):
    return _max_pool(b, 2, x, kernel_size, stride, padding, dilation, ceil_mode)


@register("aten.max_pool3d_with_indices.default")
def max_pool3d_with_indices(b, x, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False):
    return _max_pool(b, 3, x, kernel_size, stride, padding, dilation, ceil_mode)


@register("aten.max_pool2d.default")
def max_pool2d(b, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    return _max_pool(b, 2, x, kernel_size, stride, padding, dilation, ceil_mode)[0]


def _avg_pool(b, nd, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    k, s, p, d = _args(nd, kernel_size, stride, padding)
    return b.pool(x, "avg", k, s, p, d, ceil_mode, count_include_pad, divisor_override)


@register("aten.avg_pool2d.default")
def avg_pool2d(b, x, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_pool(b, 2, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@register("aten.avg_pool3d.default")
def avg_pool3d(b, x, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_pool(b, 3, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@register("aten._adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(b, x, output_size):
    return b.adaptive_pool(x, "avg", per_dim(output_size, 2, "output_size"))


@register("aten._adaptive_avg_pool3d.default")
def adaptive_avg_pool3d(b, x, output_size):
    return b.adaptive_pool(x, "avg", per_dim(output_size, 3, "output_size"))


@register("aten.adaptive_max_pool2d.default")
def adaptive_max_pool2d(b, x, output_size):
    size = per_dim(output_size, 2, "output_size")
    return b.adaptive_pool(x, "max", size), b.adaptive_pool(x, "argmax", size)


@register("aten.adaptive_max_pool3d.default")
def adaptive_max_pool3d(b, x, output_size):
    size = per_dim(output_size, 3, "output_size")
    return b.adaptive_pool(x, "max", size), b.adaptive_pool(x, "argmax", size)


def _max_unpool(b: GraphBuilder, x: Value, indices: Value, output_size) -> Value:
    """Zeros with out_plane[indices[..., k]] = x_plane[k] in each plane (the leading dims),
    the spatial dims flattened: PyTorch's MaxUnpool, whose indices are flat positions in
    the output plane (as max pooling returns them)."""
    nd = len(output_size)
    if indices.shape != x.shape or len(x.shape) < nd + 1:
        raise CompileError(f"max_unpool of {list(x.shape)} with indices {list(indices.shape)}")
    lead = x.shape[:len(x.shape) - nd]
    planes, k, j = math.prod(lead), math.prod(x.shape[len(lead):]), math.prod(output_size)
    zeros = b.expand(b.scalar(0.0 if x.dtype == "f32" else 0, x.dtype), (planes, j, 1))
    y = scatter_rows(b, zeros, b.reshape(as_dtype(b, indices, "i32"), (planes, k)),
                     b.reshape(x, (planes, k, 1)))
    return b.reshape(y, (*lead, *output_size))


@register("aten.max_unpool2d.default")
def max_unpool2d(b, x, indices, output_size):
    return _max_unpool(b, x, indices, per_dim(output_size, 2, "output_size"))


@register("aten.max_unpool3d.default")
def max_unpool3d(b, x, indices, output_size, stride=None, padding=None):
    return _max_unpool(b, x, indices, per_dim(output_size, 3, "output_size"))
