"""Matrix products: the ATen ops that map onto the matmul template (bias and scaling
fuse as epilogues). Convolution and pooling live in conv.py and pool.py."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..dtypes import buffer_bytes
from ..ir.ir import (
    CompileError,
    GraphBuilder,
    Node,
    Value,
    affine_index,
    broadcast_shapes,
    where_band,
)
from ..kernels import MATMUL_BK, WavePlan, product_plan, reads_window
from .elementwise import as_dtype, as_value, binary, device_dtype, unary_float
from .registry import register

# Depth heuristics of the matrix product (see `product`).
SMALL_K = 3  # up to this K, a sum of K broadcast outer products in one elementwise kernel
MATMUL_FOLD_M = 128  # a shared weight's product with fewer rows per batch entry folds


def product(b: GraphBuilder, x: Value, y: Value) -> Value:
    """x [..., M, K] @ y [..., K, N] with broadcast batch dims, choosing the lowering
    by depth: a tiny K is an elementwise sum of outer products (no tiling overhead, and
    it fuses with its neighbours); a deep K whose output covers too few matmul tiles to
    fill the GPU is split into chunks whose partial products, one batch entry per
    chunk, the reduce template sums (split-K); anything else is one matmul. Operands
    of known structure are rewritten first: a one-hot operand makes the product a
    gather of the other's rows or columns (`one_hot`, `one_hot_product`), a diagonal
    one a scaling (`diagonal_product`), a factor constant along K an epilogue
    (`factor_along_k`), a triangular one bounds the K loop (`k_range`).
    A softmax along K as operand A becomes exp(x - lse) (`softmax_rows`, `lse_probabilities`).
    How the product is cut is the matmul's cost model's answer (kernels/cuts.py,
    `product_plan` for the compile's options): split-K takes products of at most
    SPLIT_K_MAX_TILES tiles (under one workgroup per SM of an H200's 132) and K of
    SPLIT_K_MIN or more, and makes about SPLIT_K_TARGET workgroups (large products on a
    device of known waves take `wave_plan`'s cuts instead, built by `planned_product`;
    deep ones there, K long against M and N, `deep_plan`'s).
    History: the target was 128
    until 2026-12-01k, when 128 x 64 tiles replaced 128 x 128 ones and halved the chunks
    of a 512 x 131072 x 512 product (1.77 -> 2.24 ms in the suite, level1/004), then 256
    (split below 256 tiles, K from 2048, chunks of 256 or more). 2026-12-02
    (bench/results/profile_h200_2026-12-02.json, suite call 34): the 32 x 1024 x 4096
    step of level3/023's LSTM (64 tiles, 64 K steps each, latency-bound) took 52 us
    unsplit, 23 us in 4 chunks and 17 us in 8 (plus 7 us to sum them): the problem 19.8
    -> 13.5 -> 11.6 ms; level1/108's 128 x 512 x 2048 steps (64 tiles), 4 chunks: 10.8
    -> 8.0 ms. But a target of 512 with the cap of 256 tiles split convolutions of
    256-416 tiles in two: ResNet-18 5.38 -> 6.82 ms, the GRU of level1/107 (192 tiles, K
    padded) 7.77 -> 8.88; hence the cap of 128 tiles."""
    k = x.shape[-1]
    if k <= SMALL_K:
        batch = broadcast_shapes(x.shape[:-2], y.shape[:-2])
        shape = batch + (x.shape[-2], y.shape[-1])
        acc = None
        for i in range(k):
            term = binary(b, "mul", b.slice(x, -1, i, i + 1), b.slice(y, -2, i, i + 1))
            acc = term if acc is None else binary(b, "add", acc, term)
        return b.matmul(x, y) if acc is None else b.expand(acc, shape)  # (K = 0: zeros)
    rows = x.node.inputs[0] if x.node is not None and x.node.op == "reshape" else x
    soft = softmax_rows(rows) if rows.shape[-1:] == x.shape[-1:] else None
    if soft is not None:  # (through a reshape of the leading dims: torch.matmul's)
        return product(b, b.reshape(lse_probabilities(b, *soft), x.shape), y)
    for operand in (0, 1):
        hot = one_hot(x if operand == 0 else y, operand) if x.dtype == y.dtype else None
        if hot is not None:
            return one_hot_product(b, x, y, operand, hot)
    bands = (zero_outside_band(x), zero_outside_band(y))
    for operand in (0, 1):
        band = bands[operand]
        if band is not None and band[0] == "eq":
            return diagonal_product(b, x, y, operand, band[1])
        pulled = factor_along_k(x if operand == 0 else y, operand)
        if pulled is not None:  # (r * x) @ y = r * (x @ y), r constant along K
            rest, factor = pulled
            inner = product(b, rest, y) if operand == 0 else product(b, x, rest)
            return binary(b, "mul", inner, factor)
    shared = shared_matrix(b, y)
    if len(x.shape) > 2 and shared is not None and x.shape[-2] < MATMUL_FOLD_M:
        # One weight for every batch entry of x and few rows per entry: the batch folds
        # into M, so that the tiles are not mostly padding and the weight is read once
        # per M tile instead of once per batch entry (nn.MultiheadAttention's input
        # projection: x transposed to [L, B, E], 1024 entries of 8 rows)
        lead = broadcast_shapes(x.shape[:-2], y.shape[:-2]) + x.shape[-2:-1]
        flat = b.reshape(b.expand(x, lead + (k,)), (math.prod(lead), k))
        return b.reshape(product(b, flat, shared), lead + (y.shape[-1],))
    plan = product_plan(x.shape, y.shape, reads_window(x) or reads_window(y), b.options.waves)
    if bands != (None, None):  # a bounded K loop: as one product or in chunks
        plan = WavePlan(chunks=plan.chunks)
    first = len(b.graph.nodes)
    out = planned_product(b, x, y, plan, k_range(*bands))
    weight = constant_matrix(b, y)
    if weight is not None and out.numel * k == x.numel * y.shape[-1]:
        b.constant_products.append(ConstantProduct(x, weight, out, frozenset(
            id(n) for n in b.graph.nodes[first:])))
    return out


def planned_product(b: GraphBuilder, x: Value, y: Value, plan: WavePlan,
                    bounds: dict | None = None) -> Value:
    """x @ y as `plan` cuts it (product_plan): operands copied into aligned buffers, the
    last rows a product of their own, K in chunks whose partial products, one batch
    entry per chunk, the reduce template sums (split-K). `bounds`: the K loop's
    (k_range), for a product in one piece."""
    m, k, n = x.shape[-2], x.shape[-1], y.shape[-1]
    if plan.align:
        up = [-(-d // 4) * 4 - d for d in (m, k, n)]
        xs = b.pad(x, [(0, 0)] * (len(x.shape) - 2) + [(0, up[0]), (0, up[1])])
        ys = b.pad(y, [(0, 0)] * (len(y.shape) - 2) + [(0, up[1]), (0, up[2])])
        xs, ys = (v if v is w else b.materialize(v) for v, w in ((xs, x), (ys, y)))
        out = planned_product(b, xs, ys, replace(plan, align=False))
        return b.slice(b.slice(out, -2, 0, m), -1, 0, n)
    if plan.tail:
        top, rest = b.slice(x, -2, 0, m - plan.tail), b.slice(x, -2, m - plan.tail, m)
        return b.cat([planned_product(b, top, y, WavePlan()),
                      planned_product(b, rest, y, product_plan(rest.shape, y.shape,
                                                                 waves=b.options.waves))], -2)
    if plan.chunks == 1:
        return b.matmul(x, y, bounds)
    chunks, depth, pad = _k_chunks(k, plan.chunks)
    xs = b.pad(x, [(0, 0)] * (len(x.shape) - 1) + [(0, pad)])
    ys = b.pad(y, [(0, 0)] * (len(y.shape) - 2) + [(0, pad), (0, 0)])
    xs = b.reshape(xs, x.shape[:-1] + (chunks, depth))  # [..., M, S, C]
    r = len(xs.shape)
    xs = b.permute(xs, list(range(r - 3)) + [r - 2, r - 3, r - 1])  # [..., S, M, C]
    ys = b.reshape(ys, y.shape[:-2] + (chunks, depth, n))  # [..., S, C, N]
    partial = b.matmul(xs, ys)  # [..., S, M, N]
    return b.reduce(partial, "sum", [len(partial.shape) - 3])


# -- one product for the products of one operand by several constants -----------------
# A transformer layer multiplies its normed activations by several weights (the q, k
# and v projections; an MLP's gate and up projections): each a kernel of its own that
# reads the same activations and fills few workgroups at decode's one row. `product`
# records each product of a value by a constant matrix; once the graph is lowered,
# `merge_shared_products` makes those of one operand one product against the weights
# side by side along N (a new constant, built at compile time from the module's
# weights: a call after they changed is refused as for any weight, CompiledModule),
# each product's readers reading its columns as a slice (a view). A bias added to a
# product's every row is added to the merged one's (the biases side by side, zeros
# where a product has none): the matmul's epilogue. Not merged: a weight read by
# anything else (it would be held twice: the merged copy and its own), state the graph
# updates (a training step's parameters: never folded, so never concatenated), a product
# whose operand is not the same value, a product returned as it is (its columns would
# be copied out), one that would lose an elementwise epilogue of its own
# (`merge_shared_products`), or products that together would not fit one binding.


@dataclass(eq=False)
class ConstantProduct:
    """x @ weight as `product` built it: `out`, made by the nodes whose ids are `nodes`."""

    x: Value  # [..., M, K]
    weight: Value  # the constant [K, N] (leading unit dims allowed)
    out: Value  # [..., M, N], x's leading dims
    nodes: frozenset[int]


def _unviewed(v: Value, ops: tuple[str, ...]) -> Value:
    """v with the views of `ops` it is made by taken off."""
    while v.node is not None and v.node.op in ops:
        v = v.node.inputs[0]
    return v


def constant_matrix(b: GraphBuilder, y: Value) -> Value | None:
    """The constant y [..., K, N] repeats (through reshapes and expands) when it is one
    [K, N] matrix the graph never updates, else None."""
    src = _unviewed(y, ("reshape", "expand"))
    if src.kind != "const" or src.data is None or b.is_state(src) or len(src.shape) < 2 \
            or src.shape[-2:] != y.shape[-2:] or math.prod(src.shape[:-2]) != 1:
        return None
    return src


def _live(nodes: list[Node], roots: list) -> set[int]:
    """The ids of the nodes among `nodes` that `roots` depend on."""
    live: set[int] = set()
    stack = [v.node for v in roots if isinstance(v, Value) and v.node is not None]
    while stack:
        n = stack.pop()
        if id(n) not in live:
            live.add(id(n))
            stack.extend(v.node for v in n.inputs if v.node is not None)
    return live


def _added_bias(b: GraphBuilder, out: Value, users, roots: set[int]) -> tuple[Value, Value] | None:
    """(the sum, the bias) when `out`'s one reader, through reshapes keeping its last dim
    (each read once), adds an f32 constant of one value per column (a linear layer's
    bias), else None."""
    v, n = out, out.shape[-1]
    while True:
        readers = users.get(v, [])
        if id(v) in roots or len(readers) != 1:
            return None
        node = readers[0]
        if node.op != "reshape" or node.out.shape[-1:] != (n,):
            break
        v = node.out
    if node.op != "ew" or node.attrs["fn"] != "add" or node.out.shape != v.shape \
            or node.out.dtype != "f32" or [i is v for i in node.inputs].count(True) != 1:
        return None
    bias = _unviewed(node.inputs[1] if node.inputs[0] is v else node.inputs[0],
                     ("reshape", "expand"))
    if bias.kind != "const" or bias.data is None or b.is_state(bias) or bias.dtype != "f32" \
            or bias.numel != n or bias.shape[-1:] != (n,):
        return None
    return node.out, bias


FLOW_MAX = 16  # nodes `_flow` follows from a product's value


def _flow(v: Value, users, roots: set[int]) -> tuple[set[int], bool]:
    """The nodes v flows into through elementwise ops and reshapes of its size (up to
    FLOW_MAX of them, not past a root): those an epilogue of v's product might compute;
    and whether one of them is elementwise."""
    nodes: set[int] = set()
    computes = False
    todo = [v]
    while todo and len(nodes) < FLOW_MAX:
        x = todo.pop()
        if id(x) in roots:
            continue
        for node in users.get(x, []):
            if id(node) in nodes or node.op not in ("ew", "reshape") \
                    or node.out.numel != v.numel:
                continue
            nodes.add(id(node))
            computes |= node.op == "ew"
            todo.append(node.out)
    return nodes, computes


def merge_shared_products(b: GraphBuilder, roots: list) -> list:
    """The recorded products (`GraphBuilder.constant_products`) of one operand by
    constant matrices of one K, dtype and storage made one product (the block comment
    above), where each weight is read by its product alone and each product's value
    (with its bias) is no root and would lose no epilogue of its own: a product whose
    value flows into elementwise ops that no other product of the operand flows into
    keeps its kernel (merged, those ops would be a kernel of their own; SwiGLU's
    silu(gate) * up, which both flow into, is merged). `roots`: what the graph computes
    (its outputs, the new values of its state), returned with the merged products'
    values replaced."""
    recorded, b.constant_products = b.constant_products, []
    live = _live(b.graph.nodes, roots)
    users: dict[Value, list[Node]] = {}
    for node in b.graph.nodes:
        if id(node) in live:
            for v in node.inputs:
                users.setdefault(v, []).append(node)
    root_ids = {id(v) for v in roots}
    # a product returned through views (a reshape back to the caller's shape) is returned
    # as it is: merged, its columns would be copied out
    views = ("reshape", "permute", "expand")
    returned = {id(_unviewed(v, views)) for v in roots}
    groups: dict[tuple, list[ConstantProduct]] = {}
    for p in recorded:
        w = p.weight
        if (p.out.node is None or id(p.out.node) not in live or id(w) in root_ids
                or any(id(r) not in p.nodes for r in users.get(w, []))):
            continue
        key = (id(_unviewed(p.x, ("reshape",))), p.x.shape[-1], p.x.dtype, w.dtype, w.storage)
        groups.setdefault(key, []).append(p)
    limits = b.options.limits
    swap: dict[int, Value] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        biases = [_added_bias(b, p.out, users, root_ids) for p in members]
        if len({bias.storage for _, bias in filter(None, biases)}) > 1:
            biases = [None] * len(members)  # (added to the columns as they are)
        ends = [p.out if pair is None else pair[0] for p, pair in zip(members, biases)]
        flows = [_flow(v, users, root_ids) for v in ends]
        kept = []
        for i, (p, pair, end) in enumerate(zip(members, biases, ends)):
            nodes, computes = flows[i]
            if id(_unviewed(end, views)) in returned or (computes and not any(
                    nodes & other for j, (other, _) in enumerate(flows) if j != i)):
                continue
            kept.append((p, pair))
        batch: list[tuple[ConstantProduct, tuple | None]] = []
        for entry in kept + [None]:  # in order, as many a product as fit one binding
            if entry is not None:
                p = entry[0]
                n = sum(q.out.shape[-1] for q, _ in batch) + p.out.shape[-1]
                rows = p.out.numel // p.out.shape[-1]
                if limits is None or max(buffer_bytes(p.x.shape[-1] * n, p.weight.stored),
                                         buffer_bytes(rows * n, p.out.stored)) <= limits.max_bytes:
                    batch.append(entry)
                    continue
            if len(batch) > 1:
                swap.update(_merged(b, batch))
            batch = [] if entry is None else [entry]
    b.constant_products = []  # (the merged products' own records)
    return b.replace(swap, roots)


def _merged(b: GraphBuilder, batch: list[tuple[ConstantProduct, tuple | None]]
            ) -> dict[int, Value]:
    """One product for the products of `batch`, each with its added bias (the sum and
    the bias, or None): the id of each one's value (the sum, where it has a bias) ->
    its columns of the merged product."""
    k = batch[0][0].x.shape[-1]
    w = batch[0][0].weight
    parts = [np.asarray(p.weight.data).reshape(k, p.out.shape[-1]) for p, _ in batch]
    weight = b.const(b.made_from(parts, lambda: np.concatenate(parts, axis=1)), w.dtype)
    weight.storage = w.storage
    out = product(b, batch[0][0].x, weight)
    biases = [pair[1] for _, pair in batch if pair is not None]
    if biases:  # the biases too, side by side (zeros where there is none)
        bias = b.const(np.concatenate([
            np.zeros(p.out.shape[-1], np.float32) if pair is None else
            np.asarray(pair[1].data, np.float32).reshape(-1) for p, pair in batch]), "f32")
        bias.storage = biases[0].storage
        out = b.ew("add", out, bias)
    swap, start = {}, 0
    for p, pair in batch:
        value = p.out if pair is None else pair[0]
        n = p.out.shape[-1]
        swap[id(value)] = b.reshape(b.slice(out, -1, start, start + n), value.shape)
        start += n
    return swap


def _k_chunks(k: int, wanted: int) -> tuple[int, int, int]:
    """K cut into about `wanted` chunks of whole staged tiles (MATMUL_BK): the chunks,
    their depth, and the zeros padding K to chunks * depth."""
    depth = -(-k // wanted)
    depth = -(-depth // MATMUL_BK) * MATMUL_BK
    chunks = -(-k // depth)
    return chunks, depth, chunks * depth - k


def folded_product(b: GraphBuilder, x: Value, y: Value, fold: int) -> Value:
    """x [G, M, K] @ y [G, K, J * fold] stored block by block as [J, G, M, fold]
    (GraphBuilder.folded_matmul: a convolution's batch folded into the GEMM's columns),
    y read through a convolution's windows; K cut as product_plan says, each chunk's
    partial products a batch entry of the folded matmul, summed by the reduce template."""
    g, m, k = x.shape
    n = y.shape[2]
    plan = product_plan(x.shape, y.shape, True, b.options.waves)
    if plan.tail or plan.align:
        raise CompileError(f"folded product {list(x.shape)} @ {list(y.shape)}: {plan}")
    if plan.chunks == 1:
        return b.folded_matmul(x, y, fold)
    chunks, depth, pad = _k_chunks(k, plan.chunks)
    xs = b.reshape(b.pad(x, [(0, 0), (0, 0), (0, pad)]), (g, m, chunks, depth))
    xs = b.reshape(b.permute(xs, [0, 2, 1, 3]), (g * chunks, m, depth))
    ys = b.reshape(b.pad(y, [(0, 0), (0, pad), (0, 0)]), (g * chunks, depth, n))
    partial = b.folded_matmul(xs, ys, fold)  # [J, G * S, M, fold]
    return b.reduce(b.reshape(partial, (n // fold, g, chunks, m, fold)), "sum", [2])


def lse_probabilities(b: GraphBuilder, z: Value, m: Value, total: Value) -> Value:
    """exp(z - lse) with lse = m + log(total) per row, m the rows' max (0 where a row is
    all -inf) and total the sum of exp(z - m); +inf where total is 0 (a fully masked
    row: zeros). A product reading these probabilities computes them in its loader from
    z and lse, and lse with the max is one row kernel (schedule.fuse_rows) that reads z
    once, where exp(z - m) / total needs both m and total, two kernels each reading z
    (the attention scores). The rounding of lse costs a relative 6e-8 |lse| per
    probability (flash attention's backward pass recomputes them the same way)."""
    empty = b.ew("eq", total, b.scalar(0.0), dtype="bool")
    lse = b.ew("where", empty, b.scalar(float("inf")),
               binary(b, "add", m, unary_float(b, "log", total)))
    return unary_float(b, "exp", binary(b, "sub", z, lse))


def _row_stat(v: Value, op: str) -> tuple[Value, Value] | None:
    """(x, r) when v is (an expand of) r, the keepdim reduction `op` of x over its last
    dim, as GraphBuilder.reduce writes it (one reduce node, no split)."""
    while v.node is not None and v.node.op == "expand":
        v = v.node.inputs[0]
    chain = [v]
    for op_ in ("reshape", "reduce", "reshape"):
        node = chain[-1].node
        if node is None or node.op != op_ or (op_ == "reduce" and node.attrs["op"] != op):
            return None
        chain.append(node.inputs[0])
    x = chain[-1]
    if not x.shape or chain[1].shape != (math.prod(x.shape[:-1]),) or \
            v.shape != x.shape[:-1] + (1,):
        return None
    return x, v


def softmax_rows(p: Value) -> tuple[Value, Value, Value] | None:
    """(z, m, total) when p is softmax(z) along its last dim as lower/reductions.softmax
    writes it, exp(z - m) / total with m the rows' max of z and total the rows' sum of
    that exp, else None."""
    node = p.node
    if node is None or node.op != "ew" or node.attrs["fn"] != "div" or p.dtype != "f32":
        return None
    e, s = node.inputs
    summed = _row_stat(s, "sum")
    if summed is None or summed[0] is not e or e.node is None or e.node.op != "ew" \
            or e.node.attrs["fn"] != "exp":
        return None
    d = e.node.inputs[0]
    if d.node is None or d.node.op != "ew" or d.node.attrs["fn"] != "sub":
        return None
    z, m = d.node.inputs
    top = _row_stat(m, "max")
    if top is None or top[0] is not z or z.shape != p.shape:
        return None
    return z, top[1], summed[1]


def factor_along_k(x: Value, operand: int) -> tuple[Value, Value] | None:
    """(rest, factor) when operand 0 (x [..., M, K]) or 1 (x [..., K, N]) is an f32
    product rest * factor whose factor is the same along K (a scalar, a per-row or a
    per-column value: attention's q * scale, softmax's rows times 1 / sum): the factor
    then scales the product's output, an epilogue, and the operand is loaded as it is
    stored (vec4 loads of a plain buffer, two staged buffers: a matmul whose loader
    computes has one). The factor's shape is its own, broadcast against the output's.
    Rounding differs from PyTorch's order by a few ulps."""
    node = x.node
    if node is None or node.op != "ew" or node.attrs["fn"] != "mul" or x.dtype != "f32":
        return None
    kdim = -1 if operand == 0 else -2
    for f, rest in (node.inputs, node.inputs[::-1]):
        src = f
        while src.node is not None and src.node.op == "expand":
            src = src.node.inputs[0]
        if len(src.shape) < -kdim or src.shape[kdim] == 1:
            if len(src.shape) > len(x.shape) or rest.dtype != "f32":
                return None
            return rest, src
    return None


def shared_matrix(b: GraphBuilder, y: Value) -> Value | None:
    """y [..., K, N] as one [K, N] matrix when its batch dims only repeat it (all of size
    1, or an expand of such a value: ATen's bmm of a linear layer's weight), else None."""
    src = y.node.inputs[0] if y.node is not None and y.node.op == "expand" else y
    if src.shape[-2:] != y.shape[-2:] or math.prod(src.shape[:-2]) != 1:
        return None
    return b.reshape(src, src.shape[-2:])


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


@register("aten._grouped_mm.default", "transformers.grouped_mm_fallback.default")
def grouped_mm(b: GraphBuilder, x: Value, w: Value, offs: Value | None = None,
               bias: Value | None = None, out_dtype=None) -> Value:
    """x [S, K] @ w [G, K, N] by groups of rows: rows offs[g - 1] .. offs[g] (from 0 for
    g = 0) take w[g], rows from offs[G - 1] on are zeros (transformers' fallback writes
    them so; torch leaves them unwritten). A mixture of experts' rows sorted by expert
    (transformers' "grouped_mm" experts, whose fallback custom op has this meaning).
    Each row's group is the count of offsets at or below it; the product is one row per
    batch entry against w gathered by that group, a view: the product's loader reads
    w[group, k, n] in place, so nothing of [S, K, N] is stored, but each row reads its
    whole matrix (no reuse between the rows of a group: docs/DECISIONS.md). Without
    offsets, 3-d x by 3-d w is a batched product."""
    if offs is None and bias is None and len(x.shape) == 3 and len(w.shape) == 3:
        out = product(b, x, w)
        return out if out_dtype is None else as_dtype(b, out, device_dtype(out_dtype))
    if offs is None or bias is not None or len(x.shape) != 2 or len(w.shape) != 3 \
            or offs.shape != (w.shape[0],) or x.shape[1] != w.shape[1]:
        with_bias = " and a bias" if bias is not None else ""
        raise CompileError(
            f"grouped product of {list(x.shape)} and {list(w.shape)} with offsets "
            f"{None if offs is None else list(offs.shape)}{with_bias}: only a 2-d input by a "
            "3-d stack of matrices, one offset per matrix, or 3-d by 3-d without offsets; "
            "no bias")
    (s, k), (g, _, n) = x.shape, w.shape
    ends = b.expand(b.reshape(as_dtype(b, offs, "i32"), (1, g)), (s, g))
    passed = binary(b, "le", ends, b.iota((s, g), 0), out_dtype="bool")
    group = b.reduce(as_dtype(b, passed, "i32"), "sum", [1])  # [S]: G past the last
    pick = b.ew("minimum", group, b.scalar(g - 1))
    rows = b.gather(w, 0, b.expand(b.reshape(pick, (s, 1, 1)), (s, k, n)))
    out = b.reshape(product(b, b.reshape(x, (s, 1, k)), rows), (s, n))
    kept = binary(b, "lt", b.reshape(group, (s, 1)), g, out_dtype="bool")
    out = b.ew("where", kept, out, as_value(b, 0, out.dtype))
    return out if out_dtype is None else as_dtype(b, out, device_dtype(out_dtype))


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


# -- operands zero outside a band -------------------------------------------------------
# A triangular or diagonal operand is where(mask, value, 0) with a mask comparing the
# matrix's column index j with its row index i: torch.tril(x, c) keeps j - i <= c,
# triu keeps j - i >= c, diag(v, c) and diag_embed keep j - i == c. `zero_outside_band`
# reads that off the graph (the mask's two sides as affine functions of the indices);
# the product then skips what is zero: a diagonal operand turns it into a row or
# column scaling (no product at all), a triangular one bounds each output tile's K
# loop (`k_range`, the matmul node's `k_from` / `k_to`). Neither changes the sum
# for finite values: the terms skipped are products with exact zeros. A dense product
# would turn an infinite or NaN value of the other operand, multiplied by one of
# those zeros, into a NaN; these products do not (a documented difference).
def zero_outside_band(x: Value) -> tuple[str, int] | None:
    """(op, c) when matrix x [..., R, C] is zero wherever not (j - i) op c holds (i its
    row, j its column): x is where(mask, value, 0) with such a mask (ir.where_band)."""
    band = where_band(x)
    if band is None or band[2] != 0:
        return None
    return band[0], band[1]


def diagonal_product(b: GraphBuilder, x: Value, y: Value, operand: int, c: int) -> Value:
    """x @ y where operand 0 (x) or 1 (y) is zero off its diagonal j - i = c: each output
    row (x diagonal) or column (y diagonal) is the other operand's matching row or
    column scaled by one diagonal element; rows or columns the diagonal misses are 0."""
    batch = broadcast_shapes(x.shape[:-2], y.shape[:-2])
    shape = batch + (x.shape[-2], y.shape[-1])
    diag = diagonal(b, x if operand == 0 else y, c, -2, -1)  # [..., L]
    length = diag.shape[-1]
    if length == 0:
        return b.expand(b.scalar(0.0), shape)
    if operand == 0:  # out[m] = x[m, m + c] * y[m + c] for m from max(0, -c)
        first, k0 = max(0, -c), max(0, c)
        rows = b.slice(y, -2, k0, k0 + length)
        out = binary(b, "mul", b.reshape(diag, diag.shape + (1,)), rows)
        dim, size = -2, x.shape[-2]
    else:  # out[:, n] = x[:, n - c] * y[n - c, n] for n from max(0, c)
        first, k0 = max(0, c), max(0, -c)
        cols = b.slice(x, -1, k0, k0 + length)
        out = binary(b, "mul", cols, b.reshape(diag, diag.shape[:-1] + (1, length)))
        dim, size = -1, y.shape[-1]
    out = b.expand(out, batch + out.shape[-2:])
    pads = [(0, 0)] * len(out.shape)
    pads[dim] = (first, size - first - length)
    return b.pad(out, pads)


def k_range(band_x, band_y) -> dict:
    """The matmul node's K bounds from its operands' bands (zero_outside_band of x
    [.., M, K] and y [.., K, N]): `k_from` and `k_to` list (axis, c) terms, each saying
    that only k >= row + c (k_from) or k <= row + c (k_to) can contribute to output
    element (m, n), row being m (axis "m") or n ("n")."""
    lower, upper = [], []
    if band_x is not None:  # k - m op c (x's column is k, its row m)
        op, c = band_x
        if op in ("le", "lt"):
            upper.append(("m", c if op == "le" else c - 1))
        else:
            lower.append(("m", c if op == "ge" else c + 1))
    if band_y is not None:  # n - k op c (y's row is k, its column n)
        op, c = band_y
        if op in ("le", "lt"):
            lower.append(("n", -c if op == "le" else 1 - c))
        else:
            upper.append(("n", -c if op == "ge" else -c - 1))
    return {"k_from": lower, "k_to": upper} if lower or upper else {}


# -- one-hot operands -------------------------------------------------------------------
# An embedding written as a product, one_hot(tokens) @ table with the one-hot built as
# (tokens.unsqueeze(-1) == arange(K)).float() (the arange a registered buffer, a const,
# or written inline, an `iota`; F.one_hot gives the same eq against an iota), picks one
# row of the table per token: a gather, not a K-deep product. `one_hot` reads the
# one-hot off the graph, `one_hot_product` builds the gather. A token outside the
# arange matches no column, so its output row (column, for operand 1) is zero. As for
# the bands, a dense product would turn an infinite or NaN value of a row no token
# picks into a NaN (0 * inf); the gather does not read that row at all.
def one_hot(x: Value, operand: int) -> tuple | None:
    """(t, views, start, scale, eq) when operand 0 (x [..., M, K]) or 1 (x [..., K, N])
    is scale * (t == start + k) as f32, k the K index and t i32 tokens constant along K:
    x is a cast of (or a where(mask, scale, 0) of) eq, an eq of t broadcast along K with
    an arange along K (an `iota` of step 1, or an i32 constant holding start, start + 1,
    ..., start + K - 1); between x and eq only casts, one where (under a cast only with
    scale 1) and views that keep K a dim of its own: permutes (ATen's matmul of a
    matrix by a batch transposes both), expands not along K, and reshapes of the dims
    before K or of those after it. t is the token side of eq before its broadcast,
    `views` the views from eq up to x, outermost first, each (value, K's dim in it, K's
    dim in its input), which `_tokens` replays on t; None for anything else."""
    if x.dtype != "f32" or len(x.shape) < 2:
        return None
    kd = len(x.shape) - (1 if operand == 0 else 2)  # K's dim in v
    views, scale, cast_seen, v = [], None, False, x
    while v.node is not None:
        node, src = v.node, v.node.inputs[0] if v.node.inputs else None
        if node.op in ("reshape", "expand", "permute"):
            ks = _k_in_input(v, kd)
            if ks is None:
                return None
            views.append((v, kd, ks))
            kd = ks
        elif node.op == "ew" and node.attrs["fn"] == "cast":
            cast_seen = True  # below it are 0 and 1 (bool, i32 or f32), in any dtype
        elif node.op == "ew" and node.attrs["fn"] == "where" and scale is None:
            cond, value, other = node.inputs
            value, other = _unexpanded(value), _unexpanded(other)
            if value.kind != "scalar" or other.kind != "scalar" or other.scalar != 0:
                return None
            scale = float(value.scalar)
            if cast_seen and scale != 1:  # a cast after the where could round the scale
                return None
            src = cond
        elif node.op == "ew" and node.attrs["fn"] == "eq":
            kneg = kd - len(v.shape)
            for tok, ar in (node.inputs, node.inputs[::-1]):
                start, tok = _arange_along(ar, kneg, v.shape[kd]), _unexpanded(tok)
                if start is None or tok.dtype != "i32":
                    continue
                if len(tok.shape) >= -kneg and tok.shape[kneg] != 1:
                    continue  # t varies along K
                return tok, views, start, 1.0 if scale is None else scale, (v.shape, kd)
            return None
        else:
            return None
        v = src
    return None


def _k_in_input(v: Value, kd: int) -> int | None:
    """K's dim in the input of view v (reshape, expand or permute) when K is dim kd of v
    and the view keeps it a dim of its own, else None."""
    node, src = v.node, v.node.inputs[0]
    if node.op == "permute":
        return node.attrs["dims"][kd]
    if node.op == "expand":
        ks = kd - (len(v.shape) - len(src.shape))  # right-aligned
        return ks if ks >= 0 and src.shape[ks] == v.shape[kd] else None
    after = len(v.shape) - kd  # K and the dims after it
    if len(src.shape) >= after and src.shape[-after:] == v.shape[kd:]:
        return len(src.shape) - after  # the dims before K regrouped
    if src.shape[:kd + 1] == v.shape[:kd + 1]:
        return kd  # the dims after K regrouped
    return None


def _unexpanded(v: Value) -> Value:
    while v.node is not None and v.node.op == "expand":
        v = v.node.inputs[0]
    return v


def _arange_along(v: Value, kdim: int, k: int) -> int | None:
    """start when i32 value v holds start + i[kdim] at every index i (kdim < 0): an iota
    (through views, ir.affine_index), or an i32 constant holding start, ..., start + k - 1
    along kdim, broadcast along the other dims."""
    aff = affine_index(v)
    if aff is not None:
        coefs, start = aff
        want = [0] * len(v.shape)
        want[kdim] = 1
        return start if list(coefs) == want else None
    src = _unexpanded(v)
    if len(src.shape) < -kdim or src.shape[kdim] != k or src.numel != k:
        return None  # along kdim and only there (other dims of size 1)
    while src.node is not None and src.node.op == "reshape":
        src = src.node.inputs[0]
    if src.kind != "const" or src.dtype != "i32" or src.data is None:
        return None
    flat = np.asarray(src.data).reshape(-1).astype(np.int64)
    if flat.size != k or (k and not np.array_equal(flat, flat[0] + np.arange(k))):
        return None
    return int(flat[0]) if k else 0


def _tokens(b: GraphBuilder, hot: tuple) -> Value:
    """The one-hot's tokens t with the operand's shape less its K dim: t broadcast to the
    eq's shape, then each view between the eq and the operand applied to it."""
    tok, views, _, _, (eq_shape, kd) = hot

    def drop(shape, d):
        return tuple(s for i, s in enumerate(shape) if i != d)

    kneg = kd - len(eq_shape)
    t = b.reshape(tok, drop(tok.shape, len(tok.shape) + kneg)) if len(tok.shape) >= -kneg \
        else tok
    t = b.expand(t, drop(eq_shape, kd))
    for v, kv, ks in reversed(views):  # K is dim kv of v, dim ks of its input
        if v.node.op == "permute":
            dims = [d - (d > ks) for i, d in enumerate(v.node.attrs["dims"]) if i != kv]
            t = b.permute(t, dims)
        else:
            t = (b.reshape if v.node.op == "reshape" else b.expand)(t, drop(v.shape, kv))
    return t


def one_hot_product(b: GraphBuilder, x: Value, y: Value, operand: int, hot: tuple) -> Value:
    """x @ y where operand 0 or 1 is one-hot (`one_hot`): with x one-hot, output row m is
    scale * y[t[m] - start] (an embedding lookup), with y one-hot, output column n is
    scale * x[:, t[n] - start]; one `gather` (read inline by whichever kernel reads the
    result) where the index is in [0, K), else zero."""
    k, batch = x.shape[-1], broadcast_shapes(x.shape[:-2], y.shape[:-2])
    m, n = x.shape[-2], y.shape[-1]
    shape = batch + (m, n)
    t = _tokens(b, hot)  # [..., M] or [..., N]
    start, scale = hot[2], hot[3]
    lined = batch + ((m, 1) if operand == 0 else (1, n))
    t = b.reshape(b.expand(t, lined[:-2] + (t.shape[-1],)), lined)
    valid = binary(b, "and", binary(b, "ge", t, start, out_dtype="bool"),
                   binary(b, "le", t, start + k - 1, out_dtype="bool"))  # no overflow
    if start:
        t = binary(b, "sub", t, start)
    other = y if operand == 0 else x
    table = b.expand(other, batch + other.shape[-2:])
    picked = b.gather(table, -2 if operand == 0 else -1, b.expand(t, shape))
    if scale != 1:
        picked = binary(b, "mul", picked, scale)
    return b.ew("where", b.expand(valid, shape), picked, b.scalar(0.0))


# -- sums of a product ------------------------------------------------------------------
def summed_product(b: GraphBuilder, x: Value, dims: list[int],
                   chain: list[Value] | None = None) -> Value | None:
    """The sum of x over `dims` (consecutive, keepdim False) when x is a product's
    output, through reshapes, scalar factors and terms that expand something smaller (a
    bias), and `dims` make up its N dim or its M dim: sum_n (A @ B)[m, n] = sum_k A[m, k]
    * (sum_n B[k, n]), and over m the same with A's column sums; a term adds its own sum
    (of what it expands, times the copies). Two memory-bound reductions (A times B's
    row sums, then over K) replace an M x N x K product whose columns (rows) were only
    to be added up: a linear layer whose outputs are summed (level2/019), a convolution
    averaged over all its positions (level2/003: B is the input's windows, whose sums
    over the positions read the input once per tap). Rounding differs from PyTorch's
    order (the columns of B are added before the products); None for anything else,
    which the caller reduces as it is. `chain` collects x, the product's output and the
    values between them: where the finished graph reads one of them elsewhere, the
    product stays, and GraphBuilder.settle puts the plain reduction back."""
    rank = len(x.shape)
    if (rank < 2 or x.dtype != "f32" or not dims
            or list(dims) != list(range(dims[0], dims[-1] + 1)) or x.node is None):
        return None
    if chain is not None:
        chain.append(x)
    node, kept = x.node, tuple(n for d, n in enumerate(x.shape) if d not in dims)
    if node.op == "ew" and node.attrs["fn"] in ("mul", "div", "add", "sub"):
        fn, (p, q) = node.attrs["fn"], node.inputs
        if fn == "mul" and _unexpanded(p).kind == "scalar":
            p, q = q, p
        if fn == "add" and _small_term(p) and not _small_term(q):
            p, q = q, p
        if fn in ("mul", "div") and _unexpanded(q).kind != "scalar":
            return None
        if fn in ("add", "sub") and not _small_term(q):
            return None
        inner = summed_product(b, p, dims, chain)
        if inner is None:
            return None
        if fn in ("mul", "div"):
            return binary(b, fn, inner, _unexpanded(q))
        return binary(b, fn, inner, _term_sum(b, q, dims, x.shape))
    if node.op == "reshape":  # (row-major: the summed block maps to one of the input's)
        src = node.inputs[0]
        ends = _block_in(x.shape, src.shape, dims)
        if ends is None:
            return None
        inner = summed_product(b, src, list(range(*ends)), chain)
        return None if inner is None else b.reshape(inner, kept)
    if node.op == "matmul" and set(node.attrs) == {"fold"} and list(dims) == [3]:
        return _summed_folded(b, node)
    if node.op != "matmul" or len(node.attrs) or rank != 3:
        return None  # (a banded product, k_from / k_to, keeps its lowering)
    a, w = node.inputs  # [nb, M, K], [nb, K, N]
    nb, m, k = a.shape
    n = w.shape[2]
    if a.dtype != "f32" or w.dtype != "f32":
        return None
    if list(dims) == [2]:  # over N: A's rows times B's row sums, summed over K
        wsum = b.reshape(b.reduce(w, "sum", [2]), (nb, 1, k))
        return b.reduce(binary(b, "mul", a, b.expand(wsum, (nb, m, k))), "sum", [2])
    if list(dims) == [1]:  # over M: A's column sums times B's rows, summed over K
        asum = b.reshape(b.reduce(a, "sum", [1]), (nb, k, 1))
        return b.reduce(binary(b, "mul", b.expand(asum, (nb, k, n)), w), "sum", [1])
    return None


def _summed_folded(b: GraphBuilder, node) -> Value | None:
    """summed_product over the blocks of a folded product (GraphBuilder.folded_matmul:
    a convolution's positions, its batch folded into the columns): out [J, G, M, fold]
    summed over fold is sum_k A[g, m, k] * (sum_q B[g, k, j * fold + q])."""
    a, w = node.inputs  # [G, M, K], [G, K, J * fold]
    if a.dtype != "f32" or w.dtype != "f32":
        return None
    g, m, k = a.shape
    fold = node.attrs["fold"]
    j = w.shape[2] // fold
    wsum = b.reduce(b.reshape(w, (g, k, j, fold)), "sum", [3])  # [G, K, J]
    wsum = b.expand(b.reshape(b.permute(wsum, [2, 0, 1]), (j, g, 1, k)), (j, g, m, k))
    rows = b.expand(b.reshape(a, (1, g, m, k)), (j, g, m, k))
    return b.reduce(binary(b, "mul", rows, wsum), "sum", [3])


def _block_in(shape: tuple, src: tuple, dims: list[int]) -> tuple[int, int] | None:
    """The dims [j0, j1) of `src` that a reshape of src to `shape` turns into the block
    `dims` of shape (the same elements before, within and after it), or None."""
    def prefixes(s):
        out = [1]
        for n in s:
            out.append(out[-1] * n)
        return out

    mine, theirs = prefixes(shape), prefixes(src)
    lo, hi = mine[dims[0]], mine[dims[-1] + 1]
    starts = [j for j, p in enumerate(theirs) if p == lo]
    stops = [j for j, p in enumerate(theirs) if p == hi]
    if not starts or not stops or hi == lo:
        return None
    j0, j1 = starts[-1], stops[0]  # (size-1 dims at the edges left outside the block)
    return (j0, j1) if j0 < j1 else None


def _term_sum(b: GraphBuilder, t: Value, dims: list[int], shape: tuple) -> Value:
    """The sum over `dims` of t (a _small_term of `shape`) as a value of the other dims:
    the sum of what it expands, times the copies the expand made."""
    u = _unexpanded(t)
    kept = tuple(n for d, n in enumerate(shape) if d not in dims)
    count = math.prod(shape[d] for d in dims)
    if u.kind == "scalar":
        return binary(b, "mul", u, float(count))
    u = b.reshape(u, (1,) * (len(shape) - len(u.shape)) + u.shape)  # (broadcast's 1s)
    full = [d for d in dims if u.shape[d] != 1]
    if full:
        u = b.reduce(u, "sum", full, keepdim=True)
    u = b.expand(b.reshape(u, tuple(n for d, n in enumerate(u.shape) if d not in dims)), kept)
    return binary(b, "mul", u, float(count // math.prod(shape[d] for d in full)))


def _small_term(t: Value) -> bool:
    """Whether t (an operand of an elementwise op of x's shape) is a scalar or an f32
    expand of something smaller (a bias): summed_product sums it on its own."""
    u = _unexpanded(t)
    return u.kind == "scalar" or (u is not t and u.dtype == "f32"
                                  and len(u.shape) <= len(t.shape))
