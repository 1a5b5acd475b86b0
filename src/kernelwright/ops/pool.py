"""Pooling: max (with its indices), average and adaptive pooling in 1, 2 and 3 dims,
onto the `pool` primitive (kernels/pool.wgsl).

The names are those torch.export + run_decompositions produces: F.max_pool1d,
F.avg_pool1d and the 1-d adaptive pools arrive as their 2-d ops over an unsqueezed
input (kernel 1 on the added dim), and adaptive average pooling to size 1 arrives as
aten.mean. The indices of the max pools (int64, as i32 on the device) are a second
`pool` node ('argmax'), which dead-code removal drops when nothing reads it.

Max unpooling (nn.MaxUnpool1d/2d/3d; 1-d arrives as 2-d) writes each input element at
the flat position its index names within its own plane: a scatter. When the indices are
those of a max pool whose windows tile its input without overlap (stride = kernel, no
padding, no dilation) and the output plane is that input's, each index lies in its own
window, so every output element reads just its window's index and value: one elementwise
kernel (`_unpool_windows`). Other indices take the gather-form of ops/movement.py
(every output element searches its plane's indices: planes * J * K comparisons, 33 ms
against PyTorch's 1.9 ms for level1/115 on the H200).
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
    kernel = _tiling_pool_kernel(indices, tuple(output_size))
    if kernel is not None:
        return _unpool_windows(b, x, as_dtype(b, indices, "i32"), kernel, tuple(output_size))
    planes, k, j = math.prod(lead), math.prod(x.shape[len(lead):]), math.prod(output_size)
    zeros = b.expand(b.scalar(0.0 if x.dtype == "f32" else 0, x.dtype), (planes, j, 1))
    y = scatter_rows(b, zeros, b.reshape(as_dtype(b, indices, "i32"), (planes, k)),
                     b.reshape(x, (planes, k, 1)))
    return b.reshape(y, (*lead, *output_size))


def _tiling_pool_kernel(indices: Value, output_size: tuple) -> list[int] | None:
    """The window of the max pool that computed `indices` (through reshapes and casts), in
    the dims of `output_size`, when its windows tile its input without overlap (stride =
    kernel, no padding, dilation 1, not adaptive) and that input's plane is the output
    plane: the same dims but for unit ones (MaxUnpool1d pools [1, L] and unpools [L, 1]);
    else None."""
    v = indices
    while v.node is not None and (v.node.op == "reshape" or (
            v.node.op == "ew" and v.node.attrs.get("fn") == "cast")):
        v = v.node.inputs[0]
    node = v.node
    if node is None or node.op != "pool" or node.attrs.get("op") != "argmax" \
            or node.attrs.get("adaptive"):
        return None
    a = node.attrs
    if a["stride"] != a["kernel"] or any(a["padding"]) or any(d != 1 for d in a["dilation"]):
        return None
    n = len(a["kernel"])  # the pool node's dims: [L, D, H, W], unit ones in front
    plane, pooled = node.inputs[0].shape[-n:], node.out.shape[-n:]
    kernel = {i: k for i, (s, k) in enumerate(zip(plane, a["kernel"])) if s != 1}
    dims = [d for d, s in enumerate(output_size) if s != 1]
    if [plane[i] for i in kernel] != [output_size[d] for d in dims] \
            or [indices.shape[len(indices.shape) - len(output_size) + d] for d in dims] \
            != [pooled[i] for i in kernel] or any(
                indices.shape[len(indices.shape) - len(output_size) + d] != 1
                for d, s in enumerate(output_size) if s == 1):
        return None
    window = [1] * len(output_size)
    for d, k in zip(dims, kernel.values()):
        window[d] = k
    return window


def _unpool_windows(b: GraphBuilder, x: Value, indices: Value, kernel: list[int],
                    output_size: tuple) -> Value:
    """Max unpooling where window w of the pooled dims covers [w k, w k + k) of the output
    plane in each dim and its index lies inside it: output element p (at offset a in
    window w) is x[w] where indices[w] = p, else 0. Computed over the windows' grid
    [*lead, w1, a1, w2, a2, ...] (each pooled dim split into window and offset), then cut
    (ceil mode: the last windows reach past the plane) or padded with zeros (floor mode:
    rows past the last window are never written) to output_size."""
    nd = len(output_size)
    lead, pooled = x.shape[:len(x.shape) - nd], x.shape[len(x.shape) - nd:]
    split = tuple(s for o, k in zip(pooled, kernel) for s in (o, k))
    grid = (*lead, *split)
    unit = tuple(s for o in pooled for s in (o, 1))
    pos = None  # the flat position in the output plane of each grid element
    for d in range(nd):
        w, a = len(lead) + 2 * d, len(lead) + 2 * d + 1
        coord = b.ew("add", b.iota(grid, w, step=kernel[d]), b.iota(grid, a))
        pos = coord if pos is None else b.ew("add", b.ew("mul", pos, b.scalar(
            output_size[d], "i32")), coord)
    hit = b.ew("eq", b.expand(b.reshape(indices, (*lead, *unit)), grid), pos, dtype="bool")
    zero = b.scalar(0.0 if x.dtype == "f32" else 0, x.dtype)
    y = b.ew("where", hit, b.expand(b.reshape(x, (*lead, *unit)), grid), zero)
    y = b.reshape(y, (*lead, *(o * k for o, k in zip(pooled, kernel))))
    return b.pad(y, [(0, 0)] * len(lead) + [(0, want - o * k) for o, k, want in
                                            zip(pooled, kernel, output_size)])


@register("aten.max_unpool2d.default")
def max_unpool2d(b, x, indices, output_size):
    return _max_unpool(b, x, indices, per_dim(output_size, 2, "output_size"))


@register("aten.max_unpool3d.default")
def max_unpool3d(b, x, indices, output_size, stride=None, padding=None):
    return _max_unpool(b, x, indices, per_dim(output_size, 3, "output_size"))
