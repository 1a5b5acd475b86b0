"""Pooling: max (with its indices), average and adaptive pooling in 1, 2 and 3 dims,
onto the `pool` primitive (kernels/pool.wgsl).

The names are those torch.export + run_decompositions produces: F.max_pool1d,
F.avg_pool1d and the 1-d adaptive pools arrive as their 2-d ops over an unsqueezed
input (kernel 1 on the added dim), and adaptive average pooling to size 1 arrives as
aten.mean. The indices of the max pools (int64, as i32 on the device) are a second
`pool` node ('argmax'), which dead-code removal drops when nothing reads it.
"""

from __future__ import annotations

from ..ir import GraphBuilder, Value
from . import register
from .conv import per_dim


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
