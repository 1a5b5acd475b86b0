"""Movement ATen ops: views, permutations, slices, concatenation, padding, repeat,
flip, gather.

They lower to the movement primitives, which never copy: codegen folds them into
the index arithmetic of the kernels that read them.
"""

from __future__ import annotations

from ..ir import CompileError, GraphBuilder, Value
from . import register
from .elementwise import as_dtype


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
    xs = [x for x in xs if not (len(x.shape) == 1 and x.shape[0] == 0)]
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
    from .elementwise import binary

    return b.ew("where", binary(b, "lt", idx, 0, out_dtype="bool"), binary(b, "add", idx, size),
                idx)


@register("aten.embedding.default")
def embedding(b, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    out = index_select(b, weight, 0, b.reshape(indices, (indices.numel,)))
    return b.reshape(out, indices.shape + weight.shape[1:])


@register("aten.index.Tensor")
def index_tensor(b, x, indices):
    """x[..., idx, ...] with one index tensor (the other positions None or absent)."""
    given = [(d, t) for d, t in enumerate(indices) if t is not None]
    if len(given) != 1:
        raise CompileError("advanced indexing with several index tensors is not supported "
                           "(one index tensor, other dims sliced, is)")
    dim, idx = given[0]
    if idx.dtype == "bool":
        raise CompileError("indexing with a boolean mask has a data-dependent shape")
    out = index_select(b, x, dim, b.reshape(idx, (idx.numel,)))
    return b.reshape(out, x.shape[:dim] + idx.shape + x.shape[dim + 1:])
