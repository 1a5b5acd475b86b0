"""Movement ATen ops: views, permutations, slices, concatenation, padding, repeat,
flip, gather.

They lower to the movement primitives, which never copy: codegen folds them into
the index arithmetic of the kernels that read them.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.ir import HOST_VALUE_MAX, CompileError, GraphBuilder, Value, broadcast_shapes
from .elementwise import as_dtype, binary, div_mode
from .linalg import product
from .registry import register


@register("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
          "aten.view_copy.default")
def view(b: GraphBuilder, x: Value, size):
    return b.reshape(x, size)


@register("aten.permute.default", "aten.permute_copy.default")
def permute(b, x, dims):
    return b.permute(x, dims)


@register("aten.transpose.int")
def transpose(b, x, d0, d1):
    return b.transpose(x, d0 % len(x.shape), d1 % len(x.shape))


@register("aten.t.default")
def t(b, x):
    return x if len(x.shape) < 2 else b.transpose(x, 0, 1)


@register("aten.expand.default", "aten.expand_copy.default")
def expand(b, x, size, implicit=False):
    return b.expand(x, size)


@register("aten.unsqueeze.default")
def unsqueeze(b, x, dim):
    dim = dim % (len(x.shape) + 1)
    return b.reshape(x, x.shape[:dim] + (1,) + x.shape[dim:])


@register("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def squeeze(b, x, dims=None):
    if dims is None:
        dims = range(len(x.shape))
    elif isinstance(dims, int):
        dims = [dims]
    drop = {d % len(x.shape) for d in dims} if x.shape else set()
    return b.reshape(x, [s for d, s in enumerate(x.shape) if not (d in drop and s == 1)])


@register("aten.flatten.using_ints")
def flatten(b, x, start_dim=0, end_dim=-1):
    r = len(x.shape)
    s, e = start_dim % r, end_dim % r
    mid = 1
    for d in range(s, e + 1):
        mid *= x.shape[d]
    return b.reshape(x, x.shape[:s] + (mid,) + x.shape[e + 1:])


@register("aten.slice.Tensor", "aten.slice_copy.Tensor")
def slice_(b, x, dim=0, start=None, end=None, step=1):
    big = 2**62
    return b.slice(x, dim, 0 if start is None else start, big if end is None else min(end, big),
                   step)


@register("aten.unfold.default")
def unfold(b: GraphBuilder, x: Value, dim: int, size: int, step: int) -> Value:
    """Tensor.unfold: the windows of `size` elements every `step` along dim, dim becoming
    the window count and a new last dim the window's elements; a view (no copy): a slice
    and reshape where step == size (patches), else the `window` primitive over dim."""
    if not x.shape:  # a 0-d tensor unfolds (size 1) into one window of itself
        return b.reshape(x, (size,))
    r = len(x.shape)
    dim %= r
    n = x.shape[dim]
    if size < 1 or step < 1 or size > n:
        raise CompileError(f"unfold of size {size}, step {step} along dim {dim} of "
                           f"{list(x.shape)}")
    count = (n - size) // step + 1
    if size == step:
        y = b.slice(x, dim, 0, count * size)
        y = b.reshape(y, x.shape[:dim] + (count, size) + x.shape[dim + 1:])
        return b.permute(y, [d for d in range(r + 1) if d != dim + 1] + [dim + 1])
    others = [d for d in range(r) if d != dim]
    w = b.window(b.permute(x, others + [dim]), [size], [step], [0], [1])  # [..., size, count]
    return b.permute(w, [r if d == dim else others.index(d) for d in range(r)] + [r - 1])


def dense_order(shape, strides) -> list[int] | None:
    """The dims of a tensor of `shape` laid out with `strides` from the outermost to the
    innermost in memory, when the layout is dense (a permutation of row-major: no gaps, no
    overlaps; the strides of unit dims do not matter), else None."""
    big = sorted((d for d, s in enumerate(shape) if s > 1), key=lambda d: -strides[d])
    step = 1
    for d in reversed(big):
        if strides[d] != step:
            return None
        step *= shape[d]
    return big + [d for d, s in enumerate(shape) if s <= 1]


def strided_view(b: GraphBuilder, flat: Value, size, stride, offset: int) -> Value:
    """out[j] = flat[offset + sum_k j_k * stride_k] for a 1-d value `flat`, as views: the
    dims (largest stride first) split off one at a time from a row of flat, a dim of
    stride t whose inner dims span e <= t elements by a reshape of the row into
    [n, t] where the row holds n * t, else (overlapping windows, e > t: a sliding window
    or unfold; or a short row) by the `window` view of e taps every t; the last dim
    a strided slice. Dims of stride 0 are expands. The addresses must lie in flat."""
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    if len(size) != len(stride) or min(stride, default=0) < 0 or min(size, default=1) < 1:
        raise CompileError(f"as_strided of sizes {size} and strides {stride}: only non-negative "
                           "strides and non-empty sizes are supported")
    keep = sorted((k for k in range(len(size)) if size[k] > 1 and stride[k] > 0),
                  key=lambda k: -stride[k])
    extent = 1 + sum((size[k] - 1) * stride[k] for k in keep)
    if offset < 0 or offset + extent > flat.numel:
        raise CompileError(f"as_strided of sizes {size}, strides {stride} and offset {offset} "
                           f"reads elements [{offset}, {offset + extent}) of a tensor of "
                           f"{flat.numel}")
    row = b.slice(flat, 0, offset, flat.numel)
    for i, k in enumerate(keep):
        n, t = size[k], stride[k]
        e = 1 + sum((size[q] - 1) * stride[q] for q in keep[i + 1:])
        lead, length = row.shape[:-1], row.shape[-1]
        if e == 1:
            row = b.slice(row, -1, 0, (n - 1) * t + 1, t)
        elif e <= t and length >= n * t:
            row = b.reshape(b.slice(row, -1, 0, n * t), lead + (n, t))
        else:
            row = b.window(row, [e], [t], [0], [1], out=[n])  # [..., e, n]
            row = b.transpose(row, -1, -2)
    if not keep:
        row = b.slice(row, 0, 0, 1)
    row = b.permute(row, [keep.index(k) for k in sorted(keep)]) if keep else row
    row = b.reshape(row, [size[k] if k in keep else 1 for k in range(len(size))])
    return b.expand(row, size)


@register("aten.as_strided.default", "aten.as_strided_copy.default")
def as_strided(b: GraphBuilder, x: Value, size, stride, storage_offset=None, *,
               layout=None) -> Value:
    """x.as_strided(size, stride, storage_offset) where it is a view of x's elements:
    `layout` (given by capture: the strides and storage offset PyTorch recorded for x)
    places them in memory, which must be dense; x flattened in that order is then read
    by `strided_view`. adaptive pooling to 1 x 1 of a channels-last tensor ends in one
    (the mean, restrided channels-last)."""
    shape = x.shape
    strides, base = layout if layout is not None else (_row_major(shape), 0)
    order = dense_order(shape, strides) if len(strides) == len(shape) else None
    if order is None:
        raise CompileError(f"as_strided(size={list(size)}, stride={list(stride)}) of a tensor "
                           f"of shape {list(shape)} laid out with strides {list(strides)}: not a "
                           "dense layout, so the storage it addresses is not the tensor's "
                           "elements; make the tensor contiguous first")
    flat = b.reshape(b.permute(x, order), (x.numel,))
    offset = base if storage_offset is None else storage_offset
    try:
        return strided_view(b, flat, size, stride, offset - base)
    except CompileError as e:
        raise CompileError(f"{e} (of shape {list(shape)}, strides {list(strides)}, storage "
                           f"offset {base})") from e


as_strided.reads_layout = True  # capture passes the input's recorded strides as `layout`


def _row_major(shape) -> list[int]:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= s
    return strides[::-1]


@register("aten.select.int", "aten.select_copy.int")
def select(b, x, dim, index):
    dim %= len(x.shape)
    index %= x.shape[dim]
    y = b.slice(x, dim, index, index + 1)
    return b.reshape(y, x.shape[:dim] + x.shape[dim + 1:])


@register("aten.narrow.default")
def narrow(b, x, dim, start, length):
    return b.slice(x, dim, start, start + length)


@register("aten.split.Tensor", "aten.split_with_sizes.default")
def split(b, x, sizes, dim=0):
    dim %= len(x.shape)
    if isinstance(sizes, int):
        n = x.shape[dim]
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)]
    out, start = [], 0
    for s in sizes:
        out.append(b.slice(x, dim, start, start + s))
        start += s
    return tuple(out)


@register("aten.unbind.int")
def unbind(b, x, dim=0):
    return tuple(select(b, x, dim, i) for i in range(x.shape[dim % len(x.shape)]))


@register("aten.chunk.default")
def chunk(b, x, chunks, dim=0):
    n = x.shape[dim % len(x.shape)]
    return split(b, x, -(-n // chunks), dim)


@register("aten.cat.default")
def cat(b, xs, dim=0):
    return b.cat(xs, dim)




@register("aten.stack.default")
def stack(b, xs, dim=0):
    dim %= len(xs[0].shape) + 1
    return b.cat([unsqueeze(b, x, dim) for x in xs], dim)


@register("aten.constant_pad_nd.default")
def constant_pad_nd(b, x, pad, value=0.0):
    # pad lists (before, after) pairs starting from the last dim.
    pads = [(0, 0)] * len(x.shape)
    for i in range(len(pad) // 2):
        pads[len(x.shape) - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return b.pad(x, pads, value)


@register("aten.repeat.default")
def repeat(b, x, repeats):
    """Tile x: each dim of size s repeated r times is a broadcast [r, s] flattened."""
    repeats = list(repeats)
    if len(repeats) < len(x.shape):
        raise CompileError(f"repeat {repeats} has fewer dims than {list(x.shape)}")
    shape = (1,) * (len(repeats) - len(x.shape)) + tuple(x.shape)
    pairs = [d for s in shape for d in (1, s)]
    big = [d for r, s in zip(repeats, shape) for d in (r, s)]
    y = b.expand(b.reshape(x, pairs), big)
    return b.reshape(y, [r * s for r, s in zip(repeats, shape)])


@register("aten.flip.default")
def flip(b, x, dims):
    return b.flip(x, dims) if x.shape else x


@register("aten.gather.default")
def gather(b: GraphBuilder, x: Value, dim: int, index: Value, sparse_grad: bool = False):
    if not x.shape:  # a 0-d tensor: its only element, index 0
        return b.reshape(b.gather(b.reshape(x, (1,)), 0, b.reshape(index, (1,))), ())
    return b.gather(x, dim, as_dtype(b, index, "i32"))


@register("aten.index_select.default")
def index_select(b, x, dim, index):
    """x with dim `dim` replaced by the entries `index` picks: a gather whose index
    tensor is `index` broadcast along every other dim."""
    dim %= len(x.shape)
    k = index.numel
    shape = tuple(k if d == dim else s for d, s in enumerate(x.shape))
    lined = tuple(k if d == dim else 1 for d in range(len(x.shape)))
    idx = b.expand(b.reshape(as_dtype(b, index, "i32"), lined), shape)
    return b.gather(x, dim, _wrapped(b, idx, x.shape[dim]))


def _wrapped(b, idx, size):
    """Negative indices count from the end, as in PyTorch."""
    return b.ew("where", binary(b, "lt", idx, 0, out_dtype="bool"), binary(b, "add", idx, size),
                idx)


@register("aten.embedding.default")
def embedding(b, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    out = index_select(b, weight, 0, b.reshape(indices, (indices.numel,)))
    return b.reshape(out, indices.shape + weight.shape[1:])


# -- advanced indexing and scatters ----------------------------------------------------
# x[i0, :, i2] and friends: the index tensors (broadcast together to shape B) pick, per
# element of B, one position p of the indexed dims taken together, p = i0 * S2 + i2 in
# row-major order; x seen as [P, R] (indexed dims first, the sliced ones flattened into
# R) is then gathered at p. Writes (index_put, scatter, put, max_unpool, the gradients of
# indexing, embedding and nearest upsampling) are the inverse map, in gather form: each
# destination element collects its writers, in the order they are listed (no atomics:
# deterministic, duplicates exact when accumulating). `scatter_rows` picks how it finds
# them. Positions known at compile time (computed from aranges, as the index a nearest
# upsampling's gradient writes at: GraphBuilder.host_value) are planned on the host: a
# constant table lists each destination's writers, read by a gather and summed (M reads
# per destination, M the most writers of one; 4 for an upsampling by 2). A sum of rows
# (C columns, C >= SCATTER_MATMUL_MIN_COLUMNS) at run-time positions (an embedding's
# weight gradient) is a product of the transposed one-hot, computed in the matmul's
# loader, by the rows: J * K * C multiply-adds on the matmul's tiles. Anything else
# searches: each destination compares every written position with its own, one
# comparison per (destination, written element) pair.


def _no_masks(indices, what: str) -> list:
    """The index entries, refusing bool masks: x[mask]'s shape is the mask's count of
    true elements, known only at run time (torch.export gives it an unbacked size)."""
    for t in indices:
        if t is not None and t.dtype == "bool":
            raise CompileError(
                f"{what} with a boolean mask: how many elements it selects is known only at "
                "run time, and a compiled plan's shapes are static; for a fixed shape use "
                "torch.where(mask, x, other) or x.masked_fill(mask, value)")
    return list(indices)


def _positions(b: GraphBuilder, x: Value, indices, what: str):
    """For x[indices]: (xf, p, bshape, rest, front): x as [P, R] with its indexed dims
    first; p [*bshape] the flat position in those dims of each picked element (negative
    indices counted from the end, as PyTorch); rest the sizes of the sliced dims; front
    where the broadcast dims sit among them in PyTorch's result (in place of the indexed
    dims when these are adjacent, else first)."""
    idx = _no_masks(indices, what)
    if len(idx) > len(x.shape):
        raise CompileError(f"{len(idx)} indices for a {len(x.shape)}-d tensor")
    idx += [None] * (len(x.shape) - len(idx))
    tdims = [d for d, t in enumerate(idx) if t is not None]
    rest = [d for d, t in enumerate(idx) if t is None]
    if not tdims:
        raise CompileError("advanced indexing without an index tensor")
    bshape = broadcast_shapes(*(idx[d].shape for d in tdims))
    p = None
    for d in tdims:
        t = _wrapped(b, as_dtype(b, idx[d], "i32"), x.shape[d])
        p = t if p is None else binary(b, "add", binary(b, "mul", p, x.shape[d]), t)
    p = b.expand(p, bshape)
    npos = math.prod(x.shape[d] for d in tdims)
    rest_shape = tuple(x.shape[d] for d in rest)
    xf = b.reshape(b.permute(x, tdims + rest), (npos, math.prod(rest_shape)))
    front = tdims[0] if tdims == list(range(tdims[0], tdims[-1] + 1)) else 0
    return xf, p, bshape, rest_shape, front, tdims + rest


def _b_first(nb: int, nrest: int, front: int) -> list[int]:
    """The permutation of [*bshape, *rest] into PyTorch's result order."""
    return (list(range(nb, nb + front)) + list(range(nb))
            + list(range(nb + front, nb + nrest)))


@register("aten.index.Tensor", "aten._unsafe_index.Tensor")
def index_tensor(b, x, indices):
    """x[i0, :, i2, ...]: one gather of x seen as [P, R] at the flat positions p."""
    xf, p, bshape, rest, front, _ = _positions(b, x, indices, "indexing")
    nb, r = math.prod(bshape), xf.shape[1]
    g = b.gather(xf, 0, b.expand(b.reshape(p, (nb, 1)), (nb, r)))
    y = b.reshape(g, bshape + rest)
    return b.permute(y, _b_first(len(bshape), len(rest), front))


@register("aten.index_put.default", "aten._unsafe_index_put.default")
def index_put(b, x, indices, values, accumulate=False):
    """x with x[indices] = values (or += when accumulating), values broadcast to the shape
    of x[indices]. A run-time bool mask with one value is torch.where(mask, value, x)."""
    if (len(indices) == 1 and indices[0] is not None and indices[0].dtype == "bool"
            and values.numel == 1):
        mask = indices[0]
        if mask.shape != x.shape[:len(mask.shape)]:
            raise CompileError(f"mask {list(mask.shape)} does not match {list(x.shape)}")
        m = b.reshape(mask, mask.shape + (1,) * (len(x.shape) - len(mask.shape)))
        v = b.reshape(as_dtype(b, values, x.dtype), ())
        return b.ew("where", m, binary(b, "add", x, v) if accumulate else v, x)
    put = None if accumulate else _put(b, x, indices, values)
    if put is not None:
        return put
    xf, p, bshape, rest, front, order = _positions(b, x, indices, "index_put")
    nb, npos, r = math.prod(bshape), xf.shape[0], xf.shape[1]
    perm = _b_first(len(bshape), len(rest), front)
    v = b.expand(as_dtype(b, values, x.dtype), [(bshape + rest)[d] for d in perm])
    v = b.reshape(b.permute(v, [perm.index(d) for d in range(len(perm))]), (1, nb, r))
    y = scatter_rows(b, b.reshape(xf, (1, npos, r)), b.reshape(p, (1, nb)), v,
                     "sum" if accumulate else None)
    y = b.reshape(y, [x.shape[d] for d in order])
    return b.permute(y, [order.index(d) for d in range(len(order))])


def _put(b: GraphBuilder, x: Value, indices, values: Value) -> Value | None:
    """x[..., idx, ...] = values with one 1-d index tensor idx on one dim, its positions
    known only at run time (a KV cache written at the decoded tokens' positions): a put
    (GraphBuilder.put), whose kernel writes the new slices alone, over x's own buffer
    where x is a state the put updates (schedule.put_homes). None for any other form
    (several index tensors, a mask, positions known at compile time: scatter_rows)."""
    tensors = [(d, t) for d, t in enumerate(indices) if t is not None]
    if len(tensors) != 1 or len(indices) > len(x.shape):
        return None
    dim, idx = tensors[0]
    if len(idx.shape) != 1 or idx.dtype != "i32" or b.host_value(idx) is not None:
        return None
    want = tuple(idx.shape[0] if d == dim else s for d, s in enumerate(x.shape))
    if broadcast_shapes(values.shape, want) != want:
        return None
    return b.put(x, dim, idx, b.expand(as_dtype(b, values, x.dtype), want))


@register("aten.index_copy.default")
def index_copy(b: GraphBuilder, x: Value, dim: int, index: Value, source: Value) -> Value:
    """x with its slices index[k] along dim replaced by source's slices k (the last of
    duplicates wins): a put at run-time positions, else index_put's scatter."""
    if not x.shape:
        return b.reshape(as_dtype(b, source, x.dtype), ())
    dim %= len(x.shape)
    index = b.reshape(as_dtype(b, index, "i32"), (index.numel,))
    source = b.reshape(source, tuple(index.numel if d == dim else s
                                     for d, s in enumerate(x.shape)))
    return index_put(b, x, [None] * dim + [index], source)


# scatter_reduce's reductions: (reduce op, identity of the op for i32 / f32)
SCATTER_REDUCE = {"sum": ("sum", 0), "mean": ("sum", 0), "prod": ("prod", 1),
                  "amax": ("max", "-inf"), "amin": ("min", "inf")}
# the fewest columns C for which a scatter-add of run-time positions is a product
# (`_one_hot_scatter`): below, the matmul's tiles (64 columns wide) are mostly padding
SCATTER_MATMUL_MIN_COLUMNS = 16


def scatter_rows(b: GraphBuilder, x: Value, idx: Value, v: Value, reduce: str | None = None,
                 include_self: bool = True) -> Value:
    """x [N, J, C] with row n's element idx[n, k] (a position in [0, J); others write
    nothing) set to v[n, k, :]. Without `reduce` the last writer wins (PyTorch leaves
    duplicates undefined); with one (a key of SCATTER_REDUCE, "sum" for index_put's
    accumulate) the writers' values are reduced in the order of k, with x's own value
    unless not include_self, so duplicates are exact and the result deterministic.
    Three formulations, by what is known of idx (the section's comment): planned on the
    host (`_planned_scatter`), a one-hot product (`_one_hot_scatter`), or a search."""
    if reduce is not None and reduce not in SCATTER_REDUCE:
        raise CompileError(f"scatter reduction '{reduce}' is not one of {list(SCATTER_REDUCE)}")
    known = b.host_value(idx)
    if known is not None:
        planned = _planned_scatter(b, x, known, v, reduce, include_self)
        if planned is not None:
            return planned
    if (reduce == "sum" and include_self and x.dtype == "f32" and v.dtype == "f32"
            and x.shape[2] >= SCATTER_MATMUL_MIN_COLUMNS):
        return _one_hot_scatter(b, x, idx, v)
    return _searched_scatter(b, x, idx, v, reduce, include_self)


def _reduce_dtype(v: Value, op: str) -> tuple[str, float | int]:
    """The dtype a scatter's reduction `op` runs in for values v, and op's identity."""
    dt = "i32" if v.dtype == "bool" else v.dtype
    identity = dict(SCATTER_REDUCE.values())[op]
    if isinstance(identity, str):  # the max's / min's identity: the dtype's extreme
        identity = float(identity) if dt == "f32" else (-2**31 if op == "max" else 2**31 - 1)
    return dt, identity


def _combined(b: GraphBuilder, x: Value, total: Value, count: Value, reduce: str,
              include_self: bool, dt: str) -> Value:
    """The scattered result from the writers' reduction `total` [N, J, C] and their
    count per destination `count` [N, J, 1] (i32): x's own value combined in unless not
    include_self (then x where nothing writes), a mean divided by the count."""
    op = SCATTER_REDUCE[reduce][0]
    if include_self:
        fn = {"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum"}[op]
        total = binary(b, fn, as_dtype(b, x, dt), total)
    if reduce == "mean":
        denom = binary(b, "add", count, 1) if include_self else binary(b, "maximum", count, 1)
        total = div_mode(b, total, denom, None if dt == "f32" else "floor")
    if not include_self:
        total = b.ew("where", binary(b, "gt", count, 0, out_dtype="bool"), total,
                     as_dtype(b, x, dt))
    return as_dtype(b, total, x.dtype)


def _planned_scatter(b: GraphBuilder, x: Value, known: np.ndarray, v: Value,
                     reduce: str | None, include_self: bool) -> Value | None:
    """scatter_rows with idx known on the host (`known` [N, K]): each destination's
    writers listed in a constant table [N, J, M] (M the most writers of one
    destination), so that it reads its M writers, a gather of v, instead of searching
    all K: N * J * M * C reads, M = 4 for the gradient of a nearest upsampling by 2.
    Without `reduce` a constant names each destination's last writer. None when the
    table would hold more than HOST_VALUE_MAX entries."""
    n, j, c = x.shape
    k = known.shape[1]
    rows = np.broadcast_to(np.arange(n)[:, None], known.shape)
    ok = (known >= 0) & (known < j)
    dest = rows[ok].astype(np.int64) * j + known[ok]  # flat (n, j) of each write
    writer = np.broadcast_to(np.arange(k)[None, :], known.shape)[ok]
    count = np.bincount(dest, minlength=n * j)
    m = int(count.max()) if dest.size else 0
    if m == 0:
        return x
    if n * j * m > HOST_VALUE_MAX:
        return None
    if reduce is None:
        last = np.full(n * j, -1, np.int64)
        np.maximum.at(last, dest, writer)
        last = last.reshape(n, j, 1)
        first = b.expand(b.const(np.maximum(last, 0).astype(np.int32), "i32"), (n, j, c))
        written = b.const(last >= 0, "bool")
        return b.ew("where", written, b.gather(as_dtype(b, v, x.dtype), 1, first), x)
    op = SCATTER_REDUCE[reduce][0]
    dt, identity = _reduce_dtype(v, op)
    order = np.argsort(dest, kind="stable")  # by destination, each one's writers by k
    dest, writer = dest[order], writer[order]
    starts = np.cumsum(count) - count
    table = np.full((n * j, m), k, np.int32)  # k: the pad entry, the op's identity
    table[dest, np.arange(dest.size) - starts[dest]] = writer
    vt = b.pad(b.permute(as_dtype(b, v, dt), (0, 2, 1)), [(0, 0), (0, 0), (0, 1)],
               identity)  # [N, C, K + 1]
    at = b.expand(b.const(table.reshape(n, 1, j * m), "i32"), (n, c, j * m))
    picked = b.reshape(b.gather(vt, 2, at), (n, c, j, m))
    total = b.reshape(picked, (n, c, j)) if m == 1 else b.reduce(picked, op, [3])
    counts = b.const(count.reshape(n, j, 1).astype(np.int32), "i32")
    return _combined(b, x, b.permute(total, (0, 2, 1)), counts, reduce, include_self, dt)


def _one_hot_scatter(b: GraphBuilder, x: Value, idx: Value, v: Value) -> Value:
    """x + scatter-add of v's rows at run-time positions idx, as products: for each n,
    H[n]^T v[n] with H[n][j, k] = (idx[n, k] == j) computed in the matmul's loader (the
    operand is an elementwise prologue, no buffer): N * J * K * C multiply-adds on the
    matmul template's tiles. Each output sums its writers in the product's fixed order
    and adds exact zeros for the others, so it is deterministic and exact up to
    summation order for finite values; an infinite or NaN value of v spreads a NaN over
    its column (0 * inf), and in the accelerated precision v is rounded to f16 as every
    product's operands are there."""
    n, j, _ = x.shape
    k = idx.shape[1]
    hit = binary(b, "eq", b.expand(b.reshape(idx, (n, 1, k)), (n, j, k)),
                 b.iota((n, j, k), 1), out_dtype="bool")
    return binary(b, "add", x, product(b, as_dtype(b, hit, "f32"), v))


def _searched_scatter(b: GraphBuilder, x: Value, idx: Value, v: Value, reduce: str | None,
                      include_self: bool) -> Value:
    """scatter_rows as a gather-form search: each destination (n, j) compares every
    idx[n, :] with j, N * J * K comparisons (times C when reducing)."""
    n, j, c = x.shape
    k = idx.shape[1]
    hit = binary(b, "eq", b.expand(b.reshape(idx, (n, 1, k)), (n, j, k)),
                 b.iota((n, j, k), 1), out_dtype="bool")
    if reduce is None:
        writer = b.reduce(b.ew("where", hit, b.iota((n, j, k), 2), b.scalar(-1, "i32")),
                          "max", [2])
        first = b.expand(b.reshape(binary(b, "maximum", writer, 0), (n, j, 1)), (n, j, c))
        written = b.reshape(binary(b, "ge", writer, 0, out_dtype="bool"), (n, j, 1))
        return b.ew("where", written, b.gather(v, 1, first), x)
    op = SCATTER_REDUCE[reduce][0]
    dt, identity = _reduce_dtype(v, op)
    hits = b.expand(b.reshape(hit, (n, j, 1, k)), (n, j, c, k))
    vals = b.expand(b.reshape(b.permute(as_dtype(b, v, dt), (0, 2, 1)), (n, 1, c, k)),
                    (n, j, c, k))
    total = b.reduce(b.ew("where", hits, vals, b.scalar(identity, dt)), op, [3])
    count = None
    if reduce == "mean" or not include_self:
        count = b.reduce(as_dtype(b, hit, "i32"), "sum", [2], keepdim=True)  # [N, J, 1]
    return _combined(b, x, total, count, reduce, include_self, dt)


def _scatter(b, x, dim, index, src, reduce=None, include_self=True):
    """torch.scatter / scatter_add along `dim`: each element of `index` writes the
    element of src at its position into x at that position with dim replaced by its
    value. Rows are the other dims; the parts of x that index does not reach in them are
    never written (index padded with -1 there)."""
    if not x.shape:
        x, index = b.reshape(x, (1,)), b.reshape(index, (1,))
        src = b.reshape(src, (1,)) if src.shape else src
        return b.reshape(_scatter(b, x, 0, index, src, reduce, include_self), ())
    dim %= len(x.shape)
    others = [d for d in range(len(x.shape)) if d != dim]
    if len(index.shape) != len(x.shape):
        raise CompileError(f"scatter index {list(index.shape)} and tensor {list(x.shape)} "
                           "differ in rank")
    src = b.expand(src, index.shape) if src.kind == "scalar" else _crop(b, src, index.shape)
    idx = _wrapped(b, as_dtype(b, index, "i32"), x.shape[dim])
    pads = [(0, 0 if d == dim else x.shape[d] - index.shape[d]) for d in range(len(x.shape))]
    idx = b.pad(idx, pads, -1)
    src = b.pad(as_dtype(b, src, x.dtype), pads, 0)
    rows, j, k = math.prod(x.shape[d] for d in others), x.shape[dim], index.shape[dim]
    x3 = b.reshape(b.permute(x, others + [dim]), (rows, j, 1))
    i2 = b.reshape(b.permute(idx, others + [dim]), (rows, k))
    v3 = b.reshape(b.permute(src, others + [dim]), (rows, k, 1))
    y = scatter_rows(b, x3, i2, v3, reduce, include_self)
    order = others + [dim]
    y = b.reshape(y, [x.shape[d] for d in order])
    return b.permute(y, [order.index(d) for d in range(len(order))])


def _crop(b, x, shape):
    for d, s in enumerate(shape):
        x = b.slice(x, d, 0, s)
    return x


@register("aten.scatter.src", "aten.scatter.value")
def scatter(b, x, dim, index, src):
    if not isinstance(src, Value):
        src = b.scalar(src)
    return _scatter(b, x, dim, index, as_dtype(b, src, x.dtype))


@register("aten.scatter_add.default")
def scatter_add(b, x, dim, index, src):
    return _scatter(b, x, dim, index, src, "sum")


@register("aten.scatter_reduce.two")
def scatter_reduce(b, x, dim, index, src, reduce, include_self=True):
    return _scatter(b, x, dim, index, src, reduce, include_self)


@register("aten.put.default")
def put(b, x, index, source, accumulate=False):
    """x.put_(index, source): x flattened, one row."""
    flat = _wrapped(b, b.reshape(as_dtype(b, index, "i32"), (1, index.numel)), x.numel)
    y = scatter_rows(b, b.reshape(x, (1, x.numel, 1)), flat,
                     b.reshape(as_dtype(b, source, x.dtype), (1, source.numel, 1)),
                     "sum" if accumulate else None)
    return b.reshape(y, x.shape)


@register("aten.masked_select.default", "aten.nonzero.default")
def data_dependent_shape(b, x, *args):
    raise CompileError("masked_select / nonzero: how many elements they give is known only "
                       "at run time, and a compiled plan's shapes are static; for a fixed "
                       "shape use torch.where(mask, x, other) or x.masked_fill(mask, value)")


@register("aten.masked_scatter.default")
def masked_scatter(b, x, mask, source):
    """x where `mask` (broadcast to x's shape) is false; at its true elements, in
    row-major order, source's elements in order (the k-th true element takes source's
    k-th). PyTorch refuses a mask with more true elements than source has; here those
    read source's last (a caller checks the count: generate's image placeholders)."""
    mask = b.expand(as_dtype(b, mask, "bool"), broadcast_shapes(mask.shape, x.shape))
    flat = b.reshape(mask, (x.numel,))
    k = binary(b, "sub", b.scan(as_dtype(b, flat, "i32"), "sum", 0), 1)
    k = b.ew("clamp", k, lo=0, hi=max(source.numel - 1, 0), dtype="i32")
    picked = b.gather(b.reshape(as_dtype(b, source, x.dtype), (source.numel,)), 0, k)
    return b.reshape(b.ew("where", flat, picked, b.reshape(x, (x.numel,))), x.shape)
