"""Matrix products: the ATen ops that map onto the matmul template (bias and scaling
fuse as epilogues). Convolution and pooling live in conv.py and pool.py."""

from __future__ import annotations

import math

from ..ir import CompileError, GraphBuilder, Value, broadcast_shapes
from ..templates import MATMUL_BK, matmul_tiles
from . import register
from .elementwise import binary

# Depth heuristics of the matrix product (see `product`).
SMALL_K = 3  # up to this K, a sum of K broadcast outer products in one elementwise kernel
SPLIT_K_MIN = 2048  # split K only from this depth on ...
SPLIT_K_CHUNK = 256  # ... into chunks at least this deep ...
SPLIT_K_TARGET = 256  # ... until about this many workgroups share the work (see product)
MATMUL_FOLD_M = 128  # a shared weight's product with fewer rows per batch entry folds


def product(b: GraphBuilder, x: Value, y: Value) -> Value:
    """x [..., M, K] @ y [..., K, N] with broadcast batch dims, choosing the lowering
    by depth: a tiny K is an elementwise sum of outer products (no tiling overhead, and
    it fuses with its neighbours); a deep K whose output covers too few matmul tiles to
    fill the GPU is split into chunks whose partial products, one batch entry per
    chunk, the reduce template sums (split-K); anything else is one matmul.
    SPLIT_K_TARGET: 256 workgroups, two per SM of an H200's 132 (the large products'
    128 x 64 tiles fit two per SM); it was 128 until 2026-12-01k, when those tiles
    replaced 128 x 128 ones (one per SM) and halved the chunks of a 512 x 131072 x 512
    product: 1.77 -> 2.24 ms in the suite (level1/004)."""
    k = x.shape[-1]
    if k <= SMALL_K:
        batch = broadcast_shapes(x.shape[:-2], y.shape[:-2])
        shape = batch + (x.shape[-2], y.shape[-1])
        acc = None
        for i in range(k):
            term = binary(b, "mul", b.slice(x, -1, i, i + 1), b.slice(y, -2, i, i + 1))
            acc = term if acc is None else binary(b, "add", acc, term)
        if acc is None:  # K = 0: an empty sum
            acc = b.scalar(0.0 if "f32" in (x.dtype, y.dtype) else 0)
        return b.expand(acc, shape)
    shared = shared_matrix(b, y)
    if len(x.shape) > 2 and shared is not None and x.shape[-2] < MATMUL_FOLD_M:
        # One weight for every batch entry of x and few rows per entry: the batch folds
        # into M, so that the tiles are not mostly padding and the weight is read once
        # per M tile instead of once per batch entry (nn.MultiheadAttention's input
        # projection: x transposed to [L, B, E], 1024 entries of 8 rows)
        lead = broadcast_shapes(x.shape[:-2], y.shape[:-2]) + x.shape[-2:-1]
        flat = b.reshape(b.expand(x, lead + (k,)), (math.prod(lead), k))
        return b.reshape(product(b, flat, shared), lead + (y.shape[-1],))
    chunks = split_k_chunks(x.shape, y.shape)
    if chunks == 1:
        return b.matmul(x, y)
    depth = -(-k // chunks)
    depth = -(-depth // MATMUL_BK) * MATMUL_BK  # whole staged tiles per chunk
    chunks = -(-k // depth)
    pad = chunks * depth - k
    xs = b.pad(x, [(0, 0)] * (len(x.shape) - 1) + [(0, pad)])
    ys = b.pad(y, [(0, 0)] * (len(y.shape) - 2) + [(0, pad), (0, 0)])
    n = y.shape[-1]
    xs = b.reshape(xs, x.shape[:-1] + (chunks, depth))  # [..., M, S, C]
    r = len(xs.shape)
    xs = b.permute(xs, list(range(r - 3)) + [r - 2, r - 3, r - 1])  # [..., S, M, C]
    ys = b.reshape(ys, y.shape[:-2] + (chunks, depth, n))  # [..., S, C, N]
    partial = b.matmul(xs, ys)  # [..., S, M, N]
    return b.reduce(partial, "sum", [len(partial.shape) - 3])


def shared_matrix(b: GraphBuilder, y: Value) -> Value | None:
    """y [..., K, N] as one [K, N] matrix when its batch dims only repeat it (all of size
    1, or an expand of such a value: ATen's bmm of a linear layer's weight), else None."""
    src = y.node.inputs[0] if y.node is not None and y.node.op == "expand" else y
    if src.shape[-2:] != y.shape[-2:] or math.prod(src.shape[:-2]) != 1:
        return None
    return b.reshape(src, src.shape[-2:])


def split_k_chunks(x_shape, y_shape) -> int:
    """How many K chunks the product of x_shape @ y_shape is split into (1: none)."""
    k = x_shape[-1]
    if k < SPLIT_K_MIN:
        return 1
    m, n = x_shape[-2], y_shape[-1]
    nb = math.prod(broadcast_shapes(x_shape[:-2], y_shape[:-2]))
    bm, bn, _, _ = matmul_tiles(m, n, nb)
    tiles = nb * math.ceil(m / bm) * math.ceil(n / bn)
    chunks = min(k // SPLIT_K_CHUNK, math.ceil(SPLIT_K_TARGET / tiles))
    return chunks if chunks >= 2 else 1


@register("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def matmul(b: GraphBuilder, x: Value, y: Value):
    vec_x, vec_y = len(x.shape) == 1, len(y.shape) == 1
    if vec_x:
        x = b.reshape(x, (1, x.shape[0]))
    if vec_y:
        y = b.reshape(y, (y.shape[0], 1))
    out = product(b, x, y)
    if vec_x or vec_y:
        shape = list(out.shape)
        if vec_y:
            shape.pop(-1)
        if vec_x:
            shape.pop(-1 if vec_y else -2)
        out = b.reshape(out, shape)
    return out


@register("aten.mv.default")
def mv(b, x, v):
    return matmul(b, x, v)


@register("aten.dot.default")
def dot(b, x, y):
    return matmul(b, x, y)


@register("aten.addmm.default", "aten.baddbmm.default")
def addmm(b, bias, x, y, beta=1, alpha=1):
    prod = matmul(b, x, y)
    if alpha != 1:
        prod = binary(b, "mul", prod, alpha)
    if beta == 0:
        return prod
    return binary(b, "add", prod, bias if beta == 1 else binary(b, "mul", bias, beta))


@register("aten.addmv.default")
def addmv(b, bias, x, v, beta=1, alpha=1):
    return addmm(b, bias, x, v, beta, alpha)


@register("aten.linear.default")
def linear(b, x, w, bias=None):
    out = matmul(b, x, b.transpose(w, 0, 1))
    return out if bias is None else binary(b, "add", out, bias)


# -- diagonals and triangles ----------------------------------------------------------
# torch.tril / triu / diag(vector) / diag_embed decompose to comparisons of aranges
# (`iota` nodes, computed from the index inside whichever kernel reads them) and a
# where, so a triangular or diagonal operand is a mask inside the matmul's loader.
# torch.diag(matrix) and torch.diagonal are aten.diagonal, a strided view:
@register("aten.diagonal.default", "aten.diagonal_copy.default")
def diagonal(b: GraphBuilder, x: Value, offset=0, dim1=0, dim2=1):
    """The diagonal as a strided slice of the two dims flattened together: element d is
    at flat index start + d * (cols + 1)."""
    r = len(x.shape)
    d1, d2 = dim1 % r, dim2 % r
    if d1 == d2:
        raise CompileError("diagonal dims must differ")
    rest = [d for d in range(r) if d not in (d1, d2)]
    x = b.permute(x, rest + [d1, d2])
    rows, cols = x.shape[-2:]
    length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    start = offset if offset >= 0 else -offset * cols
    flat = b.reshape(x, x.shape[:-2] + (rows * cols,))
    if length == 0:
        return b.slice(flat, -1, 0, 0)
    return b.slice(flat, -1, start, start + (length - 1) * (cols + 1) + 1, cols + 1)
