"""Passes from the primitive graph to a Plan: dead-code removal, fusion, memory planning.

Fusion decides which values are *materialized* (written to a buffer by a kernel)
and which are computed inline inside the kernels that read them. It walks the
nodes from the outputs back:

* graph outputs and template results are kernel roots unless fused as below;
* an elementwise or movement value whose readers all belong to one kernel joins
  that kernel (as part of its epilogue, or of a template's loader: prologue
  fusion); otherwise it is materialized and becomes a kernel of its own;
* but a matmul's or convolution's prologue that computes exp, tanh, ... and that the
  loader would compute again for many tiles is materialized (heavy_prologues);
* a template whose readers all sit in one elementwise kernel becomes that kernel's
  template, the elementwise chain its epilogue (matmul + bias + activation is one
  kernel), provided the chain reads the template's result only at the element it
  stores (through elementwise ops and reshapes);
* an elementwise kernel over rows whose reductions (over the same rows) only it reads
  computes them itself: a row kernel (fuse_rows); so does a gemv for its A's rows;
* a state's elementwise update read by one elementwise kernel alone is computed there
  and stored over the state by it (joining_updates: an optimizer's moments);
* a kernel whose value is a cat of matmul results goes: each product stores its
  elements where the cat holds them (placements), after the plan's kernels are made.

Memory planning then gives each materialized intermediate a buffer, reusing a
buffer once every kernel that reads its previous tenant has run. Each kernel's knobs
come from the tuning cache when it has an answer for the kernel on this device
(tune.choose_knobs), else from the template's heuristics.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from ..codegen.codegen import (
    OPS,
    TRANSCENDENTAL,
    NotInPlace,
    contiguous_strides,
    used_bindings,
)
from ..dtypes import (
    PACKED,
    buffer_bytes,
    default_torch_name,
    element_type,
    fills_words,
    is_packed,
    itemsize,
    to_storage,
)
from ..ir.ir import MOVEMENT_OPS, TEMPLATE_OPS, Graph, Node, Value, inline_sum, read_only_in_band
from ..kernels import (
    GEMV_ROW_MAX,
    PLACES,
    ROW_LIMIT,
    STORES_PUTS,
    Placement,
    Generated,
    Without,
    gemv_node,
    generate,
    matmul_loads_once,
    plain_strides,
    product_loads,
    product_reads_window,
    row_kernel_fits,
    row_major,
    stores_packed,
    template_kind,
)
from ..options import CompileOptions, Waves
from ..plan import Buffer, Kernel, Plan, TensorSpec
from .chunks import (
    Chunk,
    Space,
    Window,
    materialized_reads,
    needs_split,
    plan_segments,
    split_kernel,
    unit_windows,
)


@dataclass(eq=False)
class Group:
    root: Value  # the stored value
    template: Node | None = None
    members: list[Node] = field(default_factory=list)
    phases: list[Group] = field(default_factory=list)  # a row kernel's reductions (fuse_rows)
    # state updates computed inline and stored over their states (joining_updates): new
    # value -> state
    stores: dict[Value, Value] = field(default_factory=dict)


def live_nodes(graph: Graph) -> list[Node]:
    live: set[Node] = set()
    stack = [v.node for v in graph.roots() if v.node is not None]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(v.node for v in n.inputs if v.node is not None)
    return [n for n in graph.nodes if n in live]


EPILOGUE_FORK_MAX = 16  # nodes between a value read several times and where they meet


def narrowing(node: Node) -> bool:
    """Whether `node` copies a value into a packed half buffer (capture's outputs and
    updates of a float16 or bfloat16 tensor): fusion takes it as the way its kernel
    stores (two elements a word, rounded once), not as a kernel of its own; the kernel
    that computes the value stores it packed where its template can (a plain elementwise
    or row kernel, a reduction's epilogue: kernels.stores_packed)."""
    return node.op == "materialize" and is_packed(node.out.stored)


def epilogue_chains(nodes: list[Node], users, outputs: set[Value]) -> dict[Node, list[Node]]:
    """For each template node, the elementwise chain after it that its epilogue can
    compute: each link is the single reader of the previous one, an elementwise op or a
    reshape of the same size, and no link but the last is stored (`outputs`: the graph's
    outputs and the values `fuse` is told to store); a narrowing copy (`narrowing`) ends
    the chain of a template that stores packed words (kernels.stores_packed). A link read
    by several such nodes continues through all of them when they meet again in one
    node before anything else reads them (`_fork`: mish's y * tanh(softplus(y)))."""
    position = {n: i for i, n in enumerate(nodes)}
    chains = {}
    claimed: set[Node] = set()  # a node ends at most one template's chain
    for node in nodes:
        if node.op not in TEMPLATE_OPS or narrowing(node):
            continue
        if _moments(node) or node.op == "put":  # two values per row, read by slices; a
            chains[node] = []  # put's kernel stores its new slices alone: no epilogue
            continue

        packs = stores_packed(node)

        def joins(n: Node, numel=node.out.numel, packs=packs) -> bool:
            """May n be a link of node's chain."""
            return ((n.op in ("ew", "reshape") or packs and narrowing(n))
                    and n.out.numel == numel and n not in claimed)

        chain, tail = [], node
        while tail.out not in outputs:
            readers = list({id(r): r for r in users.get(tail.out, [])}.values())
            links = readers if len(readers) == 1 and joins(readers[0]) else \
                _fork(readers, users, outputs, joins)
            if not links:
                break
            links.sort(key=position.__getitem__)
            chain += links
            claimed.update(links)
            tail = links[-1]
        chains[node] = chain
    return chains


def _fork(readers: list[Node], users, outputs, joins) -> list[Node]:
    """The nodes from `readers` (a value's readers) up to the one node where all of them
    meet: the only one read from outside the set or a graph output (every other one is
    read within the set alone, so the set flows into it). Each must be able to join an
    epilogue (`joins`); [] when there is no such node within EPILOGUE_FORK_MAX nodes."""
    members: set[Node] = set()
    todo = readers
    while todo and all(joins(n) for n in todo):
        members.update(todo)
        if len(members) > EPILOGUE_FORK_MAX:
            break
        open_ = [n for n in members if n.out in outputs
                 or any(r not in members for r in users.get(n.out, []))]
        if len(open_) == 1:
            return list(members)
        todo = list({id(r): r for n in open_ if n.out not in outputs
                     for r in users.get(n.out, []) if r not in members}.values())
    return []


def readers(nodes: list[Node]) -> dict[Value, list[Node]]:
    """The nodes among `nodes` that read each value."""
    users: dict[Value, list[Node]] = {}
    for n in nodes:
        for v in n.inputs:
            users.setdefault(v, []).append(n)
    return users


def fuse(graph: Graph, nodes: list[Node], store: frozenset[Value] = frozenset(),
         waves: Waves | None = None) -> list[Group]:
    """The kernels (module docstring). The values in `store` are materialized like
    graph outputs, whatever fusion would do with them (build_plan's binding limit);
    `waves`: the device's, which set a gemv's workgroups (heavy_prologues)."""
    users = readers(nodes)
    stored = set(graph.roots()) | store
    chains = epilogue_chains(nodes, users, stored)
    joins = joining_puts(graph, users, store)
    groups = _group(nodes, users, chains, stored, set(), joins)
    heavy = heavy_prologues(groups, waves)
    if heavy:  # group again with those values as kernels of their own
        groups = _group(nodes, users, chains, stored, heavy, joins)
    groups = fuse_rows(recompute_cheap_values(groups, stored, users), stored)
    return joining_updates(graph, groups, store)


def joining_puts(graph: Graph, users, store) -> set[Node]:
    """The puts that may join the kernel reading them (`_group`): a decoding step's new
    keys or values written into their cache by the attention that reads the cache, no
    kernel of their own. Such a put writes one slice (its index one position), of a
    state of f32 or i32 elements, or of packed half words whose slices fill whole words
    (dtypes.fills_words: [B, H, S, E] along S with E even; each word then holds new
    elements alone or old ones alone), that nothing else reads and
    that the put's value alone updates, that value no output or write-back and not in
    `store` (build_plan's: a state that does not fit one binding), read by kernels whose
    template stores the puts it reads inline (kernels.STORES_PUTS: attention_decode).
    Whether all its readers are one such kernel, `_group` sees."""
    count: dict[Value, int] = {}
    for state, _ in graph.updates:
        count[state] = count.get(state, 0) + 1
    state_of = {new: state for state, new in graph.updates if count[state] == 1}
    returned = set(graph.outputs) | {v for _, v in graph.writes} | {v for v, _ in graph.checks}
    joins = set()
    for v, state in state_of.items():
        node = v.node
        if (node is None or node.op != "put" or node.inputs[0] is not state
                or state.kind != "const" or v in returned or v in store
                or node.inputs[2].shape[node.attrs["dim"]] != 1
                or state.stored != v.stored or v.stored not in ("f32", "i32", *PACKED)
                or not fills_words(v.stored, math.prod(v.shape[node.attrs["dim"] + 1:]))
                or any(u is not node for u in users.get(state, []))):
            continue
        joins.add(node)
    return joins


def joining_updates(graph: Graph, groups: list[Group], store) -> list[Group]:
    """Fold a state's update into the one kernel that reads it, which stores it over the
    state (Group.stores, codegen.Emitter._own): an optimizer's moments computed and
    stored by the parameter's update kernel, one kernel a parameter for three (Adam).

    A group G folds into its reader R where G's root is the only update of a state (a
    constant) and updates no other, of f32 or i32 elements held as such (no packed
    halves), no output, write-back or check and not in `store` (build_plan's: its kernel
    binds too much or needs chunks), and the state no output either; G and R are plain
    elementwise kernels (no template, no
    row phases), R's output not packed and of G's size; R is the only kernel reading G's
    root and G the only one reading the state (its old value is gone once R has run), and
    R reads both, through elementwise ops and reshapes alone, at the element it stores
    (`_at_own_element`): each invocation reads the state's old element, then stores the
    new one over it, where no other invocation reads. Groups are visited from the last,
    so that a chain (AMSGrad's max of the second moment) folds whole."""
    count: dict[Value, int] = {}
    for state, new in graph.updates:  # (a value updating two states is stored by neither)
        count[state] = count.get(state, 0) + 1
        count[new] = count.get(new, 0) + 1
    returned = set(graph.outputs) | {v for _, v in graph.writes} | {v for v, _ in graph.checks}
    state_of = {new: state for state, new in graph.updates
                if count[state] == 1 and count[new] == 1 and state.kind == "const"
                and new not in returned
                and state not in returned and new not in store and new.shape == state.shape
                and state.dtype in ("f32", "i32") and state.stored == state.dtype
                and new.dtype == state.dtype and new.stored == state.dtype}
    if not any(g.root in state_of for g in groups):
        return groups
    roots = {g.root for g in groups}
    reads = {g: _group_buffers(g, roots) for g in groups}  # buffers, constants, inputs
    readers: dict[Value, set[Group]] = {}
    for g, vs in reads.items():
        for v in vs:
            readers.setdefault(v, set()).add(g)
    folded: set[Group] = set()
    for g in reversed(groups):
        state = state_of.get(g.root)
        if state is None or g.template is not None or g.phases:
            continue
        (r, *more) = readers.get(g.root, ()) or (None,)
        if (r is None or more or r.template is not None or r.phases
                or is_packed(r.root.stored) or r.root.numel != g.root.numel
                or readers.get(state, set()) != {g}
                or not _at_own_element(r.root, {g.root, state}, roots)):
            continue
        r.members += g.members
        r.stores = {**r.stores, **g.stores, g.root: state}
        roots.discard(g.root)
        own = reads.pop(g)
        for v in own:
            readers[v].discard(g)
            readers[v].add(r)
        reads[r] = (reads[r] | own) - {g.root}
        readers.pop(g.root, None)
        folded.add(g)
    return [g for g in groups if g not in folded]


def _group_buffers(g: Group, roots) -> set[Value]:
    """What group g's kernel reads from memory: other groups' roots, constants, inputs."""
    found: set[Value] = set()
    seen: set[Value] = set()
    stack = [g.root]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v.kind in ("input", "const") or (v in roots and v is not g.root):
            found.add(v)
        elif v.node is not None:
            stack.extend(v.node.inputs)
    return found


def _at_own_element(x: Value, targets: set[Value], roots) -> bool:
    """Whether the inline code computing x (down to `roots` and buffers; through the
    `targets`, which it then computes inline) reads the `targets` only at x's own
    element: through elementwise ops and reshapes of x's size."""
    memo: dict[Value, bool | None] = {}

    def walk(v: Value) -> bool | None:  # None: reads no target
        if v in memo:
            return memo[v]
        if v.node is None or (v in roots and v is not x and v not in targets):
            return True if v in targets else None
        found = [(walk(i), i) for i in v.node.inputs]
        ordered = v.node.op in ("ew", "reshape") and not inline_sum(v.node)
        memo[v] = None if all(f is None for f, _ in found) else all(
            f is None or (f and ordered and i.numel == x.numel) for f, i in found)
        if v in targets:
            memo[v] = memo[v] is not False
        return memo[v]

    return walk(x) is True


def _joins(node: Node, readers: set[Group]) -> bool:
    """Whether put `node` (joining_puts) joins its readers' kernel: they are one kernel,
    whose template stores the puts it reads inline."""
    if len(readers) != 1:
        return False
    t = next(iter(readers)).template
    return t is not None and template_kind(t) in STORES_PUTS


def _group(nodes: list[Node], users, chains, outputs: set[Value], own: set[Value],
           joins: set[Node] = frozenset()) -> list[Group]:
    """The kernels, walking the nodes from the outputs back (module docstring); a value
    in `outputs` or `own` is materialized even where it could join its reader's kernel;
    a put in `joins` (joining_puts) joins the one kernel that reads it where its template
    stores it (`_joins`)."""
    tail_of = {n: chain[-1] for chain in chains.values() for n in chain}
    group_of: dict[Node, Group] = {}
    groups: list[Group] = []
    for node in reversed(nodes):
        v = node.out
        readers = {group_of[u] for u in users.get(v, [])}
        if node in tail_of and tail_of[node] is not node:
            group = group_of[tail_of[node]]  # inside a template's epilogue chain
        elif chains.get(node):
            group = group_of[chains[node][-1]]  # the template of that chain
            group.template = node
        elif (v not in outputs and len(readers) == 1 and node.op not in TEMPLATE_OPS
              and node not in tail_of and v not in own):
            group = next(iter(readers))  # inlined into its only reader's kernel
        elif node in joins and _joins(node, readers):
            group = next(iter(readers))  # stored by its reader (kernels/put.fused_puts)
        else:  # a narrowing copy is its kernel's way of storing: no template
            group = Group(v, template=node if node.op in TEMPLATE_OPS and not narrowing(node)
                          else None)
            groups.append(group)
        group.members.append(node)
        group_of[node] = group
    groups.reverse()
    return groups


# A prologue recomputed this many times per element or more is materialized when it
# computes a transcendental function (heavy_prologues: measured at 32, the threshold
# itself not measured).
PROLOGUE_RECOMPUTE_MIN = 4
PROLOGUE_CAT_PIECES = 1  # the most pieces of a cat that such a loader reads inline
# The gemv computes its A prologue once per workgroup along N (kernels.product_loads):
# a prologue is materialized there only when the evaluations of its transcendental ops
# (and cat branches) beyond the first exceed this many, about what a kernel launch costs.
# A model, not measured: an H100 evaluates about 3.7e12 special-function ops a second
# (132 SMs x 16 a clock x 1.75 GHz), so 2^20 of them take about 0.3 us over the SMs,
# against the 6-7 us of GPU time that each kernel of a decoding step took (issue 41).
GEMV_RECOMPUTE_MAX = 1 << 20
# The elementwise fns that cost a transcendental instruction sequence (exp, log, sin, ...:
# their cost class in codegen.OPS); sqrt, rsqrt and division do not count (a LayerNorm's
# rsqrt stays fused).
TRANSCENDENTAL_FNS = frozenset(name for name, op in OPS.items() if op.cost == TRANSCENDENTAL)


def _transcendental(node: Node) -> bool:
    if node.attrs.get("fn") == "pow":  # codegen._pow: small integer powers multiply
        e = float(node.attrs["exponent"])
        return not ((e == int(e) and abs(e) <= 4) or e == 0.5)
    return node.attrs.get("fn") in TRANSCENDENTAL_FNS


def heavy_prologues(groups: list[Group], waves: Waves | None = None) -> set[Value]:
    """The elementwise values that a matmul's or convolution's loader would compute
    inline (a prologue) but that are better written once by a kernel of their own.

    A template's loader computes its operand's prologue at every load, and a tiled
    template loads each operand element many times: a matmul's A [.., M, K] once per
    tile column, ceil(N / BN) times, B once per tile row, ceil(M / BM) (the default
    tiles with a prologue, kernels.matmul_tiles; tuned knobs or the cooperative
    template may tile otherwise); the direct convolution loads x and w
    (C / G) * vol(K) times per output ((C / G) * vol(K) / prod(stride) transposed).
    For the plain tiles a prologue of views, casts or a LayerNorm's arithmetic costs
    less than a kernel that writes it and a load that reads it back (measured on the
    H200 before the wide tiles), but one of exp, tanh, ... can cost more than the
    product: an LSTM step's h = o * tanh(c) in the
    next step's matmul (level3/015 at full size: each element computed once per tile
    column, 32 times) took 320 us on the H200; materialized (2026-12-02,
    bench/results/profile_h200_2026-12-02.json and profile_rnn_h200_2026-12-02_call4.json),
    11 us for the elementwise kernel and 265 us for the plain product: the problem
    3.57 -> 2.92 ms.

    A prologue also costs a large product its tiles: with stored operands it takes the
    wide tiles (8 x 16 per invocation) or the plain ones (128 x 64, where K is under
    512), two staged buffers, with a prologue 128 x 128 tiles of 8 x 8 and one staged
    buffer (matmul_knobs). Measured on the H200
    (2026-12-04c, bench/results/profile_prologue_h200_2026-12-04c.json), a LayerNorm in
    the loader of the product after it, against the LayerNorm written by its row kernel
    (stats and normalization in one pass) and the product on the wide tiles: ViT
    (level3/013) 4.554 -> 3.769 ms, the minGPT block 4.619 -> 4.128 and its MLP 3.741 ->
    3.317, the MLP-Mixer 4.192 -> 3.903, the transformer encoder block 4.269 -> 4.060,
    the Swin pair 4.136 -> 4.140.

    The rule, per operand: follow it down through movement ops (its views, a
    convolution's windows: they stay inlined) to the first elementwise values that are
    not in a buffer; such a value v is materialized when the loader's loads of the
    operand, divided by v's element count, are at least PROLOGUE_RECOMPUTE_MIN (v's
    elements each computed that many times: a plain operand's tile count, more through
    a broadcast or a window's overlapping taps, less through a slice of a larger value)
    and either the product is a large one (_large_product; suite call 56: level3/020,
    the Swin pair, 4.161 -> 4.304 ms, the one problem of nine that lost) or v's inline
    expression
    down to buffers computes at least one TRANSCENDENTAL op (counted as `_inline_ops`
    counts ops). The threshold of 4 is not measured: 015 was the only suite problem
    with a transcendental prologue.
    A cat of more than PROLOGUE_CAT_PIECES pieces met on the way down is materialized
    on the same count: inlined, each load branches over the pieces (an if / else
    chain, codegen.Emitter._cat) and loads scalars (the recurrent networks' output
    sequences, cats of their steps, read by the next layer's input product; measured in
    docs/PERF.md).

    The gemv (few rows, kernels/gemv.py) stages A in workgroup memory, its prologue
    computed once per element per workgroup along N (`waves`: the device's, which set
    them), and B once: there the count alone says little (a SwiGLU in the down
    projection's loader at decode, 72 workgroups, is 1536 sigmoids each), and what is
    weighed is the extra work, the evaluations beyond the first of the prologue's
    transcendental ops (a cat counting one), against a kernel launch:
    GEMV_RECOMPUTE_MAX."""
    roots = {g.root for g in groups}
    heavy: set[Value] = set()
    for g in groups:
        t = g.template
        if t is None or t.op not in ("matmul", "conv"):
            continue
        large = t.op == "matmul" and _large_product(t)
        gemv = t.op == "matmul" and gemv_node(t)
        counts = product_loads(t, roots, waves) if t.op == "matmul" else None
        for i, (x, loads) in enumerate(zip(t.inputs, _operand_loads(t, counts))):
            stack, seen = [x], set()
            while stack:
                v = stack.pop()
                if v in seen or v in roots or v.kind != "node":
                    continue
                seen.add(v)
                cat = v.node.op == "cat" and len(v.node.inputs) > PROLOGUE_CAT_PIECES
                if gemv:
                    ops = 1 if cat else (_inline_ops(v, roots, set(), _transcendental)
                                         if v.node.op == "ew" else 0)
                    if ops and (counts[i] - 1) * v.numel * ops > GEMV_RECOMPUTE_MAX:
                        heavy.add(v)
                    elif v.node.op in MOVEMENT_OPS:
                        stack.extend(v.node.inputs)
                elif cat and loads >= PROLOGUE_RECOMPUTE_MIN * v.numel:
                    heavy.add(v)  # each load would branch over its pieces
                elif v.node.op in MOVEMENT_OPS:
                    stack.extend(v.node.inputs)
                elif (v.node.op == "ew" and loads >= PROLOGUE_RECOMPUTE_MIN * v.numel
                      and (large or _inline_ops(v, roots, set(), _transcendental) >= 1)):
                    heavy.add(v)
    return heavy


def _large_product(t: Node) -> bool:
    """Whether matmul node `t` is a large product (at least 512 a side, no convolution
    windows: kernels.matmul_tiles), whose tiles a prologue changes (heavy_prologues)."""
    a, b = t.inputs
    return a.shape[1] >= 512 and b.shape[2] >= 512 and not product_reads_window(t)


def _operand_loads(t: Node, counts: tuple[int, int] | None) -> list[float]:
    """How many elements the loaders of matmul or conv node `t` load from each operand
    (heavy_prologues), taps outside the input counted; `counts`: a matmul's loads of
    each element of A and B (kernels.product_loads)."""
    if t.op == "matmul":
        return [x.numel * c for x, c in zip(t.inputs, counts)]
    x, w = t.inputs
    taps = math.prod(w.shape[2:]) * x.shape[1] // t.attrs["groups"]
    if t.attrs["transposed"]:
        taps /= math.prod(t.attrs["stride"])
    return [t.out.numel * taps] * 2


RECOMPUTE_MAX_OPS = 8  # elementwise ops each reader may compute again instead of a load
RECOMPUTE_MAX_READS = 2  # buffers such a value may read (each one a binding of its readers)
# templates whose loaders touch an element once
READS_EACH_ELEMENT_ONCE = ("reduce", "scan", "recur")


def recompute_cheap_values(groups: list[Group], outputs: set[Value], users) -> list[Group]:
    """Fold back into its readers a value that `fuse` materialized only because several
    kernels read it, when it is a view of a buffer in the buffer's own element order
    (InstanceNorm's reshape of its input to [1, N * C, H, W], read by the statistics and
    the normalization; attention's probabilities as the [B * H, L, S] of their products
    by V and, transposed, by the output's gradient) whatever its readers, or a short
    elementwise expression of buffers (softmax's exp(x - max) feeds both its sum and its
    division) whose every reader touches each of its elements once (an elementwise
    kernel, a reduction, a matmul with one tile of the other side, a put's new slices:
    `_reads_once`):
    recomputing it costs a few instructions or none, materializing it a write, a read,
    a kernel and, in a training step, a second buffer of its size held to the backward.
    A view in another order (a transpose) stays materialized: its readers would read
    memory out of order. A sum of a few items of a buffer (ir.inline_sum over views
    alone: split-K's partial products, with the bias its epilogue adds) counts as that
    many loads and adds; it folds only into elementwise and row kernels and a put's new
    slices (a decoded token's key projection cut along K: the put's loader adds its
    pieces; a matmul or convolution would take the tiles of a loader that computes). A
    sum of computed items (softmax's exp over a short row) stays, for fuse_rows to make a
    row kernel.
    An LSTM step's gates (its split-K chunks, the input's projection and the bias: three
    buffers) keep their reduce kernel: folded into the two gates kernels, level1/108 ran
    8.01 -> 8.61 ms and level3/023 9.60 -> 10.53 on an H100 (docs/PERF.md, 2026-12-06b)."""
    roots = {g.root for g in groups}
    group_of = {n: g for g in groups for n in g.members}
    folded: set[Group] = set()
    # views before the values they view: a view of a value that several views read (each
    # layer's unsqueeze of the rotation's cos) folds into its readers, the value staying
    # one kernel, where the value folded first into each view's kernel made a kernel per view
    for g in sorted(groups, key=lambda g: g.template is not None or g.root.node.op == "ew"):
        v = g.root
        others = Without(roots, v)
        summed = (g.template is not None and inline_sum(g.template)
                  and _inline_ops(g.template.inputs[0], others, set()) == 0)
        if (g.template is not None and not summed) or v in outputs or narrowing(v.node):
            continue
        readers = {group_of[u] for u in users.get(v, [])}
        view = not summed and v.node.op != "ew" and _in_order_view(v, others)
        if readers & folded or not (view or all(_reads_once(r.template, v, roots)
                                                for r in readers)):
            continue
        if summed and any(r.template is not None and r.template.op not in
                          (*READS_EACH_ELEMENT_ONCE, "put") for r in readers):
            continue
        reads: set[Value] = set()
        cheap = view or (v.node.op == "ew" or summed) and (
            _inline_ops(v, others, reads) <= RECOMPUTE_MAX_OPS
            and len(reads) <= RECOMPUTE_MAX_READS)
        if cheap:
            folded.add(g)
            roots.discard(v)
    return [g for g in groups if g not in folded]


def _reads_once(t: Node | None, v: Value, roots: set[Value]) -> bool:
    """Whether the kernel of template `t` (None: an elementwise kernel) computes each
    element of v once: a reduction or a scan, or a matmul that reads v, in its own
    element order (through reshapes and same-size elementwise ops), only as an operand
    whose elements its loader loads once (kernels.matmul_loads_once: A where the output
    is one tile column, the product of attention's probabilities by V; B likewise)."""
    if t is None or t.op in READS_EACH_ELEMENT_ONCE:
        return True
    if t.op == "put":  # its new slices once each; its positions at every element
        return _in_order_from(t.inputs[1], v, roots, {}) is None
    if t.op != "matmul":
        return False
    a, b = t.inputs
    m, n = a.shape[1], b.shape[2]
    once = matmul_loads_once(m, n)
    memo: dict[Value, bool | None] = {}
    found = [_in_order_from(x, v, roots, memo) for x in (a, b)]
    return all(f is not False if o else f is None for f, o in zip(found, once))


def _in_order_from(x: Value, v: Value, roots: set[Value], memo: dict) -> bool | None:
    """None when a loader computing x inline does not read v (it stops at buffers:
    `roots` other than v, inputs, constants); True when it reads v in x's own element
    order, through reshapes and elementwise ops of x's size; False when otherwise."""
    if x is v:
        return True
    if x in memo:
        return memo[x]
    node = x.node
    if node is None or x in roots or node.op in TEMPLATE_OPS:
        return None
    found = [_in_order_from(i, v, roots, memo) for i in node.inputs]
    ordered = node.op == "reshape" or node.op == "ew"
    memo[x] = None if all(f is None for f in found) else all(
        f is None or (f and ordered and i.numel == x.numel) for f, i in zip(found, node.inputs))
    return memo[x]


def _in_order_view(v: Value, roots: set[Value]) -> bool:
    """Whether v reads one buffer through movement ops alone, its elements in the
    buffer's order (the strides of a contiguous tensor of v's shape, size-1 dims aside)."""
    view = plain_strides(v, roots)
    if view is None:
        return False
    return all(s == t for n, s, t in zip(v.shape, view[2], contiguous_strides(v.shape))
               if n > 1)


def _inline_ops(v: Value, roots: set[Value], reads: set[Value], counts=None) -> float:
    """Elementwise ops computed when `v` is inlined down to buffers (collected in
    `reads`), those for which `counts(node)` holds where given; inf when that would
    need a template's result that is not in a buffer."""
    if v.kind in ("input", "const") or v in roots:
        reads.add(v)
        return 0
    if v.node is None:
        return 0
    if inline_sum(v.node):  # its items' loads and adds
        items = v.node.inputs[0].shape[1]
        own = items - 1 if counts is None else 0
        return own + items * _inline_ops(v.node.inputs[0], roots, reads, counts)
    if v.node.op in TEMPLATE_OPS:
        return float("inf")
    own = 1 if v.node.op == "ew" and (counts is None or counts(v.node)) else 0
    return own + sum(_inline_ops(x, roots, reads, counts) for x in v.node.inputs)


ROW_FUSION_MAX = ROW_LIMIT  # rows longer than this keep a kernel per reduction (0: never fuse)


def fuse_rows(groups: list[Group], outputs: set[Value]) -> list[Group]:
    """Row kernels: an elementwise kernel over O x R elements that reads reductions of
    rows of R (in the same O rows) computes them itself (kernels._rows): for each
    row, the reductions one after the other, then its own elements, all in one kernel
    that reads the row from memory once (softmax, log_softmax, layer and RMS norm: the
    max, the sum of exp(x - max), then exp(x - max) / sum).

    A reduction group joins the row kernel of `c` when its rows are c's rows (O, R with
    O * R = c's size, R <= ROW_FUSION_MAX so the row fits on chip), its value is no graph
    output and only c or the kernel's other reductions read it, and every read of it
    (through elementwise and movement ops) is at the row being computed: the reads'
    index maps are traced symbolically (`_row_reads_ok`). Reductions that another
    reduction of the kernel reads join too (the softmax's sum reads its max). Values
    that several of these kernels read and recompute_cheap_values folded back (the
    exp(x - max)) are computed in each pass again.

    `c` may itself be a reduction of rows that its row-major input walks along (a
    logsumexp's or a variance's sum, attention's log-sum-exp: it reads the rows' max or
    mean): the reductions it reads over the same rows join it as earlier phases, and
    the kernel stores c's value per row.

    `c` may also be a product on the gemv template (few rows, kernels/gemv.py) whose A
    [nb, M, K] has a prologue reading reductions of A's own rows (O = nb * M rows of
    K <= GEMV_ROW_MAX: an RMSNorm or LayerNorm before a linear at decode): each workgroup
    computes the statistics of its M rows itself before staging A, one kernel for two;
    every read of them must be in A's prologue at A's row (not in B, not in the
    epilogue). Otherwise nothing changes."""
    if ROW_FUSION_MAX < 2:
        return groups
    roots = {g.root: g for g in groups}
    reads = {g: _group_reads(g, roots) for g in groups}
    readers_of: dict[Value, list[Group]] = {}  # a group's root -> the groups reading it
    for g in groups:
        for v in reads[g]:
            readers_of.setdefault(v, []).append(g)
    fused: set[Group] = set()
    for c in reversed(groups):
        gemv = c.template is not None and c.template.op == "matmul" and gemv_node(c.template)
        if c in fused or (c.template is not None and not gemv and not _row_reduction(c, roots)):
            continue
        own = c.template.inputs[0].shape if c.template is not None else None
        longest = ROW_FUSION_MAX
        if gemv:  # A's rows
            own, longest = (own[0] * own[1], own[2]), GEMV_ROW_MAX
        shape, cands, todo = own, [], [c]
        while todo:
            for v in reads[todo.pop()]:
                p = roots[v]
                if (p.template is None or p.template.op != "reduce" or p in cands
                        or p in fused or v in outputs or _moments(p.template)):
                    continue
                o, r = p.template.inputs[0].shape
                if ((own is None and o * r != c.root.numel) or not 1 < r <= longest
                        or shape not in (None, (o, r))):
                    continue
                shape = (o, r)
                cands.append(p)
                todo.append(p)
        while True:  # a reduction read outside the row kernel keeps its own kernel
            inside = {c, *cands}
            keep = [p for p in cands
                    if all(g in inside for g in readers_of.get(p.root, ()))]
            if len(keep) == len(cands):
                break
            cands = keep
        packed = is_packed(c.root.stored) and shape is not None and shape[0] > 1
        if (not cands or not _row_reads_ok(c, cands, shape, roots)
                or packed and c.template is None and shape[1] % 2
                or not gemv and not row_kernel_fits(  # the gemv reads its rows from memory
                    shape[1], _row_lanes(c, cands, roots, shape),
                    packed and c.template is not None)):
            continue
        order = {g: i for i, g in enumerate(groups)}
        c.phases = sorted(cands, key=order.__getitem__)
        c.members = [n for p in c.phases for n in p.members] + c.members
        fused.update(cands)
    return [g for g in groups if g not in fused]


def _row_lanes(c: Group, phases: list[Group], roots, shape) -> int:
    """How many buffers a row kernel of c and `phases` reads at its rows' elements (those
    of O * R elements): each invocation holds its share of the row of each on chip
    (kernels.row_kernel_fits)."""
    inside = {c.root, *(p.root for p in phases)}
    found, seen, stack = set(), set(), list(inside)
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v.kind in ("input", "const") or (v in roots and v not in inside):
            if v.numel == shape[0] * shape[1]:
                found.add(v)
        elif v.node is not None:
            stack.extend(v.node.inputs)
    return max(1, len(found))


def _row_reduction(c: Group, roots) -> bool:
    """Whether reduce group c can end a row kernel: its rows fit on chip and its loader
    walks them along memory (a reduction over a leading dim keeps the column order of
    its own kernel)."""
    t = c.template
    return (t.op == "reduce" and not _moments(t) and 1 < t.inputs[0].shape[1] <= ROW_FUSION_MAX
            and row_major(t.inputs[0], roots))


def _moments(t: Node) -> bool:
    """Whether t is a moments reduction (GraphBuilder.moments), a kernel of its own."""
    return t.op == "reduce" and t.attrs["op"] == "moments"


def _group_reads(g: Group, roots) -> set[Value]:
    """The materialized values (other groups' roots) that group g's kernel reads."""
    found: set[Value] = set()
    seen: set[Value] = set()
    stack = [g.root]
    while stack:
        v = stack.pop()
        if v in seen or v.node is None:
            continue
        seen.add(v)
        if v in roots and v is not g.root:
            found.add(v)
            continue
        stack.extend(v.node.inputs)
    return found


# Row indices, symbolically: the index of each dim of a value as a mixed-radix number
# of pieces (atom, stride, size), high to low, each the digit (atom // stride) % size of
# the row kernel's row "o" or element "r"; a broadcast or unit dim has no pieces.
Piece = tuple[str, int, int]


def _norm(pieces) -> list[Piece]:
    out: list[Piece] = []
    for a, st, n in pieces:
        if n == 1:
            continue
        if out and out[-1][0] == a and out[-1][1] == st * n:
            out[-1] = (a, st, out[-1][2] * n)
        else:
            out.append((a, st, n))
    return out


def _split(pieces, shape) -> list[list[Piece]] | None:
    """The pieces of each dim of `shape` whose flat (row-major) index is the number
    `pieces`; None when a dim boundary falls inside a piece it does not divide."""
    rest, dims = _norm(pieces), []
    for size in reversed(shape):
        dim: list[Piece] = []
        while size > 1:
            if not rest:
                return None
            a, st, n = rest.pop()
            if n <= size:
                if size % n:
                    return None
                dim.insert(0, (a, st, n))
                size //= n
            else:
                if n % size:
                    return None
                dim.insert(0, (a, st, size))
                rest.append((a, st * size, n // size))
                size = 1
        dims.append(dim)
    return None if rest else dims[::-1]


def _row_reads_ok(c: Group, phases: list[Group], shape, roots) -> bool:
    """Whether every read of the phases' values, from c's elements (row o, element r:
    c's flat index o * R + r; a gemv's: from its A [nb, M, K] at (b, m, k), o = b * M + m,
    and none from its B or epilogue), from the phases' loaders (x[o, r]) and their
    epilogues (row o), is at row o."""
    o, r = shape
    row = _norm([("o", 1, o)])  # no pieces for a single row (o == 1), as _norm gives reads
    values = {p.root for p in phases}
    materialized = set(roots)
    seen: set = set()
    reach: dict[Value, bool] = {}

    def reaches(v: Value) -> bool:  # does inline code from v read a phase's value?
        if v not in reach:
            reach[v] = v in values or (v.kind == "node" and v not in materialized
                                       and (v.node.op not in TEMPLATE_OPS
                                            or inline_sum(v.node) or narrowing(v.node))
                                       and any(reaches(x) for x in v.node.inputs))
        return reach[v]

    def ok(v: Value, sym, stop: Value | None) -> bool:
        if sym is None:
            return not reaches(v)
        if v in values:
            return _norm(p for d in sym for p in d) == row
        if v.kind != "node" or v is stop or v in materialized or not reaches(v):
            return True
        return node_ok(v, sym, stop)

    def node_ok(v: Value, sym, stop: Value | None) -> bool:  # the node computing v
        if sym is None:
            return not any(reaches(x) for x in v.node.inputs)
        key = (v, tuple(tuple(d) for d in sym))
        if key in seen:
            return True
        seen.add(key)
        node, x = v.node, (v.node.inputs[0] if v.node.inputs else None)
        if node.op == "ew" or narrowing(node):
            return all(ok(a, sym, stop) for a in node.inputs)
        if node.op == "reshape":
            return ok(x, _split([p for d in sym for p in d], x.shape), stop)
        if node.op == "permute":
            inner: list = [None] * len(sym)
            for i, d in enumerate(node.attrs["dims"]):
                inner[d] = sym[i]
            return ok(x, inner, stop)
        if node.op == "expand":
            off = len(v.shape) - len(x.shape)
            return ok(x, [[] if s == 1 else sym[i + off] for i, s in enumerate(x.shape)], stop)
        return False  # other index maps (slices, gathers, ...) are not traced

    if c.template is not None and c.template.op == "matmul":  # a gemv: A's rows
        a, b = c.template.inputs
        epilogue = c.root is not c.template.out and not node_ok(c.root, None, None)
        if (epilogue or reaches(b)
                or not ok(a, _split([("o", 1, o), ("r", 1, r)], a.shape), None)):
            return False
    elif c.template is not None:  # a reduction: checked as the last phase
        phases = [*phases, c]
    elif not node_ok(c.root, _split([("o", 1, o), ("r", 1, r)], c.root.shape), None):
        return False
    for p in phases:
        if not ok(p.template.inputs[0], [[("o", 1, o)], [("r", 1, r)]], None):
            return False
        if p.root is not p.template.out and not node_ok(p.root, _split(row, p.root.shape),
                                                        p.template.out):
            return False
    return True


def binding_cut(g: Group, materialized: set[Value]) -> Value | None:
    """The value that g's kernel computes inline and that, stored by a kernel of its
    own, takes the fewest elements to bind fewer buffers: of the inline values that
    read two buffers or more (each a binding of g's kernel; stored, one), the smallest,
    then the one reading the most (a BatchNorm's per-channel scale rsqrt(var + eps) *
    gamma before a cut through the stored tensor; the inner cat of a cat of cats). None
    when no inline value reads two buffers."""
    leaves: dict[Value, frozenset[Value]] = {}

    def reads(v: Value) -> frozenset[Value]:  # the buffers an inline value reads
        if v not in leaves:
            if v.kind in ("input", "const") or v in materialized and v is not g.root:
                leaves[v] = frozenset((v,))
            elif v.node is None:  # a scalar literal
                leaves[v] = frozenset()
            else:
                leaves[v] = frozenset().union(*(reads(x) for x in v.node.inputs))
        return leaves[v]

    reads(g.root)
    inline = [v for v, r in leaves.items()
              if v is not g.root and v not in materialized and v.node is not None and len(r) > 1]
    return min(inline, key=lambda v: (v.numel, -len(leaves[v])), default=None)


def large_read_cut(g: Group, materialized: set[Value], most: int) -> Value | None:
    """The value that g's kernel computes inline and that, stored by a kernel of its
    own, lets a kernel that reads a buffer of more than `most` bytes be chunked where g
    cannot be (chunks.split_kernel): of the inline values that read such a buffer,
    the smallest (a cross-entropy's picked log-probabilities [B], summed to a scalar
    that no chunk of its own could hold). None when there is none."""
    big: dict[Value, bool] = {}

    def reads_big(v: Value) -> bool:
        if v not in big:
            if v.kind in ("input", "const") or v in materialized and v is not g.root:
                big[v] = v.numel * itemsize(v.stored) > most
            elif v.node is None:
                big[v] = False
            else:
                big[v] = any([reads_big(x) for x in v.node.inputs])
        return big[v]

    reads_big(g.root)
    inline = [v for v, b in big.items() if b and v is not g.root and v not in materialized
              and v.node is not None and v.numel > 1]
    return min(inline, key=lambda v: v.numel, default=None)


def placements(groups: list[Group], chunked: list[list[Chunk]], users, outputs: set[Value],
               kept: set[Value], fits) -> dict[int, list[tuple[int, Placement]]]:
    """The kernels whose value is a cat of template results (through views, elementwise
    ops after it) that those templates' kernels store in place instead (kernel index ->
    [(a piece's kernel index, its Placement)]): each piece stores its elements where the
    value holds them (kernels.common.placed_functions), and the cat's kernel is gone (a
    strided transposed convolution's phases interleaved: each phase's product stores
    into the output; products cat'd). Such a kernel has no template, is in one piece,
    its value fits one binding, is not stored packed and is no update, write-back or
    check (`kept`); from its value down: elementwise ops at the same shape (their other
    inputs read by the pieces' kernels, computed before the first piece), reshapes,
    permutes and slices of step 1 or -1 lead to a cat whose every input leads, through
    views and cats each read once, to a piece: a template of kernels.PLACES in one
    piece, no row statistics, read by that path alone and no output. Anything else (a
    piece of zeros, an expand, a pad, a value read twice) keeps the cat's kernel."""
    index = {g.root: i for i, g in enumerate(groups)}
    found: dict[int, list[tuple[int, Placement]]] = {}
    for ri, g in enumerate(groups):
        root = g.root
        if (g.template is not None or g.phases or len(chunked[ri]) != 1 or chunked[ri][0].label
                or root in kept or is_packed(root.stored) or not fits(root)):
            continue
        paths = _piece_paths(root, Without(index, root), users)
        if not paths:
            continue
        pieces = []
        for piece, path in paths:
            i = index.get(piece)
            t = groups[i].template if i is not None else None
            if (t is None or template_kind(t) not in PLACES or groups[i].phases
                    or piece in outputs or len(chunked[i]) != 1 or chunked[i][0].label):
                break
            pieces.append((i, Placement(root, tuple(path))))
        else:
            start = min(i for i, _ in pieces)
            own = {piece for piece, _ in paths}
            if all(index.get(v, -1) < start for v in chunked[ri][0].gen.reads if v not in own):
                found[ri] = pieces
    return found


_VIEWS = ("reshape", "permute", "slice", "cat")


def _piece_paths(root: Value, stored, users) -> list[tuple[Value, list]] | None:
    """placements' pieces of `root` (its kernel computing every value on the way that is
    not `stored`, the other kernels' values), each with its path up to root (node, input
    slot), or None."""
    def inline(v: Value) -> bool:
        return v.node is not None and v not in stored

    memo: dict[Value, bool] = {}

    def has_cat(v: Value) -> bool:
        if v not in memo:
            memo[v] = inline(v) and (v.node.op == "cat" or any(map(has_cat, v.node.inputs)))
        return memo[v]

    def walk(v: Value, below: bool) -> list | None:
        n = v.node
        if not inline(v):
            return [(v, [])] if below and n is not None else None
        if n.op == "slice" and abs(n.attrs["step"]) != 1 or n.op not in (*_VIEWS, "ew") \
                or n.op == "ew" and below:
            return None
        if n.op == "cat":
            slots = range(len(n.inputs))
        elif n.op == "ew":
            slots = [j for j, u in enumerate(n.inputs) if has_cat(u)]
            if len(slots) != 1 or n.inputs[slots[0]].shape != n.out.shape:
                return None
        else:
            slots = [0]
        out = []
        for j in slots:
            u = n.inputs[j]
            if sum(w is u for w in n.inputs) != 1 or len(users.get(u, [])) != 1:
                return None  # read once, by this node alone
            sub = walk(u, below or n.op == "cat")
            if sub is None:
                return None
            out += [(piece, path + [(n, j)]) for piece, path in sub]
        return out

    return walk(root, False)


def same_state_storage(graph: Graph) -> None:
    """Hold a state and its update's value in buffers of one type (the update is a copy
    of bytes, Plan.updates): where one of them is a packed half and the other is not
    (an update a training step guards with an f32 select; a packed value held in f32
    for a chunked kernel), both are held in f32."""
    for state, new in graph.updates:
        if state.stored != new.stored:
            state.storage = new.storage = None


def early_updates(graph: Graph, groups: list[Group], chunked: list[list[Chunk]],
                  returned: set[Value], fits) -> dict[Value, int]:
    """The updates whose new value a copy kernel writes over the state (value -> the index
    of the kernel it follows) as soon as both the kernel computing the value and the
    state's last reader have run, so that the value's buffer is free for the kernels
    after it, rather than held to the copies after all kernels (a training step: 3 x the
    parameters' bytes under Adam). Such an update is a kernel's value (no input,
    constant, output or write-back: `returned`), the only update of its state, agrees
    with it in shape and storage, is not stored packed (a half state: two elements a word,
    which an elementwise copy cannot write; its narrowing copy stays at the end) and fits
    one binding and one device buffer (`fits`)."""
    index = {g.root: i for i, g in enumerate(groups)}
    last_read: dict[Value, int] = {}
    for i, parts in enumerate(chunked):
        for chunk in parts:
            for v in chunk.gen.reads:
                last_read[v] = i
    count: dict[Value, int] = {}
    for state, _ in graph.updates:
        count[state] = count.get(state, 0) + 1
    out: dict[Value, int] = {}
    for state, new in graph.updates:
        i = index.get(new)
        if (i is None or count[state] > 1 or new in returned or new in out
                or state.kind != "const" or new.stored != state.stored or state.storage
                or new.shape != state.shape or not fits(new) or not fits(state)):
            continue
        out[new] = max(i, last_read.get(state, -1))
    return out


def put_homes(graph: Graph, groups: list[Group], chunked: list[list[Chunk]], returned,
              fits, materialized, options: CompileOptions) -> tuple[dict[Value, Value],
                                                                   dict[Value, Value]]:
    """Where each put (GraphBuilder.put) stores its new slices, the rest of its tensor x
    being already there: (puts written over their state: put's value -> the state, copies
    made for the others: copy -> put's value). A put writes over x's own buffer, which then
    holds its value, where x is a state (a constant the graph updates) whose only update
    is the put's value, of the same storage, no output or write-back, binding whole
    (`fits`), that no kernel at or after the put's reads (the old value is gone once the
    put has run); a KV cache's index_copy at the decoded positions writes its T new rows
    and nothing else. Any other put gets a copy of x into its own buffer, a materialize
    kernel inserted just before it (groups and chunked are changed in place): the copy
    reads x whole, then the put's kernel writes its slices over it."""
    count: dict[Value, int] = {}
    for state, _ in graph.updates:
        count[state] = count.get(state, 0) + 1
    state_of = {new: state for state, new in graph.updates if count[state] == 1}
    homes: dict[Value, Value] = {}
    copies: dict[Value, Value] = {}
    i = 0
    while i < len(groups):
        t = groups[i].template
        if t is None or t.op != "put":
            i += 1
            continue
        x, new = t.inputs[0], t.out
        last_read = max((j for j, parts in enumerate(chunked) for chunk in parts
                         if x in chunk.gen.reads), default=-1)
        if (state_of.get(new) is x and x.kind == "const" and new not in returned
                and x.stored == new.stored and fits(x) and last_read < i
                and len(chunked[i]) == 1 and not chunked[i][0].label):
            homes[new] = x
            i += 1
            continue
        copy = Value(new.shape, new.dtype, storage=new.storage)
        copy.node = Node("materialize", [x], {}, copy)
        gen = generate(copy, copy.node, materialized | {copy}, lambda v: id(v), options)
        groups.insert(i, Group(copy, template=copy.node, members=[copy.node]))
        chunked.insert(i, [Chunk(gen)])
        copies[copy] = new
        i += 2
    return homes, copies


def written_in_place(groups: list[Group], chunked: list[list[Chunk]],
                     early: dict[Value, int], state_of: dict[Value, Value], materialized,
                     users, outputs, options: CompileOptions) -> dict[Value, Value]:
    """The early updates (early_updates) whose own kernel stores them over their state
    (new value -> state), its kernel regenerated to read the state from its output
    (kernels.fill_kernel's `inplace`): where that kernel is the state's last reader (no
    copy kernel to wait for), a plain elementwise kernel in one piece, reading the state
    only at the element it stores, and the state's buffer holds its elements as the
    kernel computes them (no narrowing on store). No copy kernel and no buffer for the
    new value: a training step's optimizer writes each state once, where it computes it."""
    index = {g.root: i for i, g in enumerate(groups)}
    out: dict[Value, Value] = {}
    for new, after in early.items():
        i, state = index[new], state_of[new]
        g = groups[i]
        if (after != i or g.template is not None or g.phases or len(chunked[i]) != 1
                or chunked[i][0].label or element_type(state.stored) != element_type(state.dtype)):
            continue
        try:
            gen = generate(new, None, materialized, lambda v: id(v), options,
                           band_only=read_only_in_band(new, users, outputs), inplace=state,
                           stores=g.stores)
        except NotInPlace:
            continue
        chunked[i] = [Chunk(gen)]
        out[new] = state
    return out


class Asked:
    """A set's `in`, each answer recorded: the membership a kernel's generation read."""

    def __init__(self, values) -> None:
        self.values = values
        self.answers: dict[Value, bool] = {}

    def __contains__(self, v) -> bool:
        found = v in self.values
        self.answers[v] = found
        return found


def _generate(group: Group, materialized: set[Value], band_only: bool,
              options: CompileOptions, made: dict) -> Generated:
    """The group's kernel (kernels.generate), or the one generated for the same group in
    an earlier round of build_plan's loop where every value whose materialization that
    generation asked about is materialized as it was then: the kernel is a function of
    those answers, so a round that cuts a few kernels generates only the kernels the cut
    changed. `made` holds the earlier rounds' kernels."""
    phases = [(p.template, p.root) for p in group.phases]
    key = (group.root, group.template, *phases, *group.stores, band_only)
    earlier = made.get(key)
    if earlier is not None and all((v in materialized) == was
                                   for v, was in earlier[0].items()):
        return earlier[1]
    asked = Asked(materialized)
    gen = generate(group.root, group.template, asked, lambda v: id(v), options, phases,
                   band_only, stores=group.stores)
    made[key] = (asked.answers, gen)
    return gen


def share_buffers(spans: list[tuple[Value, int, int]], size) -> list[list[Value]]:
    """The temporary buffers of the values of `spans` (value, the kernel writing it, its
    last reader), each as its tenants, largest first: two values share a buffer where
    they agree in storage type and their spans do not overlap. Greedy by size: the
    values, largest first, each into the smallest buffer already made that is free over
    its whole span (its tenants so far are as large or larger), else a new one; the
    buffer's bytes are its first tenant's. Placing the large values first, with every
    span known, keeps a small value that lives long (a [B*H, S, E] copy of V held to the
    backward) out of a large value's way, which a first-come reuse of freed buffers
    cannot. `size`: a value -> (its bytes, its storage type)."""
    order = sorted(range(len(spans)), key=lambda j: (-size(spans[j][0])[0], spans[j][1]))
    tenants: list[list[Value]] = []
    busy: list[list[tuple[int, int]]] = []  # each buffer's spans, sorted
    kinds: list[tuple[int, str]] = []
    for j in order:
        v, first, last = spans[j]
        nbytes, kind = size(v)
        home = None
        for b in range(len(tenants)):
            if kinds[b][1] != kind or (home is not None and kinds[b][0] >= kinds[home][0]):
                continue
            k = bisect.bisect_left(busy[b], (first, first))
            if (k == len(busy[b]) or busy[b][k][0] > last) and \
                    (k == 0 or busy[b][k - 1][1] < first):
                home = b
        if home is None:
            home = len(tenants)
            tenants.append([])
            busy.append([])
            kinds.append((nbytes, kind))
        tenants[home].append(v)
        bisect.insort(busy[home], (first, last))
    return tenants


# reuse_in_order: a free buffer larger than this many times a value's bytes is not its home
REUSE_MAX_RATIO = 4


def reuse_in_order(spans: list[tuple[Value, int, int]], size) -> list[list[Value]]:
    """share_buffers' answer by reuse in kernel order: each value, as its kernel runs,
    takes the smallest free buffer of at most REUSE_MAX_RATIO times its bytes (a small
    value would hold a large buffer as long as it lives), else grows the largest smaller
    free one, else gets a new one; a buffer is free after its tenant's last reader."""
    tenants: list[list[Value]] = []
    nbytes: list[int] = []
    kinds: list[str] = []
    free: list[int] = []
    held: list[tuple[int, int]] = []  # (last reader, buffer): a heap
    for v, first, last in sorted(spans, key=lambda s: s[1]):
        while held and held[0][0] < first:
            free.append(heapq.heappop(held)[1])
        need, kind = size(v)
        usable = [b for b in free if kinds[b] == kind]
        fits = [b for b in usable if need <= nbytes[b] <= REUSE_MAX_RATIO * need]
        small = [b for b in usable if nbytes[b] < need]
        if fits or small:
            b = min(fits, key=nbytes.__getitem__) if fits else max(small, key=nbytes.__getitem__)
            free.remove(b)
            nbytes[b] = max(nbytes[b], need)
        else:
            b = len(tenants)
            tenants.append([])
            nbytes.append(need)
            kinds.append(kind)
        tenants[b].append(v)
        heapq.heappush(held, (last, b))
    return tenants


def temp_buffers(spans: list[tuple[Value, int, int]], size) -> list[list[Value]]:
    """The temporaries' buffers as their tenants: share_buffers' or reuse_in_order's,
    whichever takes fewer bytes (a buffer takes its largest tenant's). Neither is always
    the smaller: greedy by size is on training steps (Whisper 3.42 -> 3.01 GB), reuse in
    order on a few inference plans (level3/010 0.35 vs 0.40 GB)."""
    def total(tenants: list[list[Value]]) -> int:
        return sum(max(size(v)[0] for v in t) for t in tenants)

    return min(share_buffers(spans, size), reuse_in_order(spans, size), key=total)


def build_plan(graph: Graph, output_tree: str, torch_dtypes: dict[Value, str],
               options: CompileOptions) -> Plan:
    """Fuse, plan memory and generate every kernel; torch_dtypes gives the user-facing
    dtype of each graph input, output and state (int64 is held as i32 on the device). `options`:
    the precision and waves the kernels are generated for, `options.choose` picks each
    kernel's knobs (None: the templates' heuristic defaults), `options.limits` is what
    a kernel may bind on the device (None: anything). A fused kernel that reads more
    storage buffers than allowed is fused again with one of its inline values stored
    (`binding_cut`), until every kernel fits or none can be cut; a kernel binding more
    bytes of a buffer than one binding holds is split into chunks (chunks.py). What
    still does not fit, runtime.check_limits refuses, naming the kernel or buffer."""
    limits = options.limits
    same_state_storage(graph)
    nodes = live_nodes(graph)
    users, outputs = readers(nodes), set(graph.roots())
    store: frozenset[Value] = frozenset()
    made: dict[tuple, tuple[dict[Value, bool], Generated]] = {}  # _generate's kernels
    while True:
        groups = fuse(graph, nodes, store, options.waves)
        materialized = {g.root for g in groups}
        gens = [_generate(g, materialized, read_only_in_band(g.root, users, outputs),
                          options, made)
                for g in groups]
        chunked = [[Chunk(gen)] for gen in gens]
        space = None
        if limits is None:
            break
        # a put or update stored by the kernel that reads it (joining_puts,
        # joining_updates) binds its state whole, in one piece: where that kernel or the
        # state is larger, or an update's kernel binds too many buffers, it is a kernel
        unfit = {v for g, gen in zip(groups, gens) for v in gen.writes
                 if needs_split(gen, g.root, limits) or needs_split(gen, v, limits)
                 or Space(limits).segment(v) or v in g.stores
                 and len(used_bindings(gen.source)) > limits.max_bindings}
        if unfit:
            store |= unfit
            continue
        cuts = {binding_cut(g, materialized) for g, gen in zip(groups, gens)
                if len(used_bindings(gen.source)) > limits.max_bindings} - {None}
        if not cuts:  # kernels over more bytes than one binding holds: chunks
            split = [i for i, (g, gen) in enumerate(zip(groups, gens))
                     if needs_split(gen, g.root, limits)]
            packed = {v for i in split
                      for v in [groups[i].root, *materialized_reads(groups[i].root,
                                                                    materialized)]
                      if is_packed(v.stored)}
            if packed:  # packed halves are not chunked: such a value is held in f32
                for v in packed:
                    v.storage = None
                same_state_storage(graph)
                made.clear()  # kernels reading or writing them change
                continue
            phases = {i: [(p.template, p.root) for p in groups[i].phases] for i in split}
            space, hints = plan_segments(
                [unit_windows(groups[i].root, groups[i].template, phases[i], materialized,
                              limits) for i in split], limits)
            for i, hint in zip(split, hints):
                g = groups[i]
                parts = split_kernel(g.root, g.template, phases[i], materialized, options,
                                     space, hint)
                if parts:
                    chunked[i] = parts
                else:  # one of its inline values stored, then both parts chunked
                    cuts.add(large_read_cut(g, materialized, limits.max_bytes))
            cuts -= {None}
        if not cuts:
            break
        store |= cuts

    # Updates copied over their state by a kernel as early as it may run (early_updates).
    returned = set(graph.outputs) | {v for _, v in graph.writes} | {v for v, _ in graph.checks}

    def fits(v: Value) -> bool:
        return limits is None or (buffer_bytes(v.numel, v.stored) <= limits.max_bytes
                                  and not (space or Space(limits)).segment(v))

    # Cats whose pieces' kernels store into them in place (placements): their kernels gone
    placed: dict[Value, Value] = {}  # a piece's value -> the value it is stored into
    kept = {v for _, v in graph.writes} | {v for v, _ in graph.checks} | \
        {new for _, new in graph.updates}
    for ri, pieces in sorted(placements(groups, chunked, users, outputs | store, kept,
                                        fits).items(), reverse=True):
        made_here = {}
        for i, place in pieces:
            g = groups[i]
            gen = generate(g.root, g.template, materialized, lambda v: id(v), options,
                           place=place)
            if limits is not None and (len(used_bindings(gen.source)) > limits.max_bindings
                                       or needs_split(gen, place.root, limits)):
                break
            made_here[i] = gen
        else:
            for i, place in pieces:  # each computes the cat's elementwise ops too
                chunked[i] = [Chunk(made_here[i])]
                placed[groups[i].root] = place.root
                groups[i].members[:0] = [n for n in groups[ri].members if n.op == "ew"]
            del groups[ri], chunked[ri]

    homes, copies = put_homes(graph, groups, chunked, returned, fits, materialized, options)
    early = early_updates(graph, groups, chunked, returned, fits)
    # a put over its state is written where its kernel runs, a packed state's too (which
    # early_updates leaves to the narrowing copy at the end)
    early.update({g.root: i for i, g in enumerate(groups) if g.root in homes})
    state_of = {n: s for s, n in graph.updates if n in early}
    inplace = written_in_place(groups, chunked, early, state_of, materialized, users,
                               outputs, options)
    inplace.update(homes)
    # puts and updates stored by the kernel reading them (joining_puts, joining_updates):
    # over their state, where it runs
    stored_updates = {v: i for i, parts in enumerate(chunked) for chunk in parts
                      for v in chunk.gen.writes}
    update_of = {new: state for state, new in graph.updates}
    for v, i in stored_updates.items():
        early[v], inplace[v] = i, update_of[v]
    copy_of: dict[Value, Value] = {}  # a copy kernel's value -> the state it writes
    for new, after in sorted(early.items(), key=lambda e: -e[1]):
        if new in inplace:
            continue
        state = state_of[new]
        out = Value(new.shape, new.dtype, storage=new.storage)
        out.node = Node("ew", [new], {"fn": "copy"}, out)
        gen = generate(out, None, materialized | {out}, lambda v: id(v), options)
        groups.insert(after + 1, Group(out, members=[out.node]))
        chunked.insert(after + 1, [Chunk(gen)])
        copy_of[out] = state

    def source(v: Value, chunk: Chunk) -> Value:  # the value whose buffer a read binds
        w = chunk.windows.get(v)
        return v if w is None else w.value

    # Buffers: inputs and constants first, then intermediates by lifetime.
    buffers: list[Buffer] = []
    buffer_of: dict[Value, int] = {}
    constants: dict[int, np.ndarray] = {}

    def new_buffer(v: Value, kind: str) -> int:
        seg = 0 if limits is None else (space or Space(limits)).segment(v)
        buffers.append(Buffer(len(buffers), buffer_bytes(v.numel, v.stored), kind, v.stored,
                              seg))
        return len(buffers) - 1

    for v in graph.inputs:
        buffer_of[v] = new_buffer(v, "input")

    # The kernel order is the order of the groups; find each value's last reader.
    last_use: dict[Value, int] = {}
    for i, parts in enumerate(chunked):
        for chunk in parts:
            for v in map(lambda r: source(r, chunk), chunk.gen.reads):
                last_use[v] = i
                if v.kind == "const" and v not in buffer_of:
                    buffer_of[v] = new_buffer(v, "const")
                    constants[buffer_of[v]] = to_storage(v.data, v.stored)

    for state, _ in graph.updates:  # written by the call, whether or not a kernel reads it
        if state not in buffer_of:
            buffer_of[state] = new_buffer(state, "const")
            constants[buffer_of[state]] = to_storage(state.data, state.stored)
    for _, new in graph.updates:  # an update that is an input or a constant as it is
        if new.node is None and new not in buffer_of:
            buffer_of[new] = new_buffer(new, "const")
            constants[buffer_of[new]] = to_storage(new.data, new.stored)

    releases: dict[Value, int] = {}  # a value's last reader, where its buffer is freed
    for v, i in last_use.items():
        if v in materialized and (v not in outputs or v in early):
            releases[v] = i
    shared: list[tuple[Value, int]] = []  # (value, its kernel): placed by share_buffers
    first = {put: i for i, g in enumerate(groups) for put in [copies.get(g.root)] if put}
    first_piece: dict[Value, int] = {}
    for i, g in enumerate(groups):
        if g.root in placed:
            first_piece.setdefault(placed[g.root], i)
    for i, g in enumerate(groups):
        v = g.root
        if v in copies:
            continue  # in its put's buffer (below)
        if v in placed:  # the value its pieces fill, from the first piece's kernel on
            if first_piece[placed[v]] != i:
                continue
            v = placed[v]
        if v in copy_of or v in inplace:  # written over the state's own buffer
            buffer_of[v] = buffer_of[copy_of.get(v) or inplace[v]]
        elif v in returned:
            buffer_of[v] = new_buffer(v, "output")
        elif v in outputs and v not in early:  # kept until the copy after the kernels
            buffer_of[v] = new_buffer(v, "temp")
        elif limits and (space or Space(limits)).segment(v):
            buffer_of[v] = new_buffer(v, "temp")  # held in several device buffers: its own
        else:  # a put's value is in its buffer from its copy on
            shared.append((v, first.get(v, i)))
    spans = [(v, i, releases.get(v, len(groups))) for v, i in shared]
    def size(v: Value) -> tuple[int, str]:
        return buffer_bytes(v.numel, v.stored), v.stored

    for tenants in temp_buffers(spans, size):
        b = new_buffer(max(tenants, key=lambda v: size(v)[0]), "temp")
        buffer_of.update(dict.fromkeys(tenants, b))
    for copy, put in copies.items():
        buffer_of[copy] = buffer_of[put]
    for v in stored_updates:
        buffer_of[v] = buffer_of[inplace[v]]
    for piece, v in placed.items():
        buffer_of[piece] = buffer_of[v]

    def window(v: Value, w: Window | None) -> list[int] | None:
        """A binding's [offset, size]: its chunk's window, or the value's own bytes where
        its buffer (shared with a larger tenant) is larger than one binding holds."""
        if w is not None:
            return [w.offset, min(_aligned(w.nbytes), _aligned(buffers[buffer_of[v]].nbytes)
                                  - w.offset)]
        if limits is not None and buffers[buffer_of[v]].nbytes > limits.max_bytes:
            return [0, _aligned(buffer_bytes(v.numel, v.stored))]
        return None

    kernels = []
    for g, parts in zip(groups, chunked):
        ops = [n.attrs.get("fn", n.op) for n in reversed(g.members) if n.op not in
               ("reshape", "permute", "expand")]
        lines = sorted({n.source for n in g.members if n.source})
        name = "+".join(dict.fromkeys(ops)) or "copy"
        for chunk in parts:
            gen = chunk.gen
            reads = [source(v, chunk) for v in gen.reads]
            bindings = gen.binding_ids([buffer_of[v] for v in reads], buffer_of[g.root],
                                       [buffer_of[v] for v in gen.writes])
            wins = [window(v, chunk.windows.get(r)) for v, r in zip(reads, gen.reads)]
            wins = wins + [wins[i] for i in gen.views] + [window(v, None) for v in gen.writes]
            wins.append(window(placed.get(g.root, g.root), chunk.out))
            kernels.append(Kernel(name + (f" [chunk {chunk.label}]" if chunk.label else ""),
                                  gen.source, bindings, gen.grid, lines, str(gen.key),
                                  gen.knobs, gen.workgroup_bytes, gen.trusted,
                                  wins if any(w is not None for w in wins) else []))
    return Plan(
        buffers=buffers,
        kernels=kernels,
        inputs=[TensorSpec(buffer_of[v], v.shape, torch_dtypes[v]) for v in graph.inputs],
        outputs=[TensorSpec(None if v.kind == "empty" else buffer_of[v], v.shape,
                            torch_dtypes[v]) for v in graph.outputs],
        output_tree=output_tree,
        constants=constants,
        updates=[(buffer_of[new], buffer_of[state]) for state, new in graph.updates
                 if new not in early],
        state=[(state.name, TensorSpec(buffer_of[state], state.shape,
                                       torch_dtypes.get(state) or default_torch_name(state.dtype)))
               for state in [s for s, _ in graph.updates]
               + [s for s in graph.shared if s in buffer_of]],
        writes=[(i, TensorSpec(buffer_of[v], v.shape, torch_dtypes[graph.inputs[i]]))
                for i, v in graph.writes],
        checks=[(TensorSpec(buffer_of[v], v.shape, "bool"), message)
                for v, message in graph.checks],
    )


def _aligned(n: int) -> int:
    return (n + 15) // 16 * 16
