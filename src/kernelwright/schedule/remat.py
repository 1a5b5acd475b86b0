"""Recomputation for late readers: a large value read early and again much later (a
training step's forward value that its backward reads, as attention's probabilities)
is computed a second time just before its late readers, from values held until then
anyway, rather than held in a buffer across everything between.

`recompute_late_reads` rewrites the graph before fusion: the copy's nodes go right
before the first late reader, and the late readers read the copy. Fusion and memory
planning then see a value whose readers are all early (its buffer is free after them)
and a copy whose readers are all late. The copy computes what the value computed, op
for op, so its kernels give the same bits.
"""

from __future__ import annotations

from ..dtypes import buffer_bytes
from ..ir.ir import MOVEMENT_OPS, Graph, Node, Value

# A value is recomputed only where holding it would cost this many bytes or more.
REMAT_MIN_BYTES = 8 << 20
# ... and only where this many nodes or more lie between its last early reader and its
# first late one (the forward and backward of one layer are further apart than that in
# a training step; not measured beyond the bundled workloads' plans).
REMAT_MIN_GAP = 64
# The most work a recomputation may cost, in operations per element of the value: a
# product over a short K (attention's scores, K = head_dim) and a row's softmax pass,
# not a wide layer's product (its K is the layer's width: recomputing it would cost
# that layer's forward again).
REMAT_MAX_OPS_PER_ELEMENT = 320
REMAT_MAX_NODES = 32  # computing nodes (views not counted) one recomputation may copy
# The ops a recomputation may copy: pure functions of their inputs.
REMAT_OPS = frozenset({"ew", "reduce", "matmul", "iota", *MOVEMENT_OPS})


def _work(n: Node) -> int:
    """The operations node `n` costs (a rough count: a multiply-add is two)."""
    if n.op == "matmul":
        return 2 * n.out.numel * n.inputs[0].shape[-1]
    if n.op == "reduce":
        return n.inputs[0].numel
    if n.op in MOVEMENT_OPS:
        return 0
    return n.out.numel


def _late_readers(v: Value, users: dict[Value, list[Node]], position: dict[Node, float],
                  min_gap: int) -> list[Node]:
    """The nodes that read v, directly or through views of it (movement ops), after the
    widest gap between v's computation and those readers, when that gap is `min_gap`
    nodes or more; else []."""
    readers: dict[int, Node] = {}
    todo = [v]
    while todo:
        for r in users.get(todo.pop(), []):
            if r.op in MOVEMENT_OPS:
                todo.append(r.out)
            else:
                readers[id(r)] = r
    at = sorted({position[r] for r in readers.values()})
    gaps = [b - a for a, b in zip([position[v.node]] + at, at)]
    widest = max(range(len(gaps)), key=gaps.__getitem__, default=None)
    if widest is None or widest == 0 or gaps[widest] < min_gap:
        return []  # widest == 0: no early reader, the value's own kernel moves nothing
    return sorted((r for r in readers.values() if position[r] >= at[widest]),
                  key=position.__getitem__)


def _copy_plan(v: Value, late: list[Node], start: float, position: dict[Node, float],
               users: dict[Value, list[Node]], roots: set[Value]) -> list[Node] | None:
    """The nodes to copy (producers first) so that the `late` readers, from position
    `start`, read values computed again: every value computed before `start` that they
    read, and backwards from it, that no other node reads at `start` or later (`roots`
    count as read at the end); None where that is more than REMAT_MAX_NODES computing
    nodes (or four times as many nodes), an op not in REMAT_OPS or more work than
    REMAT_MAX_OPS_PER_ELEMENT an element of v."""
    skip = {id(r) for r in late}

    def again(u: Value) -> bool:  # computed before start and held for the late readers only
        return (u.node is not None and position[u.node] < start and u not in roots
                and all(position[r] < start for r in users.get(u, []) if id(r) not in skip))

    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(u.node, False) for r in late for u in r.inputs
                                      if again(u)]
    while stack:
        n, expanded = stack.pop()
        if expanded:
            order.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op not in REMAT_OPS or len(seen) > 4 * REMAT_MAX_NODES:
            return None
        stack.append((n, True))
        for u in n.inputs:
            if again(u) and id(u.node) not in seen:
                stack.append((u.node, False))
    computing = [n for n in order if n.op not in MOVEMENT_OPS]
    if len(computing) > REMAT_MAX_NODES or \
            sum(map(_work, computing)) > REMAT_MAX_OPS_PER_ELEMENT * v.numel:
        return None
    return order


def _live(graph: Graph) -> list[Node]:
    """graph.nodes without those whose value nothing needs (a rewrite's old views)."""
    needed = {id(v) for v in graph.roots()}
    out = []
    for n in reversed(graph.nodes):
        if id(n.out) in needed:
            out.append(n)
            needed.update(id(u) for u in n.inputs)
    return out[::-1]


def recompute_late_reads(graph: Graph, min_bytes: int = REMAT_MIN_BYTES,
                         min_gap: int = REMAT_MIN_GAP) -> int:
    """Compute again, right before its late readers, each value of `min_bytes` or more
    that is read early and again `min_gap` nodes or more later (module docstring), where
    its recomputation reads only values held until then anyway and is cheap
    (`_copy_plan`). Returns how many values were recomputed."""
    roots = set(graph.roots())
    nodes = list(graph.nodes)
    # a copy's position lies between its first late reader's and the node before, in the
    # order the copies were made: the graph's order is kept without renumbering it
    position: dict[Node, float] = {n: j for j, n in enumerate(nodes)}
    users = graph.consumers()
    made = 0
    count = 0
    for v in (n.out for n in nodes):
        if v in roots or buffer_bytes(v.numel, v.stored) < min_bytes:
            continue
        late = _late_readers(v, users, position, min_gap)
        if not late:
            continue
        start = position[late[0]]
        plan = _copy_plan(v, late, start, position, users, roots)
        if plan is None:
            continue
        copies: dict[int, Value] = {}
        for n in plan:
            out = Value(n.out.shape, n.out.dtype, kind="node", name=f"{n.out.name}_again",
                        storage=n.out.storage)
            node = Node(n.op, [copies.get(id(u), u) for u in n.inputs], dict(n.attrs), out,
                        n.source, n.lowering)
            out.node = node
            copies[id(n.out)] = out
            made += 1
            position[node] = start - 0.5 + made * 1e-9
            for u in node.inputs:
                users.setdefault(u, []).append(node)
        for r in late:
            for u in r.inputs:
                if id(u) in copies and r in users.get(u, []):
                    users[u] = [x for x in users[u] if x is not r]
                    users.setdefault(copies[id(u)], []).append(r)
            r.inputs = [copies.get(id(u), u) for u in r.inputs]
        count += 1
    if count:
        graph.nodes[:] = sorted(position, key=position.__getitem__)
        graph.nodes[:] = _live(graph)
    return count
