"""Pooling: max (with its indices), average and adaptive pooling in 1, 2 and 3 dims,
onto the `pool` primitive (kernels/pool.wgsl), except adaptive pooling with long
windows.

Adaptive pooling whose windows along the last pooled dim take at least
ADAPTIVE_REDUCE_TAPS (64) taps (`adaptive`: the one rule, and why) is a `reduce` over a
view of its windows (`_adaptive_reduce`): out[..., o] reduces x[..., start_o + t] over
the taps t of the widest window, start_o = floor(o I / O) computed from iotas and read
through a `gather` that the reduce kernel's loader computes inline (a plain reshape
where O divides I), the taps past a window's end masked to the identity (-inf for max,
0 for the sum of avg, which then divides by the window's size). Every pooled dim is
windowed so, the others' windows short or long. The indices are the argmax over the
taps of an i32 key ordering them as PyTorch's pool (the first maximum, a NaN above
everything, the last NaN), turned back into the flat index within the pooled dims.
AdaptiveMaxPool1d(12) of 64 x 512 x 8191 (suite level1/081) is one reduce kernel.

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
kernel (`_unpool_windows`). Other indices take the gather-form of lower/movement.py
(every output element searches its plane's indices: planes * J * K comparisons, 33 ms
against PyTorch's 1.9 ms for level1/115 on the H200).
"""

from __future__ import annotations

import math

from ..ir.ir import CompileError, GraphBuilder, Value
from .conv import per_dim, pooled_convolution
from .elementwise import as_dtype
from .movement import scatter_rows
from .registry import register


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
    def plain() -> Value:
        return b.pool(x, "avg", k, s, p, d, ceil_mode, count_include_pad, divisor_override)

    pooled = pooled_convolution(b, x, k, s, p, ceil_mode, divisor_override)
    if pooled is None:
        return plain()
    return b.tentatively(*pooled, plain)  # a convolution's average: one convolution


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


# The lowering of adaptive pooling, one rule: windows of at least ADAPTIVE_REDUCE_TAPS
# taps along the last pooled dim make it a row reduction over a view of the windows
# (`_adaptive_reduce`), shorter ones keep the pool kernel. The pool kernel walks one
# output's window per invocation: neighbouring invocations read addresses a window
# apart (uncoalesced) and a long window is a long serial loop in few invocations
# (level1/081, AdaptiveMaxPool1d(12) of 64 x 512 x 8191: 1.98 ms on the H200, PyTorch
# 1.42, the bandwidth 0.25). The reduction gives each window's taps to neighbouring
# invocations of its row, which read neighbouring addresses. Short windows are where
# the pool kernel is fast (3 x 3 pools run at ~88% of the bandwidth, OPT outputs per
# invocation sharing their columns), and a row kernel's rows of a few taps would leave
# most of its lanes idle.
ADAPTIVE_REDUCE_TAPS = 64


def _widest(i: int, n: int) -> int:
    """The most taps of the windows of adaptive pooling of I to N: window o pools
    [floor(o I / N), ceil((o + 1) I / N))."""
    return max(-(-(o + 1) * i // n) - o * i // n for o in range(n))


def adaptive(b: GraphBuilder, x: Value, op: str, size) -> Value:
    """Adaptive pooling ('max', 'argmax' or 'avg') of the last len(size) dims of x to
    `size`: the reduction over the windows where they are long along the last dim (the
    rule above), else the `pool` node."""
    nd = len(size)
    pooled = x.shape[len(x.shape) - nd:]
    if (x.dtype == "f32" and 1 <= nd <= len(x.shape) and min(size) >= 1 and min(pooled) >= 1
            and _widest(pooled[-1], size[-1]) >= ADAPTIVE_REDUCE_TAPS
            # the window bounds' (o + 1) I + O - 1 fit in i32, and for argmax the keys
            # of NaN taps (0x7f800001 + the tap's number)
            and max((i + 1) * n for i, n in zip(pooled, size)) < 2 ** 31
            and (op != "argmax" or math.prod(_widest(i, n) for i, n in zip(pooled, size))
                 < 1 << 23)):
        return _adaptive_reduce(b, x, op, list(size))
    return b.adaptive_pool(x, op, size)


def _start(b: GraphBuilder, o: Value, i: int, n: int) -> Value:
    """floor(o I / N) of the i32 window number o (o I >= 0: the division truncates)."""
    return b.ew("div", b.ew("mul", o, b.scalar(i, "i32")), b.scalar(n, "i32"))


def _end(b: GraphBuilder, o: Value, i: int, n: int) -> Value:
    """ceil((o + 1) I / N) = ((o + 1) I + N - 1) / N, the end of window o."""
    after = b.ew("mul", b.ew("add", o, b.scalar(1, "i32")), b.scalar(i, "i32"))
    return b.ew("div", b.ew("add", after, b.scalar(n - 1, "i32")), b.scalar(n, "i32"))


def _adaptive_reduce(b: GraphBuilder, x: Value, op: str, size: list[int]) -> Value:
    """Adaptive pooling as a reduction over the view v[*lead, O1, L1, ..., On, Ln] of
    the windows: per pooled dim of size I to O, v[.., o, t, ..] = x[.., start_o + t, ..]
    with start_o = floor(o I / O), t < L the widest window's length. Where O divides I
    that is a reshape (every window takes L = I / O taps); else the index start_o + t
    is integer arithmetic on iotas read by a `gather`, computed inline in the reduce
    kernel's loader, and the taps t >= len_o (len_o = ceil((o + 1) I / O) - start_o)
    are masked to the reduction's identity: -inf for max, 0 for the sum of avg (then
    divided by the window's size). The reduction's rows are the outputs, its elements
    the taps in window order (the last dim's fastest: contiguous in x).

    argmax (the max pool's indices: the flat index within the pooled dims, as PyTorch)
    is the argmax over the taps of an i32 key that orders them as PyTorch's adaptive
    max pool does (a tap wins when it is greater than the max so far or NaN): f32
    values by their bits made monotone (-0 and +0 equal), every NaN above them all and
    a later NaN above an earlier one, masked taps below everything; the argmax keeps
    the first of equal keys (the first maximum). The tap's number then gives
    start_o + t per dim."""
    nd = len(size)
    lead = x.shape[:len(x.shape) - nd]
    pooled = x.shape[len(x.shape) - nd:]
    k = len(lead)
    v, mask, taps = x, None, []
    for d, (i, n) in enumerate(zip(pooled, size)):
        pos = k + 2 * d  # dim d of x in v; the dims before it are windowed already
        before, after = v.shape[:pos], v.shape[pos + 1:]
        if i % n == 0:
            length = i // n
            v = b.reshape(v, (*before, n, length, *after))
        else:
            length = _widest(i, n)
            o, t = b.iota((n, length), 0), b.iota((n, length), 1)
            start = _start(b, o, i, n)
            # v [A, I, B] seen as [A, O, I, B] (an expand), gathered along I: the
            # index [A, O, L, B] is an expand of start_o + t [O, L]
            a, rest = math.prod(before), math.prod(after)
            rows = b.expand(b.reshape(v, (a, 1, i, rest)), (a, n, i, rest))
            index = b.expand(b.reshape(b.ew("add", start, t), (1, n, length, 1)),
                             (a, n, length, rest))
            v = b.reshape(b.gather(rows, 2, index), (*before, n, length, *after))
            inside = b.ew("lt", b.ew("add", start, t), _end(b, o, i, n), dtype="bool")
            unit = [1] * (k + 2 * nd)
            unit[pos], unit[pos + 1] = n, length
            inside = b.reshape(inside, unit)
            mask = inside if mask is None else b.ew("and", mask, inside)
        taps.append(length)
    dims = [k + 2 * d + 1 for d in range(nd)]
    if mask is not None:
        mask = b.expand(mask, v.shape)
    if op == "max":
        if mask is not None:
            v = b.ew("where", mask, v, b.scalar(float("-inf"), "f32"))
        return b.reduce(v, "max", dims)
    if op == "avg":
        if mask is not None:
            v = b.ew("where", mask, v, b.scalar(0.0, "f32"))
        total = b.reduce(v, "sum", dims)
        count = None  # each window's number of taps, from iotas over the output
        for d, (i, n) in enumerate(zip(pooled, size)):
            if i % n == 0:
                c = b.scalar(i // n, "i32")
            else:
                o = b.iota((*lead, *size), k + d)
                c = b.ew("sub", _end(b, o, i, n), _start(b, o, i, n))
            count = c if count is None else b.ew("mul", count, c)
        return b.ew("div", total, b.cast(b.expand(count, total.shape), "f32"))
    if op != "argmax":
        raise CompileError(f"adaptive pooling '{op}'")
    bits = b.ew("bitcast", v, dtype="i32")
    key = b.ew("where", b.ew("lt", bits, b.scalar(0, "i32"), dtype="bool"),
               b.ew("bitxor", bits, b.scalar(0x7FFFFFFF, "i32")), bits)  # monotone
    key = b.ew("where", b.ew("eq", v, b.scalar(0.0, "f32"), dtype="bool"),
               b.scalar(0, "i32"), key)
    tap = b.scalar(0, "i32")  # the tap's number in window order
    for d, length in enumerate(taps):
        if length > 1:  # (a 1-d pool arrives as 2-d with windows of 1 tap along H)
            t = b.iota(v.shape, k + 2 * d + 1)
            tap = b.ew("add", b.ew("mul", tap, b.scalar(length, "i32")), t) \
                if tap.kind != "scalar" else t
    nan_key = b.ew("add", tap, b.scalar(0x7F800001, "i32"))  # above +inf's 0x7f800000
    key = b.ew("where", b.ew("isnan", v, dtype="bool"), nan_key, key)
    if mask is not None:
        key = b.ew("where", mask, key, b.scalar(-2 ** 31, "i32"))
    best = b.reduce(key, "argmax", dims)
    index, below = None, math.prod(taps)
    for d, (i, n) in enumerate(zip(pooled, size)):
        below //= taps[d]
        at = _start(b, b.iota((*lead, *size), k + d), i, n)
        if taps[d] > 1:
            t = b.ew("div", best, b.scalar(below, "i32")) if below > 1 else best
            if below * taps[d] < math.prod(taps):  # t mod L (t >= 0: "div" truncates)
                t = b.ew("sub", t, b.ew("mul", b.ew("div", t, b.scalar(taps[d], "i32")),
                                        b.scalar(taps[d], "i32")))
            at = b.ew("add", at, t)
        index = at if index is None else b.ew("add", b.ew("mul", index, b.scalar(i, "i32")), at)
    return index


@register("aten._adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(b, x, output_size):
    return adaptive(b, x, "avg", per_dim(output_size, 2, "output_size"))


@register("aten._adaptive_avg_pool3d.default")
def adaptive_avg_pool3d(b, x, output_size):
    return adaptive(b, x, "avg", per_dim(output_size, 3, "output_size"))


@register("aten.adaptive_max_pool2d.default")
def adaptive_max_pool2d(b, x, output_size):
    size = per_dim(output_size, 2, "output_size")
    return adaptive(b, x, "max", size), adaptive(b, x, "argmax", size)


@register("aten.adaptive_max_pool3d.default")
def adaptive_max_pool3d(b, x, output_size):
    size = per_dim(output_size, 3, "output_size")
    return adaptive(b, x, "max", size), adaptive(b, x, "argmax", size)


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
