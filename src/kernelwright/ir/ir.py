"""The graph IR: tensors with shapes and dtypes, and the primitive ops that kernels implement.

Capture (capture.py) walks an ATen-level FX graph and, through the op registry
(lower/), rewrites every ATen op into a handful of *primitives* built with
`GraphBuilder`. The primitives are all that the rest of the pipeline knows:

    elementwise  ew        one output element from the same element of each input
    movement     reshape, permute, expand, slice, pad, cat: index maps; gather: an
                 index map that reads its index tensor; window: sliding windows
                 (im2col as a view, out-of-range taps 0)
    index        iota (a value computed from its own index: arange, tril masks)
    templates    reduce, scan, sort, matmul, conv, pool, attention, attention_grad, recur
                 (a first-order linear recurrence; more as kernels are added);
                 materialize: a copy kernel that forces a value into a buffer;
                 put: rows written into a copy of a tensor at run-time positions, by a
                 kernel over the rows alone, over the tensor's own buffer

Movement ops never copy: codegen turns them into index arithmetic inside whatever
kernel reads them. Elementwise ops fuse into their producer or consumer kernel.
Templates are the heavy kernels, one WGSL template each (kernels/*.wgsl).

Every primitive's shape rule lives in its `GraphBuilder` method, so an ATen op's
shape follows from its lowering; capture checks it against the shape PyTorch
recorded, which catches a wrong lowering at compile time rather than as a wrong
answer. Device dtypes are 'f32', 'i32' (int32 and int64 tensors; int64 values must
fit in 32 bits) and 'bool'.

A value with a dimension of size 0 is *empty* (kind 'empty'): no node, no buffer, no
kernel. `_node` makes every primitive whose result is empty one, and refuses an empty
input to a primitive whose result is not; the few that compute something from empty
inputs say so in their methods (`cat` drops them, `reduce` over a zero-size dim gives
its identity, `matmul` with K = 0 zeros, `pad` of an empty value its fill value).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..dtypes import DTYPES
from ..options import CompileOptions

MOVEMENT_OPS = ("reshape", "permute", "expand", "slice", "pad", "cat", "gather", "window")
# the templates whose loaders read an operand along its layout, and the views between
PRODUCT_OPS = ("matmul", "conv", "attention", "attention_grad")
LAYOUT_VIEWS = ("reshape", "permute", "expand", "slice")
TEMPLATE_OPS = ("reduce", "matmul", "conv", "pool", "attention", "attention_grad", "scan", "sort",
                "materialize", "put", "recur")
# A sum of at most this many items per output (split-K's partial products: an RNN
# step's chunks) is computed in their loads by the elementwise and row kernels that
# read it, not by a reduce kernel of its own (`inline_sum`, schedule.recompute_cheap_values,
# codegen.Emitter): the kernel, its buffer's write and the read back go.
INLINE_SUM_MAX = 8
HOST_VALUE_MAX = 1 << 22  # elements of a value GraphBuilder.host_value computes


def inline_sum(node: Node) -> bool:
    """Whether reduce node `node` is a sum its readers may compute inline: f32, at most
    INLINE_SUM_MAX items per output."""
    return (node.op == "reduce" and node.attrs.get("op") == "sum" and node.out.dtype == "f32"
            and node.inputs[0].dtype == "f32" and node.inputs[0].shape[1] <= INLINE_SUM_MAX)


# Inputs one cat kernel reads at most (WebGPU guarantees 8 storage buffers per shader
# stage, the output being one); longer cats are built as a tree of materialized cats
# (a kernel over the device's limit for other reasons is cut by schedule.build_plan).
CAT_FANIN = 7
SCAN_OPS = ("sum", "prod", "max", "min", "logaddexp", "argmax", "argmin")
# A reduction of a few long rows runs in two steps (`reduce_split`): one workgroup per
# row leaves most of the GPU idle (a full sum of 2^28 elements ran in a single
# workgroup) and each invocation added 2^20 elements in a row, so far from fp32 exact
# that the loss problems of the suite failed at full size on the H200.
SPLITTABLE_REDUCTIONS = ("sum", "prod", "max", "min")
SPLIT_BELOW_ROWS = 512  # rows: fewer than this many is "a few"
SPLIT_MIN_PIECE = 4096  # elements: no piece of a split row is shorter
SPLIT_TARGET_ROWS = 2048  # rows of the first step, about (16 workgroups per H200 SM)
# A reduction over a leading dim (a column reduction: neighbouring rows are neighbours in
# memory, the row's elements strided) takes 32 rows per workgroup, so that its loads
# coalesce: fewer than COL_SPLIT_ROWS rows split too, into pieces of at least
# COL_MIN_PIECE elements, laid side by side (the pieces of neighbouring rows stay
# neighbours). A column max of 14336 rows took 448 workgroups, 3.4 per SM of an H200, and
# ran at 72% of the bandwidth the column sums of 16384 rows (512 workgroups) reached.
# Reductions of fewer than COL_SPLIT_MIN elements keep one kernel (a second launch would
# cost more than the first kernel's idle SMs). Measured 2026-12-01l: split into 4, the
# column max 0.304 -> 0.234 ms, but the column sums 0.132 -> 0.139 ms (pieces of 2048).
COL_SPLIT_ROWS = 16384
COL_MIN_PIECE = 4096
COL_SPLIT_MIN = 1 << 22


def reduce_split(o: int, r: int, col: bool = False) -> int:
    """Into how many pieces each of `o` rows of `r` elements is reduced first: a divisor
    of `r` giving about SPLIT_TARGET_ROWS rows in all (COL_SPLIT_ROWS for a column
    reduction, `col`), pieces of at least SPLIT_MIN_PIECE elements (COL_MIN_PIECE); 1 (no
    split) for many rows, short rows, or a row length with no such divisor."""
    below, target, piece = ((COL_SPLIT_ROWS, COL_SPLIT_ROWS, COL_MIN_PIECE) if col else
                            (SPLIT_BELOW_ROWS, SPLIT_TARGET_ROWS, SPLIT_MIN_PIECE))
    if o >= below or r < 2 * piece or (col and o * r < COL_SPLIT_MIN):
        return 1
    most = min(-(-target // o), r // piece)
    return next(s for s in range(most, 0, -1) if r % s == 0)


class CompileError(Exception):
    """An op or input that kernelwright cannot compile, with the user's source line."""


@dataclass(eq=False)
class Value:
    """One tensor: a graph input, a constant, a scalar literal, or a node's output."""

    shape: tuple[int, ...]
    dtype: str
    node: Node | None = None
    kind: str = "node"  # 'input' | 'const' | 'scalar' | 'node' | 'empty' (numel 0)
    name: str = ""
    data: np.ndarray | None = None  # for 'const'
    scalar: float | int | bool | None = None  # for 'scalar'
    # the buffer dtype where it is not `dtype`: a packed half type ('f16', 'bf16') holding
    # an f32 value of the user's float16 or bfloat16 tensor as it is (dtypes.PACKED)
    storage: str = ""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def stored(self) -> str:
        """The dtype of this value's buffer (dtypes.DEVICE_DTYPES)."""
        return self.storage or self.dtype

    def __repr__(self) -> str:
        return f"%{self.name}:{self.dtype}{list(self.shape)}"


@dataclass(eq=False)
class Node:
    op: str
    inputs: list[Value]
    attrs: dict
    out: Value
    source: str = ""  # the user's line this node came from
    # Other lowerings of the op this node computes, for rewrites (optimize/rewrite.py):
    # `lowering` names this node's own, `alternatives` maps another's name to a function
    # (GraphBuilder) -> Value computing the op's result that way, in new nodes. Neither
    # is part of what the node computes (nor of its kernel's key).
    lowering: str = ""
    alternatives: dict = field(default_factory=dict, repr=False)


@dataclass
class Graph:
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    # state written by a call: (a constant, its new value), stored into the constant's
    # buffer after the call's kernels (a buffer mutated in forward, a parameter's update)
    updates: list[tuple[Value, Value]] = field(default_factory=list)
    # inputs a call changes in place: (the input's position in `inputs`, its new value),
    # which the caller writes back into the tensor it passed
    writes: list[tuple[int, Value]] = field(default_factory=list)
    # state another plan updates (compile's share_state) that this one reads, unchanged:
    # read from its buffer at each call, as `updates`' constants are
    shared: list[Value] = field(default_factory=list)
    # the module's checks of values (torch._check, an assert on a tensor): (a bool 0-d
    # value, the message), each computed by the call and raised where false
    checks: list[tuple[Value, str]] = field(default_factory=list)

    def roots(self) -> list[Value]:
        """What a call must compute: the outputs, the updates' and the writes' values,
        the checks."""
        return [*self.outputs, *(new for _, new in self.updates),
                *(new for _, new in self.writes), *(v for v, _ in self.checks)]

    def consumers(self) -> dict[Value, list[Node]]:
        users: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                users.setdefault(v, []).append(n)
        return users


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        sizes = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise CompileError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def promote(*dtypes: str) -> str:
    for d in DTYPES:
        if d in dtypes:
            return d
    raise CompileError(f"unknown dtypes {dtypes}")


def _pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _view_key(v: Value):
    """`v`'s identity up to movement views: a view of the same value the same way, made
    again by each step of a loop (x[:, None, i] unsqueezes x at every step), has the key
    of the first."""
    if v.node is None or v.node.op not in ("reshape", "permute", "expand", "slice", "pad"):
        return id(v)
    return (v.node.op, tuple(_view_key(x) for x in v.node.inputs), v.shape,
            repr(sorted(v.node.attrs.items())))


def _selected(v: Value) -> tuple[Value, int, int] | None:
    """(x, dim, index) where `v` is x[.., index, ..] (a select: a size-1 slice reshaped
    without that dim), or its broadcast (an expand of it)."""
    if v.node is not None and v.node.op == "expand":
        v = v.node.inputs[0]
    s = v.node.inputs[0] if v.node is not None and v.node.op == "reshape" else None
    if s is None or s.node is None or s.node.op != "slice" or s.node.attrs["step"] != 1:
        return None
    d = s.node.attrs["dim"]
    if s.shape[d] != 1 or v.shape != s.shape[:d] + s.shape[d + 1:]:
        return None
    return s.node.inputs[0], d, s.node.attrs["start"]


def _recurrence_steps(n: Node) -> list[tuple]:
    """The readings of node `n` as a step h = A_i * h_prev + B_i of a linear recurrence
    (Graph.linear_recurrences): (key: A, its dim, B, its dim, by `_view_key`; i; h_prev; A;
    its dim; B; its dim), A_i and B_i selects at the same position from the right of h."""
    if n.op != "ew" or n.attrs.get("fn") != "add" or len(n.inputs) != 2 \
            or n.out.dtype != "f32":
        return []
    found = []
    for m, bi in (n.inputs, n.inputs[::-1]):
        if m.node is None or m.node.op != "ew" or m.node.attrs.get("fn") != "mul" \
                or len(m.node.inputs) != 2 or m.shape != n.out.shape:
            continue
        sb = _selected(bi)
        for ai, prev in (m.node.inputs, m.node.inputs[::-1]):
            sa = _selected(ai)
            if sb is None or sa is None or sa[2] != sb[2] or prev.dtype != "f32" \
                    or sa[0].dtype != "f32" or sb[0].dtype != "f32" \
                    or len(sa[0].shape) - sa[1] != len(sb[0].shape) - sb[1] \
                    or len(sa[0].shape) - 1 - sa[1] > len(n.out.shape) \
                    or broadcast_shapes(prev.shape, n.out.shape) != n.out.shape:
                continue
            key = (_view_key(sa[0]), sa[1], _view_key(sb[0]), sb[1])
            found.append((key, sa[2], prev, sa[0], sa[1], sb[0], sb[1]))
    return found


def _producers_first(nodes: list) -> list:
    """`nodes` reordered so that each comes after the nodes computing its inputs, the
    order otherwise kept (a depth-first walk of the inputs, in order)."""
    ours = {id(n) for n in nodes}
    done: set[int] = set()
    order = []
    for top in nodes:
        stack = [(top, False)]
        while stack:
            n, expanded = stack.pop()
            if id(n) in done:
                continue
            if expanded:
                done.add(id(n))
                order.append(n)
                continue
            stack.append((n, True))
            for v in reversed(n.inputs):
                if v.node is not None and id(v.node) in ours and id(v.node) not in done:
                    stack.append((v.node, False))
    return order


class GraphBuilder:
    """Creates primitive nodes; each method is one primitive's shape rule."""

    def __init__(self, options: CompileOptions | None = None,
                 made: dict | None = None) -> None:
        self.graph = Graph()
        # what the compile generates for: lowerings that choose a formulation read it
        # (a large product's cut reads the device's waves: lower/linalg.product_plan)
        self.options = options or CompileOptions()
        self.source = ""  # set by capture to the user's line of the op being lowered
        # random ops (lower/random.py): whether the graph may draw (capture's `random`), its
        # key input (i32 [seed, draw], made at the first draw) and the streams drawn so far
        self.random = False
        self.random_key: Value | None = None
        self.random_streams = 0
        self._count = 0
        # rewrites that hold only while nothing else reads what they skip computing,
        # for the finished graph to settle (`settle`)
        self.tentative: list[tuple] = []
        # constants permuted (permute): one copy per constant and order, however many
        # times it is read that way (a recurrent layer's weights, once per time step)
        self._permuted: dict[tuple[int, tuple[int, ...]], tuple[Value, Value]] = {}
        # constants the graph updates (Graph.updates): read as they are at each call, never
        # folded at compile time (a parameter a training step changes)
        self._state: set[int] = set()
        # products of a value by a constant matrix, recorded by lower/linalg.product for
        # lower/linalg.merge_shared_products (one product for those of one operand)
        self.constant_products: list = []
        # host arrays lowering made from constants (a merged product's weight), by the
        # memory they were made from (`made_from`); compile's share_state hands one plan's
        # to the next plan of the same weights, so that they are made once
        self.made: dict = {} if made is None else made

    def made_from(self, parts: list[np.ndarray], make) -> np.ndarray:
        """`make()`, an array computed from `parts` alone, or the one made before from
        arrays over the same memory in the same layouts (kept with it: that memory is
        not reused while `made` holds it)."""
        key = tuple((a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)
                    for a in parts)
        if key not in self.made:
            self.made[key] = (parts, make())
        return self.made[key][1]

    def _name(self) -> str:
        self._count += 1
        return f"v{self._count}"

    def tentatively(self, value: Value, chain: list[Value], plain) -> Value:
        """`value`, a rewrite that computes without the values of `chain` (a sum of a
        product from its operands, an average pool of a convolution as one
        convolution), kept by `settle` while the finished graph reads chain[0] nowhere
        and each later value of the chain once (by the one before it); else replaced by
        `plain()`, the computation as written, which reads them."""
        self.tentative.append((value, chain, plain))
        return value

    def settle(self, outputs: list[Value]) -> list[Value]:
        """The finished graph's tentative rewrites (`tentatively`) whose skipped values
        it reads elsewhere (a node or one of `outputs`: an instance norm written out
        besides its mean, a convolution returned besides its pool) are replaced by
        their plain computation, since those values are computed anyway (dead-code
        removal then drops the rewrites' nodes). Returns `outputs` with them replaced."""
        reads: dict[int, int] = {}
        for n in self.graph.nodes:
            for v in n.inputs:
                reads[id(v)] = reads.get(id(v), 0) + 1
        for v in outputs:
            reads[id(v)] = reads.get(id(v), 0) + 1
        swap: dict[int, Value] = {}
        for value, chain, plain in self.tentative:
            if reads.get(id(chain[0]), 0) == 0 and all(reads.get(id(c), 0) == 1
                                                        for c in chain[1:]):
                continue
            swap[id(value)] = plain()
        self.tentative.clear()
        return self.replace(swap, outputs)

    def replace(self, swap: dict[int, Value], outputs: list[Value]) -> list[Value]:
        """Every read of a value whose id `swap` maps, by the nodes and in `outputs`,
        made a read of the value it maps to (new nodes, computed later, are ordered before
        their readers). Returns `outputs` with them replaced."""
        if swap:
            for n in self.graph.nodes:
                n.inputs = [swap.get(id(v), v) for v in n.inputs]
            self.graph.nodes = _producers_first(self.graph.nodes)  # (the new nodes came last)
        return [swap.get(id(v), v) for v in outputs]

    def linear_recurrences(self, outputs: list[Value]) -> list[Value]:
        """A first-order linear recurrence unrolled along a dim (a loop over a sequence:
        Mamba's selective scan), h_i = A[.., s + i, ..] * h_(i-1) + B[.., s + i, ..] for i
        = 0..L-1 (L >= 2: `ew` mul and add, either operand order, A's and B's steps selects
        at consecutive indices of the same dim, broadcast to h's shape), made one `recur`
        node computing all h_i stacked along that dim, H; each h_i's readers (and
        `outputs`) read H's slice i instead, and the unrolled nodes go dead. Returns
        `outputs` with them replaced."""
        steps: dict[int, tuple] = {}  # h_i's id: (key, index, h_(i-1), A, dim, B, dim)
        after: dict[int, list] = {}  # h_(i-1)'s id: the steps continuing it
        for n in self.graph.nodes:
            found = _recurrence_steps(n)
            going = [s for s in found if id(s[2]) in steps and s[2].shape == n.out.shape
                     and (steps[id(s[2])][0], steps[id(s[2])][1] + 1) == (s[0], s[1])]
            if going:  # h_(i-1) a step of the same recurrence
                after.setdefault(id(going[0][2]), []).append(n.out)
            if going or found:
                steps[id(n.out)] = (going or found)[0]
        swap: dict[int, Value] = {}
        continued = {id(h) for hs in after.values() for h in hs}
        for n in list(self.graph.nodes):
            if id(n.out) not in steps or id(n.out) in continued:
                continue
            chain = [n.out]
            while after.get(id(chain[-1])):
                chain.append(after[id(chain[-1])][0])
            if len(chain) >= 2:
                swap.update(self._recurrence(chain, [steps[id(h)] for h in chain]))
        return self.replace(swap, outputs)

    def stacked_steps(self, outputs: list[Value]) -> list[Value]:
        """A cat along a dim of L >= 2 pieces of size 1 there (a loop's per-step results
        stacked: a tree of cats, CAT_FANIN, is one) whose pieces are the same computation
        of consecutive size-1 slices of the same values (and of values all steps share),
        made that computation once over the stacked slices, L along a leading dim
        (`_lifted`): the per-step products of a recurrence's h_i by C_i become one batched
        product. Returns `outputs` with the cats replaced."""
        swap: dict[int, Value] = {}
        inner: set[int] = set()
        memo: dict[tuple, Value | None] = {}
        for n in reversed(list(self.graph.nodes)):
            if n.op != "cat" or id(n.out) in inner:
                continue
            d = n.attrs["dim"]
            pieces = self._cat_pieces(n.out, d, inner)
            if len(pieces) < 2 or any(v.shape[d] != 1 or v.shape != pieces[0].shape
                                      for v in pieces):
                continue
            lifted = self._lifted(pieces, memo, set())
            if lifted is None:
                continue
            order = [*range(1, d + 1), 0, *range(d + 1, len(pieces[0].shape) + 1)]
            swap[id(n.out)] = self.reshape(self.permute(lifted, order), n.out.shape)
        return self.replace(swap, outputs)

    def _cat_pieces(self, v: Value, d: int, inner: set[int]) -> list[Value]:
        """The pieces of cat `v` along `d`, through its cats of the same dim and the
        materialized values of its tree (`cat`: CAT_FANIN)."""
        while v.node is not None and v.node.op == "materialize":
            v = v.node.inputs[0]
        node = v.node
        if node is None or node.op != "cat" or node.attrs["dim"] != d:
            return [v]
        inner.add(id(node.out))
        return [p for x in node.inputs for p in self._cat_pieces(x, d, inner)]

    def _lifted(self, vs: list[Value], memo: dict, active: set[int]) -> Value | None:
        """[L, *shape] whose [i] is vs[i] (one shape), computed once for all steps, where
        each vs[i] is the same computation of the values its steps share and of slices
        x[.., s + i, ..] of size 1 of the same x at consecutive indices: movement views,
        ew and matmul nodes with the same attributes. None where they are not (or all
        vs are one value: nothing varies), or where a step reads another's values
        (`active`: those being lifted: an RNN's h_t reads h_(t-1))."""
        key = tuple(id(v) for v in vs)
        if key not in memo:
            if active & set(key):
                return None
            active |= set(key)
            memo[key] = self._lift(vs, memo, active)
            active -= set(key)
        return memo[key]

    def _lift(self, vs: list[Value], memo: dict, active: set[int]) -> Value | None:
        first = vs[0].node
        length = len(vs)
        if first is None or any(v.node is None or v.node.op != first.op or
                                v.shape != vs[0].shape or v.dtype != vs[0].dtype or
                                len(v.node.inputs) != len(first.inputs) for v in vs):
            return None
        out = (length, *vs[0].shape)
        d, start = first.attrs.get("dim"), first.attrs.get("start")
        if first.op == "slice" and all(
                _view_key(v.node.inputs[0]) == _view_key(first.inputs[0])
                and v.node.attrs["dim"] == d and v.node.attrs["start"] == start + i
                and v.shape[d] == 1 for i, v in enumerate(vs)):
            x = first.inputs[0]
            x = self.slice(x, d, start, start + length)
            x = self.permute(x, [d, *(j for j in range(len(x.shape)) if j != d)])
            return self.reshape(x, out)
        if any(v.node.attrs != first.attrs for v in vs):
            return None
        ins: list[Value] = []
        lifted_any = False
        for j, x in enumerate(first.inputs):
            xs = [v.node.inputs[j] for v in vs]
            if all(y is x for y in xs) or all(_view_key(y) == _view_key(x) for y in xs):
                ins.append(x)
                continue
            lifted = self._lifted(xs, memo, active)
            if lifted is None:
                return None
            ins.append(lifted)
            lifted_any = True
        if not lifted_any:
            return None
        varies = [y is not x for y, x in zip(ins, first.inputs)]
        rank = len(out)
        if first.op == "reshape":
            return self.reshape(ins[0], out)
        if first.op == "expand":
            x = ins[0]
            return self.expand(self.reshape(x, (length, *(1,) * (rank - len(x.shape)),
                                                *x.shape[1:])), out)
        if first.op == "permute":
            return self.permute(ins[0], [0, *(d + 1 for d in first.attrs["dims"])])
        if first.op == "slice":
            a = first.attrs
            end = a["start"] + a["step"] * (vs[0].shape[a["dim"]] - 1) + 1
            return self.slice(ins[0], a["dim"] + 1, a["start"], end, a["step"])
        if first.op == "ew":  # a step's value padded to the result's rank after L
            ins = [self.reshape(x, (length, *(1,) * (rank - len(x.shape)), *x.shape[1:]))
                   if vary else x for x, vary in zip(ins, varies)]
            return self._node("ew", ins, out, vs[0].dtype, **first.attrs)
        if first.op == "matmul" and "fold" not in first.attrs:
            return self.matmul(*ins, bounds=first.attrs or None)
        return None

    def _recurrence(self, chain: list[Value], steps: list[tuple]) -> dict[int, Value]:
        """`linear_recurrences`' rewrite of one chain: {h_i's id: H's slice i}."""
        shape = chain[0].shape
        _, start, h0, a, da, b, db = steps[0]
        length = len(chain)
        pos = len(shape) - (len(a.shape) - 1 - da)

        def stacked(x: Value, d: int) -> Value:  # x's steps, broadcast to H [.., L, ..]
            x = self.slice(x, d, start, start + length)
            return self.expand(x, (*shape[:pos], length, *shape[pos:]))
        p, q = math.prod(shape[:pos]), math.prod(shape[pos:])
        h = self.recur(self.reshape(stacked(a, da), (p, length, q)),
                       self.reshape(stacked(b, db), (p, length, q)),
                       self.reshape(self.expand(h0, shape), (p, q)))
        h = self.reshape(h, (*shape[:pos], length, *shape[pos:]))
        return {id(v): self.reshape(self.slice(h, pos, i, i + 1), shape)
                for i, v in enumerate(chain)}

    def single_layouts(self, outputs: list[Value]) -> list[Value]:
        """Each constant held in one layout: where the finished graph reads a constant
        both as it is and transposed on the host (`permute`; tied weights: an embedding's
        table that the output projection reads as a [K, V] operand), or in several
        orders, the first order made (a matmul's operand) is the one uploaded and the
        other reads are views of it, a permute node each (index arithmetic in their
        kernels: an embedding's rows read along a column), not a buffer each. Returns
        `outputs` with them replaced. A layout a product reads (PRODUCT_OPS, through views)
        keeps its buffer: its loads are along that layout."""
        read = {id(v) for v in outputs}  # what computing outputs and the checks reads
        readers: dict[int, list[Node]] = {}
        stack = [v.node for v in [*outputs, *(c for c, _ in self.graph.checks)] if v.node]
        done: set[int] = set()
        while stack:
            n = stack.pop()
            if id(n) not in done:
                done.add(id(n))
                read.update(id(v) for v in n.inputs)
                for v in n.inputs:
                    readers.setdefault(id(v), []).append(n)
                stack.extend(v.node for v in n.inputs if v.node is not None)

        def product_operand(v: Value) -> bool:  # read by a product's loader, through views
            return any(n.op in PRODUCT_OPS or (n.op in LAYOUT_VIEWS and
                                                 product_operand(n.out))
                       for n in readers.get(id(v), ()))

        layouts: dict[int, list[tuple[tuple[int, ...], Value]]] = {}
        for (xid, dims), (x, permuted) in self._permuted.items():
            layouts.setdefault(xid, [((*range(len(x.shape)),), x)]).append((dims, permuted))
        swap: dict[int, Value] = {}
        for orders in layouts.values():
            live = [(dims, v) for dims, v in orders if id(v) in read]
            if len(live) < 2:
                continue
            kept_dims, kept = next((d, v) for d, v in live if v is not orders[0][1])
            inverse = [kept_dims.index(i) for i in range(len(kept_dims))]
            for dims, v in live:
                # a product's operand keeps its own layout (its loads along it); any other
                # read, an embedding's rows, is a view: v = x.permute(dims) =
                # kept.permute(inverse).permute(dims)
                if v is not kept and not product_operand(v):
                    order = [inverse[d] for d in dims]
                    swap[id(v)] = self._node("permute", [kept], v.shape, v.dtype, dims=order)
        return self.replace(swap, outputs)

    def is_state(self, v: Value) -> bool:
        """Whether constant `v` is state the graph updates (read at each call, never
        folded or copied at compile time)."""
        return id(v) in self._state

    def _node(self, prim: str, inputs: list[Value], shape, dtype: str, **attrs) -> Value:
        """The node computing primitive `prim`; an empty value (module docstring) where
        its result is empty, which nothing computes."""
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) == 0:
            return self.empty(shape, dtype)
        empty = [v for v in inputs if v.kind == "empty"]
        if empty:
            raise CompileError(f"{prim} of the empty tensor {list(empty[0].shape)} (a "
                               f"dimension of size 0) into {list(shape)} is not supported")
        out = Value(shape, dtype, name=self._name())
        node = Node(prim, list(inputs), attrs, out, self.source)
        out.node = node
        self.graph.nodes.append(node)
        return out

    # -- leaves ---------------------------------------------------------------------------
    def input(self, shape, dtype: str, name: str) -> Value:
        v = Value(tuple(shape), dtype, kind="input", name=name)
        self.graph.inputs.append(v)
        return v

    def empty(self, shape, dtype: str) -> Value:
        """A value of `shape`, which has a dimension of size 0 (module docstring)."""
        return Value(tuple(shape), dtype, kind="empty", name=self._name())

    def const(self, array: np.ndarray, dtype: str, name: str = "", state: bool = False) -> Value:
        """A constant tensor; a 0-d one is a literal unless it is `state` (a buffer the
        graph updates, which needs a buffer of its own), an empty one an empty value."""
        if array.size == 0 and not state:
            return self.empty(array.shape, dtype)
        if array.ndim == 0 and not state:
            return self.scalar(array.item(), dtype)
        v = Value(tuple(array.shape), dtype, kind="const", name=name or self._name(), data=array)
        if state:
            self._state.add(id(v))
        return v

    def scalar(self, x, dtype: str | None = None) -> Value:
        if dtype is None:
            dtype = "bool" if isinstance(x, bool) else "i32" if isinstance(x, int) else "f32"
        return Value((), dtype, kind="scalar", name=self._name(), scalar=x)

    # -- elementwise ----------------------------------------------------------------------
    def ew(self, fn: str, *args: Value, dtype: str | None = None, **params) -> Value:
        """Elementwise `fn` (a key of codegen.OPS) with broadcasting; dtype defaults to the
        promoted input dtype."""
        shape = broadcast_shapes(*(a.shape for a in args))
        args = tuple(self.expand(a, shape) for a in args)
        return self._node("ew", list(args), shape, dtype or promote(*(a.dtype for a in args)),
                          fn=fn, **params)

    def cast(self, x: Value, dtype: str) -> Value:
        return x if x.dtype == dtype else self.ew("cast", x, dtype=dtype)

    # -- movement -------------------------------------------------------------------------
    def reshape(self, x: Value, shape) -> Value:
        shape = list(shape)
        if -1 in shape:
            i = shape.index(-1)
            rest = math.prod(s for j, s in enumerate(shape) if j != i)
            shape[i] = x.numel // rest if rest else 0
        if math.prod(shape) != x.numel:
            raise CompileError(f"cannot reshape {list(x.shape)} to {shape}")
        if tuple(shape) == x.shape:
            return x
        if x.kind == "scalar":
            return self.expand(x, shape)
        return self._node("reshape", [x], shape, x.dtype)

    def permute(self, x: Value, dims) -> Value:
        dims = [d % len(x.shape) for d in dims] if x.shape else []
        if dims == list(range(len(dims))):
            return x
        if x.kind == "const" and id(x) not in self._state:
            # a model's weight, transposed once on the host (nn.Linear's [N, K] becomes a
            # [K, N] operand that the matmul loads 16 bytes at a time along N and stages
            # without transposing): a view here, copied where its bytes are written (the
            # upload, a merged product's weight), so a plan sharing another's weights
            # (compile's share_state) finds them by their memory without copying them
            # again; a constant the graph updates is permuted at each call
            key = (id(x), tuple(dims))
            if key not in self._permuted:  # the constant kept too: its id stays its own
                permuted = self.const(np.transpose(x.data, dims), x.dtype)
                permuted.storage = x.storage  # the same values: stored as the weight is
                self._permuted[key] = (x, permuted)
            return self._permuted[key][1]
        return self._node("permute", [x], [x.shape[d] for d in dims], x.dtype, dims=dims)

    def transpose(self, x: Value, a: int, b: int) -> Value:
        dims = list(range(len(x.shape)))
        dims[a], dims[b] = dims[b], dims[a]
        return self.permute(x, dims)

    def expand(self, x: Value, shape) -> Value:
        shape = tuple(int(s) for s in shape)
        shape = tuple(x.shape[i - len(shape) + len(x.shape)] if s == -1 else s
                      for i, s in enumerate(shape))
        if x.shape == shape:
            return x
        if len(shape) < len(x.shape) or broadcast_shapes(x.shape, shape) != shape:
            raise CompileError(f"cannot expand {list(x.shape)} to {list(shape)}")
        return self._node("expand", [x], shape, x.dtype)

    def slice(self, x: Value, dim: int, start: int, end: int, step: int = 1) -> Value:
        dim %= len(x.shape)
        size = x.shape[dim]
        start = max(0, min(size, start + size if start < 0 else start))
        end = max(start, min(size, end + size if end < 0 else end))
        n = (end - start + step - 1) // step
        if start == 0 and n == size and step == 1:
            return x
        shape = list(x.shape)
        shape[dim] = n
        return self._node("slice", [x], shape, x.dtype, dim=dim, start=start, step=step)

    def pad(self, x: Value, pads: list[tuple[int, int]], value: float = 0.0) -> Value:
        """pads: (before, after) per dim, for every dim of x; negative values crop."""
        for d, (lo, hi) in enumerate(pads):  # crops first, as slices
            if lo < 0 or hi < 0:
                x = self.slice(x, d, max(0, -lo), x.shape[d] - max(0, -hi))
        pads = [(max(0, lo), max(0, hi)) for lo, hi in pads]
        if all(p == (0, 0) for p in pads):
            return x
        shape = [s + lo + hi for s, (lo, hi) in zip(x.shape, pads)]
        if x.kind == "empty":  # nothing but padding
            fill = {"f32": float, "i32": int, "bool": bool}[x.dtype](value)
            return self.expand(self.scalar(fill, x.dtype), shape)
        return self._node("pad", [x], shape, x.dtype, pads=pads, value=value)

    def cat(self, xs: list[Value], dim: int) -> Value:
        """xs joined along `dim`, in the dtype promoted from all of them. An empty input
        adds nothing, and a 1-d [0] one (PyTorch's legacy empty tensor) need not have the
        others' shape, as PyTorch's cat."""
        dtype = promote(*(x.dtype for x in xs))
        shaped = [x for x in xs if x.shape != (0,)] or xs[:1]
        dim %= len(shaped[0].shape)
        shape = list(shaped[0].shape)
        shape[dim] = sum(x.shape[dim] for x in shaped)
        xs = [self.cast(x, dtype) for x in shaped if x.kind != "empty"]
        if len(xs) <= 1:
            return xs[0] if xs else self.empty(shape, dtype)
        if len(xs) > CAT_FANIN:  # e.g. the per-timestep outputs of an unrolled RNN
            parts = [self.materialize(self.cat(xs[i:i + CAT_FANIN], dim))
                     for i in range(0, len(xs), CAT_FANIN)]
            return self.cat(parts, dim)
        return self._node("cat", xs, shape, dtype, dim=dim)

    def window(self, x: Value, kernel, stride, padding, dilation, out=None) -> Value:
        """Sliding windows over the last nd = len(kernel) dims of x, as a view (im2col
        without the copy): x [..., *S] gives [..., *K, *O] with
            out[..., k, o] = x[..., o * stride - padding + k * dilation]
        per windowed dim where that index is inside x, else 0. padding (before; negative
        crops) pads both ends unless `out` gives the output sizes explicitly. The
        windowed view of a 1 x 1 kernel with unit stride and no padding is x itself."""
        nd = len(kernel)
        if nd < 1 or nd > len(x.shape):
            raise CompileError(f"window of {nd} dims over {list(x.shape)}")
        kernel, stride, padding, dilation = (
            [int(v) for v in vals] for vals in (kernel, stride, padding, dilation))
        if not all(len(v) == nd for v in (stride, padding, dilation)):
            raise CompileError(f"window parameters need {nd} entries each: stride {stride}, "
                               f"padding {padding}, dilation {dilation}")
        if min(kernel + stride + dilation) < 1:
            raise CompileError(f"window kernel {kernel} / stride {stride} / dilation "
                               f"{dilation} below 1")
        lead, size = x.shape[:len(x.shape) - nd], x.shape[len(x.shape) - nd:]
        if out is None:
            out = [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, p, d, k, s in
                   zip(size, padding, dilation, kernel, stride)]
        out = [int(o) for o in out]
        if len(out) != nd or min(out) < 1:
            raise CompileError(f"window output size {out} is empty (input {list(size)}, "
                               f"kernel {kernel})")
        shape = (*lead, *kernel, *out)
        if list(out) == list(size) and set(kernel + stride) == {1} and not any(padding):
            return self.reshape(x, shape)
        return self._node("window", [x], shape, x.dtype, kernel=kernel, stride=stride,
                          padding=padding, dilation=dilation)

    def materialize(self, x: Value) -> Value:
        """x written to a buffer by a copy kernel of its own, which its readers then read
        instead of computing x inline: bounds how many buffers one kernel binds."""
        if x.kind != "node":
            return x
        return self._node("materialize", [x], x.shape, x.dtype)

    def put(self, x: Value, dim: int, index: Value, v: Value) -> Value:
        """x with its slices index[k] along `dim` replaced by v's slices k (index_copy):
        index is 1-d [K] (i32, negative positions count from the end, positions outside
        x's dim write nothing), v is x's shape with K along dim. Of several writers of
        one position the last (the largest k) wins: deterministic, where PyTorch leaves
        duplicates undefined. Its kernel (kernels/put.py) walks v's elements only and
        stores them into the buffer holding x, which the scheduler makes the output's
        (x itself where x is a state this put updates, else a copy of x: schedule.put_homes)."""
        dim %= len(x.shape)
        if len(index.shape) != 1 or index.dtype != "i32":
            raise CompileError(f"put positions must be a 1-d integer tensor, not "
                               f"{index.dtype}{list(index.shape)}")
        want = tuple(index.shape[0] if d == dim else s for d, s in enumerate(x.shape))
        if v.shape != want or v.dtype != x.dtype:
            raise CompileError(f"put of {v.dtype}{list(v.shape)} into {x.dtype}"
                               f"{list(x.shape)} along dim {dim}: expected {list(want)}")
        return self._node("put", [x, index, v], x.shape, x.dtype, dim=dim)

    def gather(self, x: Value, dim: int, index: Value) -> Value:
        """out[..., i_dim, ...] = x[..., index[..., i_dim, ...], ...] (torch.gather): the
        output has index's shape, and index is read inside the consumer's index arithmetic.
        Indices are clamped into x's dim (PyTorch raises on out-of-range ones)."""
        if len(index.shape) != len(x.shape) or not x.shape:
            raise CompileError(f"gather of {list(x.shape)} with index {list(index.shape)}: "
                               "ranks differ or are 0")
        dim %= len(x.shape)
        if any(i > s for d, (i, s) in enumerate(zip(index.shape, x.shape)) if d != dim):
            raise CompileError(f"gather index {list(index.shape)} larger than "
                               f"{list(x.shape)} outside dim {dim}")
        if index.dtype != "i32":
            raise CompileError(f"gather index must be an integer tensor, not {index.dtype}")
        return self._node("gather", [x, index], index.shape, x.dtype, dim=dim)

    # -- templates ------------------------------------------------------------------------
    def _rows(self, x: Value, dims) -> tuple[Value, Value, list[int], list[int], bool]:
        """x seen as O rows of R for a reduction over `dims` (all dims when empty): x (a
        scalar expanded to [1]), x2 = x's kept dims then its reduced dims as [O, R], the
        reduced dims, the kept dims' sizes, and whether the last dim is kept (the rows
        strided in memory)."""
        rank = len(x.shape)
        dims = sorted({d % rank for d in dims}) if dims else list(range(rank))
        keep = [d for d in range(rank) if d not in dims]
        outer = [x.shape[d] for d in keep]
        r = math.prod(x.shape[d] for d in dims)
        if x.kind == "scalar":
            x = self.expand(x, (1,))
            keep, dims, outer = [], [0], []
        x2 = self.reshape(self.permute(x, keep + dims), (math.prod(outer), r))
        return x, x2, dims, outer, bool(keep) and keep[-1] == rank - 1

    def reduce(self, x: Value, op: str, dims, keepdim: bool = False,
               identity: int | None = None) -> Value:
        """op in sum, prod, max, min, argmax, argmin over `dims` (all dims when empty).
        Over a zero-size dim each result is `identity`, by default the op's own (sum 0,
        prod 1; the others have none: a CompileError, as PyTorch's), given where the
        caller knows one (any: the max of values 0 and 1 is 0 over nothing)."""
        x, x2, dims, outer, col = self._rows(x, dims)
        o, r = x2.shape
        dtype = "i32" if op in ("argmax", "argmin") else ("i32" if x.dtype == "bool" else x.dtype)
        split = reduce_split(o, r, col) if op in SPLITTABLE_REDUCTIONS else 1
        if r == 0 and o > 0:  # over a zero-size dim: the identity, as PyTorch
            one = {"sum": 0, "prod": 1}.get(op) if identity is None else identity
            if one is None:
                raise CompileError(f"{op} over a zero-size dimension of {list(x.shape)}: "
                                   "it has no identity")
            x2 = self.expand(self.scalar(float(one) if dtype == "f32" else one, dtype), (o,))
        elif split > 1 and col:  # S partials per row first, piece s of row i at s * o + i
            pieces = self.permute(self.reshape(x2, (o, split, r // split)), [1, 0, 2])
            x2 = self._node("reduce", [self.reshape(pieces, (split * o, r // split))],
                            (split * o,), dtype, op=op)
            x2 = self.permute(self.reshape(x2, (split, o)), [1, 0])
        elif split > 1:  # S partials per row first, then the partials
            x2 = self._node("reduce", [self.reshape(x2, (o * split, r // split))],
                            (o * split,), dtype, op=op)
            x2 = self.reshape(x2, (o, split))
        y = x2 if r == 0 else self._node("reduce", [x2], (o,), dtype, op=op)
        shape = [1 if d in dims else s for d, s in enumerate(x.shape)] if keepdim else outer
        return self.reshape(y, shape)

    def moments(self, x: Value, dims) -> tuple[Value, Value] | None:
        """The mean and the sum of squared deviations from it (M2) of f32 x over `dims`,
        each [O] for the O = prod(kept dims) rows, from one read of x: a `reduce` node of
        op "moments" stores both per row (a [rows, 2] value: each vector's own moments
        folded in by Welford's update, Chan's combine between invocations). Few long
        rows are split as `reduce` splits them: the pieces' moments, then their
        combination (pieces of equal count L: mean = the pieces' mean; M2 = sum(M2_p +
        L (mean_p - mean)^2)). None for a reduction over a leading dim (strided rows),
        which reduce's column order serves."""
        if x.dtype != "f32" or x.kind == "scalar":
            return None
        _, x2, _, _, col = self._rows(x, dims)
        if col:
            return None
        o, r = x2.shape
        split = reduce_split(o, r)
        m = self._node("reduce", [self.reshape(x2, (o * split, r // split))], (o * split, 2),
                       "f32", op="moments")
        mean = self.reshape(self.slice(m, 1, 0, 1), (o, split))
        m2 = self.reshape(self.slice(m, 1, 1, 2), (o, split))
        if split == 1:
            return self.reshape(mean, (o,)), self.reshape(m2, (o,))
        total = self.reduce(self.ew("mul", mean, self.scalar(1.0 / split)), "sum", [1])
        d = self.ew("sub", mean, self.reshape(total, (o, 1)))
        spread = self.ew("add", m2, self.ew("mul", self.ew("mul", d, d),
                                            self.scalar(float(r // split))))
        return total, self.reduce(spread, "sum", [1])

    def scan(self, x: Value, op: str, dim: int) -> Value:
        """Inclusive scan of x along `dim`: op in sum, prod, max, min, logaddexp, or
        argmax/argmin (the index of the running max/min, ties going to the later element,
        as torch.cummax/cummin). The node sees x as [A, R, B], R the scanned dim (a
        reshape that costs nothing), and stores in that layout, so it needs no permutes.
        bool inputs scan as i32."""
        if op not in SCAN_OPS:
            raise CompileError(f"scan op '{op}' is not one of {SCAN_OPS}")
        shape = x.shape
        if not shape:
            x = self.reshape(x, (1,))
        dim %= len(x.shape)
        a, r = math.prod(x.shape[:dim]), x.shape[dim]
        x3 = self.reshape(x, (a, r, math.prod(x.shape[dim + 1:])))
        if op == "logaddexp" and x.dtype != "f32":
            raise CompileError(f"logaddexp scan of a {x.dtype} tensor")
        dtype = "i32" if op in ("argmax", "argmin") or x.dtype == "bool" else x.dtype
        y = self._node("scan", [x3], x3.shape, dtype, op=op)
        return self.reshape(y, shape)

    def recur(self, a: Value, b: Value, h0: Value) -> Value:
        """The first-order linear recurrence h_r = a_r * h_(r-1) + b_r along R of a and b
        [P, R, Q] (f32), h_(-1) = h0 [P, Q]: every h_r, [P, R, Q] (kernels/recur.py: one
        invocation per (p, q), walking R in order)."""
        p, r, q = a.shape
        if len(a.shape) != 3 or b.shape != a.shape or h0.shape != (p, q) or \
                {a.dtype, b.dtype, h0.dtype} != {"f32"}:
            raise CompileError(f"recurrence of {a!r}, {b!r} from {h0!r}")
        return self._node("recur", [a, b, h0], a.shape, "f32")

    def sort(self, x: Value, dim: int, descending: bool = False,
             k: int | None = None) -> tuple[Value, Value]:
        """Stable sort of x along `dim` (ascending, or `descending`; NaN is the largest
        value, ties keep their order, as torch.sort(stable=True)): the values and the
        indices (i32) of the first `k` (None: all) of each row. The node sees x as
        [A, R, B] and stores the indices [A, k, B]; the values are x gathered at them."""
        shape = x.shape
        if not shape:
            x = self.reshape(x, (1,))
        dim %= len(x.shape)
        a, r = math.prod(x.shape[:dim]), x.shape[dim]
        k = r if k is None else int(k)
        if not 1 <= k <= r:
            raise CompileError(f"the first {k} of a sort of {r} elements")
        x3 = self.reshape(x, (a, r, math.prod(x.shape[dim + 1:])))
        idx = self._node("sort", [x3], (a, k, x3.shape[2]), "i32",
                         descending=bool(descending), k=k)
        idx = self.reshape(idx, (*x.shape[:dim], k, *x.shape[dim + 1:]))
        values = self.gather(x, dim, idx)
        if not shape:
            return self.reshape(values, ()), self.reshape(idx, ())
        return values, idx

    def sort_pass(self, x: Value, stage: str, *, chunk: int = 0, padded: int = 0,
                  descending: bool = False, half: int = 0, mask: int = 0) -> Value:
        """One pass of the sort of rows longer than one workgroup holds (lower/sorting.py
        builds the passes). Its result holds each row's P (key, index) pairs as i32
        [A, 2 * P, B]: pair i's key (a u32 whose order is the values', kernels/sort.wgsl)
        at 2 * i, its index at 2 * i + 1. "chunks": the rows of x [A, R, B] padded to
        `padded` (P, a power of two) with pairs that sort last, each `chunk` of P sorted by
        (key, index), the keys inverted where `descending`; "merge" (x: pairs): pair i, bit
        `half` clear, compared with pair i ^ `mask` (`half` itself, or 2 * half - 1: its
        mirror in its block of 2 * half), the smaller kept at i; "bitonic" (x: pairs):
        each `chunk` of pairs, a bitonic sequence, sorted."""
        if len(x.shape) != 3:
            raise CompileError(f"sort pass over {list(x.shape)}, not [A, R, B]")
        a, r, inner = x.shape
        if stage == "chunks":
            if not (_pow2(chunk) and _pow2(padded) and chunk <= padded and r <= padded):
                raise CompileError(f"sort chunks of {chunk} of rows of {r} padded to {padded}")
            return self._node("sort", [x], (a, 2 * padded, inner), "i32", stage=stage,
                              chunk=chunk, padded=padded, descending=bool(descending))
        if x.dtype != "i32" or r % 2 or not _pow2(r // 2):
            raise CompileError(f"sort pass over {x.dtype}{list(x.shape)}: not pairs")
        if stage == "merge" and _pow2(half) and mask in (half, 2 * half - 1) \
                and 2 * half <= r // 2:
            return self._node("sort", [x], x.shape, "i32", stage=stage, half=half, mask=mask)
        if stage == "bitonic" and _pow2(chunk) and chunk <= r // 2:
            return self._node("sort", [x], x.shape, "i32", stage=stage, chunk=chunk)
        raise CompileError(f"sort pass {stage} (chunk {chunk}, half {half}, mask {mask}) "
                           f"over pairs {list(x.shape)}")

    def matmul(self, a: Value, b: Value, bounds: dict | None = None) -> Value:
        """Batched matrix product of a [..., M, K] and b [..., K, N], batch dims broadcast.
        `bounds` (lower/linalg.k_range): the K range outside which an operand is zero, as
        `k_from` / `k_to` terms; the kernel's tiles skip the rest of K."""
        if a.shape[-1] != b.shape[-2]:
            raise CompileError(f"matmul shapes {list(a.shape)} @ {list(b.shape)}")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = self.expand(a, batch + a.shape[-2:])
        b = self.expand(b, batch + b.shape[-2:])
        nb = math.prod(batch)
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        dtype = promote(a.dtype, b.dtype)
        if k == 0:  # an empty sum
            return self.expand(self.scalar(0.0 if dtype == "f32" else 0, dtype), batch + (m, n))
        a3, b3 = self.reshape(a, (nb, m, k)), self.reshape(b, (nb, k, n))
        y = self._node("matmul", [a3, b3], (nb, m, n), dtype, **(bounds or {}))
        return self.reshape(y, batch + (m, n))

    def folded_matmul(self, a: Value, b: Value, fold: int) -> Value:
        """The product of a [G, M, K] and b [G, K, J * fold] whose columns are J blocks
        of `fold` (a convolution's batch entries times its positions), stored block by
        block: out [J, G, M, fold], out[j, g, m, q] = (a[g] @ b[g])[m, j * fold + q]. One
        GEMM of J * fold columns per g whose tiles cross the blocks (the matmul node's
        `fold`: its kernel stores each element at its place in [J, G, M, fold])."""
        if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[0] != b.shape[0] \
                or a.shape[2] != b.shape[1] or fold < 1 or b.shape[2] % fold:
            raise CompileError(f"folded matmul shapes {list(a.shape)} @ {list(b.shape)}, "
                               f"blocks of {fold}")
        nb, m, n = a.shape[0], a.shape[1], b.shape[2]
        return self._node("matmul", [a, b], (n // fold, nb, m, fold), promote(a.dtype, b.dtype),
                          fold=int(fold))

    def attention(self, q: Value, k: Value, v: Value, mask: Value | None = None,
                  causal: bool = False, scale: float = 1.0, split: int = 1,
                  lse: bool = False) -> Value:
        """Scaled dot-product attention softmax(q k^T * scale + mask) v of q [B, L, E],
        k [B, S, E], v [B, S, Ev] (B: batch times heads); mask, when given, is an
        additive f32 [B, L, S] (usually an expand of something smaller, which the
        kernel's loader reads for free). causal keeps key j for query i only when
        j <= i. A query row whose keys are all masked gives zeros, as PyTorch. With
        `split` > 1 the keys are cut into that many spans and the value is each span's
        part, [B, L, split * (Ev + 2)]: per span its unnormalized output (Ev), the
        scores' maximum and the sum of their exp(score - maximum), which the caller
        combines (lower/attention.py). With `lse` the value is flat, [B * L * (Ev + 1)]:
        the output [B, L, Ev], then each row's log-sum-exp of its scores [B, L] (-inf
        where all are masked, what `attention_grad` reads): both views of it read in
        their buffer's order, so that no reader needs a copy."""
        if len(q.shape) != 3 or len(k.shape) != 3 or len(v.shape) != 3:
            raise CompileError(f"attention wants 3-d q, k, v, got {list(q.shape)}, "
                               f"{list(k.shape)}, {list(v.shape)}")
        bh, lq, e = q.shape
        if k.shape[0] != bh or v.shape[0] != bh or k.shape[2] != e or v.shape[1] != k.shape[1]:
            raise CompileError(f"attention shapes q {list(q.shape)}, k {list(k.shape)}, "
                               f"v {list(v.shape)} do not match")
        inputs = [self.cast(q, "f32"), self.cast(k, "f32"), self.cast(v, "f32")]
        if mask is not None:
            inputs.append(self.expand(self.cast(mask, "f32"), (bh, lq, k.shape[1])))
        if split > 1 and lse:
            raise CompileError("attention's log-sum-exp is of the whole row, not of spans")
        if split > 1:
            return self._node("attention", inputs, (bh, lq, split * (v.shape[2] + 2)), "f32",
                              causal=bool(causal), scale=float(scale), masked=mask is not None,
                              split=int(split))
        if lse:
            return self._node("attention", inputs, (bh * lq * (v.shape[2] + 1),), "f32",
                              causal=bool(causal), scale=float(scale), masked=mask is not None,
                              lse=True)
        return self._node("attention", inputs, (bh, lq, v.shape[2]), "f32", causal=bool(causal),
                          scale=float(scale), masked=mask is not None)

    def attention_grad(self, q: Value, k: Value, v: Value, grad: Value, lse: Value,
                       delta: Value, mask: Value | None, causal: bool, scale: float,
                       wrt: str) -> Value:
        """The gradient of `attention` (flash attention's backward): q [B, L, E], k
        [Bk, S, E], v [Bk, S, Ev] with B a multiple of Bk (grouped-query attention: query
        batch-head b reads key/value batch-head b // (B / Bk)), the output's gradient
        grad [B, L, Ev], the rows' log-sum-exp lse [B, L] (attention's with `lse`),
        delta [B, L] = rowsum(grad * output), an additive mask [B, L, S] or None. Each
        kernel computes the scores again block by block, P = exp(S - lse), dP = grad V^T,
        dS = P * (dP - delta), nothing L x S stored. wrt "q": dQ = dS K * scale, [B, L,
        E]; wrt "kv": [Bk, S, E + Ev], dK = dS^T Q * scale then dV = P^T grad, summed over
        the query heads that share a key/value head."""
        if any(len(x.shape) != 3 for x in (q, k, v, grad)) or len(lse.shape) != 2 \
                or len(delta.shape) != 2:
            raise CompileError("attention_grad wants 3-d q, k, v, grad and 2-d lse, delta")
        bh, lq, e = q.shape
        bk, s, ev = v.shape
        if k.shape != (bk, s, e) or bh % bk or grad.shape != (bh, lq, ev) \
                or lse.shape != (bh, lq) or delta.shape != (bh, lq) or wrt not in ("q", "kv"):
            raise CompileError(f"attention_grad shapes q {list(q.shape)}, k {list(k.shape)}, "
                               f"v {list(v.shape)}, grad {list(grad.shape)}, lse "
                               f"{list(lse.shape)}, delta {list(delta.shape)} ({wrt})")
        inputs = [self.cast(x, "f32") for x in (q, k, v, grad, lse, delta)]
        if mask is not None:
            inputs.append(self.expand(self.cast(mask, "f32"), (bh, lq, s)))
        shape = (bh, lq, e) if wrt == "q" else (bk, s, e + ev)
        return self._node("attention_grad", inputs, shape, "f32", causal=bool(causal),
                          scale=float(scale), masked=mask is not None, wrt=wrt)

    # -- index ----------------------------------------------------------------------------
    def iota(self, shape, dim: int, start=0, step=1, dtype: str = "i32") -> Value:
        """A tensor of `shape` whose element at index i is start + i[dim] * step: arange,
        and the row/column indices that triangular and diagonal masks compare."""
        shape = tuple(int(s) for s in shape)
        dim %= len(shape)
        if dtype not in ("i32", "f32"):
            raise CompileError(f"iota of dtype {dtype}")
        return self._node("iota", [], shape, dtype, dim=dim, start=start, step=step)

    def flip(self, x: Value, dims) -> Value:
        """Reverse x along `dims`: a slice with step -1, index arithmetic only."""
        for d in sorted({d % len(x.shape) for d in dims}):
            if x.shape[d] > 1:
                x = self._node("slice", [x], x.shape, x.dtype, dim=d, start=x.shape[d] - 1,
                               step=-1)
        return x

    # -- values known at compile time -----------------------------------------------------
    def host_value(self, v: Value, limit: int = HOST_VALUE_MAX) -> np.ndarray | None:
        """v's elements computed here, when v is built only from aranges (iota),
        literals, constants the graph never updates, views and the elementwise ops of
        HOST_EW, every value on the way of at most `limit` elements; None otherwise. The
        index a nearest upsampling's gradient writes at (floor of an arange times the
        scale) is one: its writes can then be planned on the host (movement.scatter_rows).
        f32 arithmetic is numpy's float32 (IEEE, correctly rounded as PyTorch's)."""
        # post-order over an explicit stack (no recursion: a chain of thousands of ops,
        # as an unrolled recurrence writes, is as good as a short one)
        memo: dict[int, np.ndarray | None] = {}
        stack = [v]
        while stack:
            x = stack[-1]
            if id(x) in memo:
                stack.pop()
                continue
            operands = _host_operands(x, limit)
            if any(id(i) in memo and memo[id(i)] is None for i in operands):
                stack.pop()
                memo[id(x)] = None
                continue
            todo = [i for i in operands if id(i) not in memo]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            memo[id(x)] = _host_node(x, [memo[id(i)] for i in operands], self._state, limit)
        return memo[id(v)]

    def conv(self, x: Value, w: Value, stride, padding, dilation, groups: int,
             transposed: bool = False, output_padding=None) -> Value:
        """Convolution (cross-correlation, as PyTorch) of x [N, C, *S] over its 1 to 3
        spatial dims with w [CO, C / groups, *K], or for a transposed convolution with
        w [C, CO / groups, *K]. stride, padding, dilation and output_padding have one
        entry per spatial dim. The node is always 3-d (x [N, C, D, H, W]): lower ranks
        get unit leading spatial dims, by reshapes that cost nothing."""
        nd = len(x.shape) - 2
        if nd not in (1, 2, 3) or len(w.shape) != nd + 2:
            raise CompileError(f"convolution of {list(x.shape)} with weight {list(w.shape)}: "
                               "need x [N, C, *S] and w [*, *, *K] with 1 to 3 spatial dims")
        n, c, *size = x.shape
        kernel = list(w.shape[2:])
        output_padding = output_padding if transposed else [0] * nd
        stride, padding, dilation, output_padding = (
            [int(v) for v in vals] for vals in (stride, padding, dilation, output_padding))
        if not all(len(v) == nd for v in (stride, padding, dilation, output_padding)):
            raise CompileError(f"convolution parameters need {nd} entries each: stride "
                               f"{stride}, padding {padding}, dilation {dilation}")
        if min(stride + dilation) < 1 or min(padding + output_padding) < 0:
            raise CompileError(f"convolution stride {stride} / dilation {dilation} below 1 "
                               f"or padding {padding} negative")
        if groups < 1 or c % groups:
            raise CompileError(f"convolution: {c} input channels in {groups} groups")
        if transposed:
            if w.shape[0] != c:
                raise CompileError(f"transposed convolution channels: input {c}, weight "
                                   f"{list(w.shape)}")
            co = w.shape[1] * groups
            out = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, s, p, d, k, op in
                   zip(size, stride, padding, dilation, kernel, output_padding)]
        else:
            if w.shape[1] * groups != c or w.shape[0] % groups:
                raise CompileError(f"convolution channels: input {c}, weight {list(w.shape)}, "
                                   f"groups {groups}")
            co = w.shape[0]
            out = [(i + 2 * p - d * (k - 1) - 1) // s + 1
                   for i, s, p, d, k in zip(size, stride, padding, dilation, kernel)]
        if min(out) < 1:
            raise CompileError(f"convolution output size {out} is empty (input {size}, "
                               f"kernel {kernel})")
        lift = 3 - nd
        x = self.reshape(x, (n, c, *[1] * lift, *size))
        w = self.reshape(w, (*w.shape[:2], *[1] * lift, *kernel))
        y = self._node("conv", [x, w], (n, co, *[1] * lift, *out), x.dtype,
                       stride=[1] * lift + stride, padding=[0] * lift + padding,
                       dilation=[1] * lift + dilation, groups=groups, transposed=transposed,
                       output_padding=[0] * lift + output_padding)
        return self.reshape(y, (n, co, *out))

    def pool(self, x: Value, op: str, kernel, stride, padding, dilation,
             ceil_mode: bool = False, count_include_pad: bool = True,
             divisor: int | None = None) -> Value:
        """Pooling over the last len(kernel) (1 to 3) dims of x: op 'max', 'argmax' (the
        max's flat index within those dims, as PyTorch's pooling indices) or 'avg'."""
        nd = len(kernel)
        size = list(x.shape[len(x.shape) - nd:])
        out = []
        for i in range(nd):
            if stride[i] < 1 or dilation[i] < 1 or padding[i] < 0:
                raise CompileError(f"pooling stride {stride} / dilation {dilation} below 1 or "
                                   f"padding {padding} negative")
            eff = dilation[i] * (kernel[i] - 1) + 1
            num = size[i] + 2 * padding[i] - eff
            o = (-(-num // stride[i]) if ceil_mode else num // stride[i]) + 1
            if ceil_mode and (o - 1) * stride[i] >= size[i] + padding[i]:
                o -= 1  # the last window must start inside the input or left padding
            out.append(o)
        return self._pool(x, out, op, kernel=list(kernel), stride=list(stride),
                          padding=list(padding), dilation=list(dilation),
                          count_include_pad=count_include_pad, divisor=divisor, adaptive=False)

    def adaptive_pool(self, x: Value, op: str, output_size) -> Value:
        """Adaptive pooling ('max', 'argmax' or 'avg') of the last len(output_size) dims
        to output_size: output o of a dim of size I pools [floor(o I / O), ceil((o+1) I / O))."""
        nd = len(output_size)
        size = list(x.shape[len(x.shape) - nd:])
        if min(output_size) < 1 or min(size) < 1:
            raise CompileError(f"adaptive pooling of {size} to {list(output_size)}")
        kernel = [max(-(-(o + 1) * i // n) - o * i // n for o in range(n))
                  for i, n in zip(size, output_size)]  # the widest window
        return self._pool(x, list(output_size), op, kernel=kernel, stride=[1] * nd,
                          padding=[0] * nd, dilation=[1] * nd, count_include_pad=False,
                          divisor=None, adaptive=True)

    def _pool(self, x: Value, out: list[int], op: str, **attrs) -> Value:
        """The pool node: x as [L, D, H, W] (L the product of the unpooled dims, unit
        dims in front of the pooled ones), reshaped back afterwards."""
        nd = len(out)
        if nd not in (1, 2, 3) or len(x.shape) < nd or op not in ("max", "argmax", "avg"):
            raise CompileError(f"pooling '{op}' over {nd} of the dims of {list(x.shape)}")
        if x.dtype != "f32":
            raise CompileError(f"pooling of {x.dtype} tensors is not supported (f32 only)")
        if min(out) < 1:
            raise CompileError(f"pooling output size {out} is empty (input {list(x.shape)})")
        lead, size = x.shape[:len(x.shape) - nd], x.shape[len(x.shape) - nd:]
        lift = 3 - nd
        x = self.reshape(x, (math.prod(lead), *[1] * lift, *size))
        pad = {"kernel": 1, "stride": 1, "padding": 0, "dilation": 1}
        attrs = {k: [pad[k]] * lift + v if k in pad else v for k, v in attrs.items()}
        y = self._node("pool", [x], (x.shape[0], *[1] * lift, *out),
                       "i32" if op == "argmax" else "f32", op=op, **attrs)
        return self.reshape(y, (*lead, *out))


_HOST_DTYPES = {"f32": np.float32, "i32": np.int32, "bool": np.bool_}
# the elementwise ops host_value evaluates: numpy on the arguments (already broadcast)
HOST_EW = {
    "copy": lambda a, p: a, "add": lambda a, b, p: a + b, "sub": lambda a, b, p: a - b,
    "mul": lambda a, b, p: a * b, "neg": lambda a, p: -a, "abs": lambda a, p: np.abs(a),
    "maximum": lambda a, b, p: np.maximum(a, b), "minimum": lambda a, b, p: np.minimum(a, b),
    "eq": lambda a, b, p: a == b, "ne": lambda a, b, p: a != b, "lt": lambda a, b, p: a < b,
    "le": lambda a, b, p: a <= b, "gt": lambda a, b, p: a > b, "ge": lambda a, b, p: a >= b,
    "and": lambda a, b, p: a & b, "or": lambda a, b, p: a | b, "not": lambda a, p: ~a,
    "where": lambda c, a, b, p: np.where(c, a, b),
    "floor": lambda a, p: np.floor(a), "ceil": lambda a, p: np.ceil(a),
    "trunc": lambda a, p: np.trunc(a),
    "clamp": lambda a, p: np.clip(a, p.get("lo"), p.get("hi")),
}


_HOST_MOVES = ("reshape", "permute", "expand", "slice", "pad", "cat")  # host_value's


def _host_operands(x: Value, limit: int) -> tuple[Value, ...]:
    """The values whose host values x's is computed from (GraphBuilder.host_value): its
    node's inputs where x is an op _host_node evaluates from them, else none."""
    node = x.node
    if x.dtype not in _HOST_DTYPES or x.numel > limit or x.kind in ("scalar", "const") \
            or node is None:
        return ()
    if node.op in _HOST_MOVES or node.op == "ew" and (node.attrs["fn"] == "cast"
                                                       or node.attrs["fn"] in HOST_EW):
        return tuple(node.inputs)
    return ()


def _host_node(x: Value, args: list, state: set[int], limit: int) -> np.ndarray | None:
    """One step of GraphBuilder.host_value: x from `args`, the host values of its
    _host_operands (all known)."""
    if x.dtype not in _HOST_DTYPES or x.numel > limit:
        return None
    dt = _HOST_DTYPES[x.dtype]
    if x.kind == "scalar":
        return np.array(x.scalar, dt)
    if x.kind == "const":
        return None if id(x) in state or x.data is None else np.asarray(x.data).astype(dt)
    node = x.node
    if node is None:
        return None
    a = node.attrs
    if node.op == "iota":
        i = np.arange(x.shape[a["dim"]], dtype=np.int64 if x.dtype == "i32" else dt)
        line = (np.asarray(a["start"], dt) + i * np.asarray(a["step"], dt)).astype(dt)
        shape = [1] * len(x.shape)
        shape[a["dim"]] = x.shape[a["dim"]]
        return np.broadcast_to(line.reshape(shape), x.shape)
    if any(v is None for v in args) or not args:
        return None
    src = args[0]
    with np.errstate(all="ignore"):
        if node.op == "ew":
            fn = a["fn"]
            if fn == "cast":  # WGSL's conversions: f32 -> i32 truncates; to bool: != 0
                if x.dtype == "i32" and src.dtype == np.float32:
                    if not np.all(np.abs(src) < 2.0 ** 31):
                        return None
                    src = np.trunc(src)
                return (src != 0) if x.dtype == "bool" else src.astype(dt)
            if fn not in HOST_EW:
                return None
            return np.asarray(HOST_EW[fn](*args, a)).astype(dt)
        if node.op == "reshape":
            return src.reshape(x.shape)
        if node.op == "permute":
            return np.transpose(src, a["dims"])
        if node.op == "expand":
            return np.broadcast_to(src, x.shape)
        if node.op == "slice":
            d, start, step = a["dim"], a["start"], a["step"]
            idx = [slice(None)] * len(x.shape)
            idx[d] = start + step * np.arange(x.shape[d])
            return src[tuple(idx)]
        if node.op == "pad":
            return np.pad(src, a["pads"], constant_values=np.asarray(a["value"]).astype(dt))
        if node.op == "cat":
            return np.concatenate([v.astype(dt) for v in args], a["dim"])
    return None


# -- index analysis ------------------------------------------------------------------
# Masks built from aranges (tril, triu, diag, causal attention) compare affine functions
# of a matrix's row and column index; lower/linalg (operands zero outside a band) and the
# matmul template (outputs a mask replaces whole tiles of) read them off the graph.
_FLIP = {"eq": "eq", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def affine_index(v: Value) -> tuple[tuple[int, ...], int] | None:
    """An integer value as sum(coef[d] * index[d]) + const over its own dims, when it is
    built from aranges (iota), broadcasts, unit-dim reshapes, sums, differences and
    scalar multiples; None otherwise."""
    if v.dtype != "i32":
        return None
    if v.kind == "scalar":
        return (), int(v.scalar)
    node = v.node
    if node is None:
        return None
    if node.op == "iota":
        coefs = [0] * len(v.shape)
        coefs[node.attrs["dim"]] = node.attrs["step"]
        return tuple(coefs), node.attrs["start"]
    if node.op in ("reshape", "expand"):
        inner = affine_index(node.inputs[0])
        if inner is None:
            return None
        src, (coefs, const) = node.inputs[0].shape, inner
        if node.op == "expand":  # right-aligned; a broadcast dim's index was 0
            lead = len(v.shape) - len(src)
            return tuple(0 if d < lead or src[d - lead] == 1 else coefs[d - lead]
                         for d in range(len(v.shape))), const
        moving = [c for c, s in zip(coefs, src) if s != 1]  # unit dims come and go only
        if [s for s in src if s != 1] != [s for s in v.shape if s != 1]:
            return None
        it = iter(moving)
        return tuple(0 if s == 1 else next(it) for s in v.shape), const
    if node.op == "ew" and node.attrs["fn"] in ("add", "sub", "mul", "neg"):
        parts = [affine_index(x) for x in node.inputs]
        if any(p is None for p in parts):
            return None
        fn = node.attrs["fn"]
        if fn == "neg":
            return tuple(-c for c in parts[0][0]), -parts[0][1]
        (ca, ka), (cb, kb) = parts  # ew inputs are expanded to the output's shape
        if fn == "mul":
            if any(cb):
                (ca, ka), (cb, kb) = (cb, kb), (ca, ka)
            if any(cb):
                return None  # a product of two indices is not affine
            return tuple(c * kb for c in ca), ka * kb
        sign = 1 if fn == "add" else -1
        return tuple(a + sign * c for a, c in zip(ca, cb)), ka + sign * kb
    return None


def where_band(x: Value) -> tuple[str, int, float] | None:
    """(op, c, other) when x [..., R, C] is where(mask, value, other) with `other` a
    scalar and a mask that holds exactly where (j - i) op c (i the row, j the column;
    op one of eq, lt, le, gt, ge), a mask comparing affine_index values: the masks of
    tril, triu, diag and causal attention. None for anything else."""
    node = x.node
    if (node is None or node.op != "ew" or node.attrs["fn"] != "where" or len(x.shape) < 2):
        return None
    cond, _, other = node.inputs
    while other.node is not None and other.node.op == "expand":
        other = other.node.inputs[0]
    if other.kind != "scalar":
        return None
    while (cond.node is not None and cond.node.op in ("expand", "reshape")  # a mask
           and cond.node.inputs[0].shape[-2:] == cond.shape[-2:]):  # broadcast or
        cond = cond.node.inputs[0]  # reshaped over batch dims only: the same (i, j)
    mask = cond.node
    if mask is None or mask.op != "ew" or mask.attrs["fn"] not in _FLIP:
        return None
    sides = [affine_index(v) for v in mask.inputs]
    if any(s is None for s in sides):
        return None
    (ca, ka), (cb, kb) = sides
    diff = [a - c for a, c in zip(ca, cb)]  # (lhs - rhs) op 0
    ci, cj = diff[-2:]
    if any(diff[:-2]) or ci != -cj or abs(ci) != 1:
        return None
    op = mask.attrs["fn"]
    if ci == -1:  # (j - i) + ka - kb op 0
        return op, kb - ka, other.scalar
    return _FLIP[op], ka - kb, other.scalar  # (i - j) + ka - kb op 0: (j - i) flip(op) ka - kb


def _band_interval(op: str, c: int) -> tuple[float, float]:
    """The values of (j - i) a band (op, c) of where_band holds, as [lo, hi]."""
    return {"eq": (c, c), "lt": (-math.inf, c - 1), "le": (-math.inf, c),
            "gt": (c + 1, math.inf), "ge": (c, math.inf)}[op]


def read_only_in_band(v: Value, users: dict[Value, list[Node]], outputs) -> bool:
    """Whether no element of v = where(band, x, s) (where_band) outside its band is ever
    used: v is no graph output, and each of its readers takes it elementwise at the same
    shape as the value of a where over the same band or a narrower one, or into a value
    for which the same holds (recursively; a reader through a view, a reduction or a
    template, or a where that keeps the elements, fails). A kernel that stores v may then
    leave the elements outside the band unwritten: causal attention's scores, which the
    row max and the probabilities by V each mask again (lower/attention)."""
    band = where_band(v)
    if band is None:
        return False
    lo, hi = _band_interval(*band[:2])

    def masked(x: Value, seen: set) -> bool:
        if x in outputs:
            return False
        for r in users.get(x, []):
            if r.op != "ew" or r.out.shape != v.shape:
                return False
            if r.attrs["fn"] == "where" and r.inputs[1] is x and x not in (r.inputs[0],
                                                                          r.inputs[2]):
                inner = where_band(r.out)
                if inner is not None:
                    rlo, rhi = _band_interval(*inner[:2])
                    if lo <= rlo and rhi <= hi:
                        continue
            if r.out not in seen:
                seen.add(r.out)
                if not masked(r.out, seen):
                    return False
        return True

    return masked(v, set())
