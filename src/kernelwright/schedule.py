"""Passes from the primitive graph to a Plan: dead-code removal, fusion, memory planning.

Fusion decides which values are *materialized* (written to a buffer by a kernel)
and which are computed inline inside the kernels that read them. It walks the
nodes from the outputs back:

* graph outputs and template results are kernel roots unless fused as below;
* an elementwise or movement value whose readers all belong to one kernel joins
  that kernel (as part of its epilogue, or of a template's loader: prologue
  fusion); otherwise it is materialized and becomes a kernel of its own;
* a template whose readers all sit in one elementwise kernel becomes that kernel's
  template, the elementwise chain its epilogue (matmul + bias + activation is one
  kernel), provided the chain reads the template's result only at the element it
  stores (through elementwise ops and reshapes).

Memory planning then gives each materialized intermediate a buffer, reusing a
buffer once every kernel that reads its previous tenant has run. Each kernel's knobs
come from the tuning cache when it has an answer for the kernel on this device
(tune.choose_knobs), else from the template's heuristics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .ir import TEMPLATE_OPS, Graph, Node, Value
from .plan import Buffer, Kernel, Plan, TensorSpec
from .templates import KnobChooser, generate
from .tune import choose_knobs

ITEMSIZE = {"f32": 4, "i32": 4, "bool": 4}
NUMPY_TYPE = {"f32": np.float32, "i32": np.int32, "bool": np.uint32}


@dataclass(eq=False)
class Group:
    root: Value  # the stored value
    template: Node | None = None
    members: list[Node] = field(default_factory=list)


def live_nodes(graph: Graph) -> list[Node]:
    live: set[Node] = set()
    stack = [v.node for v in graph.outputs if v.node is not None]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(v.node for v in n.inputs if v.node is not None)
    return [n for n in graph.nodes if n in live]


def epilogue_chains(graph: Graph, nodes: list[Node], users) -> dict[Node, list[Node]]:
    """For each template node, the elementwise chain after it that its epilogue can
    compute: each link is the single reader of the previous one, an elementwise op or a
    reshape of the same size, and no link but the last is a graph output."""
    outputs = set(graph.outputs)
    chains = {}
    claimed: set[Node] = set()  # a node ends at most one template's chain
    for node in nodes:
        if node.op not in TEMPLATE_OPS:
            continue
        chain, tail = [], node
        while tail.out not in outputs:
            readers = users.get(tail.out, [])
            if len({id(r) for r in readers}) != 1:
                break
            nxt = readers[0]
            if (nxt.op not in ("ew", "reshape") or nxt.out.numel != node.out.numel
                    or nxt in claimed):
                break
            chain.append(nxt)
            claimed.add(nxt)
            tail = nxt
        chains[node] = chain
    return chains


def fuse(graph: Graph, nodes: list[Node]) -> list[Group]:
    users: dict[Value, list[Node]] = {}
    for n in nodes:
        for v in n.inputs:
            users.setdefault(v, []).append(n)
    chains = epilogue_chains(graph, nodes, users)
    tail_of = {n: chain[-1] for chain in chains.values() for n in chain}
    outputs = set(graph.outputs)
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
              and node not in tail_of):
            group = next(iter(readers))  # inlined into its only reader's kernel
        else:
            group = Group(v, template=node if node.op in TEMPLATE_OPS else None)
            groups.append(group)
        group.members.append(node)
        group_of[node] = group
    groups.reverse()
    return recompute_cheap_values(groups, graph, users)


RECOMPUTE_MAX_OPS = 8  # elementwise ops each reader may compute again instead of a load
RECOMPUTE_MAX_READS = 2  # buffers such a value may read (each one a binding of its readers)
READS_EACH_ELEMENT_ONCE = ("reduce", "scan")  # templates whose loaders touch an element once


def recompute_cheap_values(groups: list[Group], graph: Graph, users) -> list[Group]:
    """Fold back into its readers a value that `fuse` materialized only because several
    kernels read it, when it is a short elementwise expression of buffers and every
    reader touches each of its elements once (an elementwise kernel or a reduction):
    recomputing it then costs a few instructions, materializing it a write, a read and
    a kernel (softmax's exp(x - max) feeds both its sum and its division)."""
    roots = {g.root for g in groups}
    group_of = {n: g for g in groups for n in g.members}
    outputs = set(graph.outputs)
    folded: set[Group] = set()
    for g in groups:
        v = g.root
        if g.template is not None or v in outputs or v.node.op != "ew":
            continue
        readers = {group_of[u] for u in users.get(v, [])}
        if readers & folded or any(r.template is not None and r.template.op not in
                                   READS_EACH_ELEMENT_ONCE for r in readers):
            continue
        reads: set[Value] = set()
        if (_inline_ops(v, roots - {v}, reads) <= RECOMPUTE_MAX_OPS
                and len(reads) <= RECOMPUTE_MAX_READS):
            folded.add(g)
            roots.discard(v)
    return [g for g in groups if g not in folded]


def _inline_ops(v: Value, roots: set[Value], reads: set[Value]) -> float:
    """Elementwise ops computed when `v` is inlined down to buffers (collected in
    `reads`); inf when that would need a template's result that is not in a buffer."""
    if v.kind in ("input", "const") or v in roots:
        reads.add(v)
        return 0
    if v.node is None:
        return 0
    if v.node.op in TEMPLATE_OPS:
        return float("inf")
    own = 1 if v.node.op == "ew" else 0
    return own + sum(_inline_ops(x, roots, reads) for x in v.node.inputs)


def build_plan(graph: Graph, output_tree: str, torch_dtypes: dict[Value, str],
               choose: KnobChooser | None = choose_knobs) -> Plan:
    """Fuse, plan memory and generate every kernel; torch_dtypes gives the user-facing
    dtype of each graph input and output (int64 is held as i32 on the device). `choose`
    picks each kernel's knobs (None: the templates' heuristic defaults)."""
    nodes = live_nodes(graph)
    groups = fuse(graph, nodes)
    materialized = {g.root for g in groups}

    # Buffers: inputs and constants first, then intermediates by lifetime.
    buffers: list[Buffer] = []
    buffer_of: dict[Value, int] = {}
    constants: dict[int, np.ndarray] = {}

    def new_buffer(v: Value, kind: str) -> int:
        buffers.append(Buffer(len(buffers), max(4, v.numel * ITEMSIZE[v.dtype]), kind, v.dtype))
        return len(buffers) - 1

    for v in graph.inputs:
        buffer_of[v] = new_buffer(v, "input")

    # The kernel order is the order of the groups; find each value's last reader.
    gens = []
    last_use: dict[Value, int] = {}
    outputs = set(graph.outputs)
    for i, g in enumerate(groups):
        gen = generate(g.root, g.template, materialized, lambda v: id(v), choose)
        gens.append(gen)
        for v in gen.reads:
            last_use[v] = i
            if v.kind == "const" and v not in buffer_of:
                buffer_of[v] = new_buffer(v, "const")
                constants[buffer_of[v]] = np.ascontiguousarray(v.data, dtype=NUMPY_TYPE[v.dtype])

    free: list[int] = []  # temp buffer ids free for reuse
    releases: dict[int, list[Value]] = {}
    for v, i in last_use.items():
        if v in materialized and v not in outputs:
            releases.setdefault(i, []).append(v)
    for i, g in enumerate(groups):
        v = g.root
        if v in outputs:
            buffer_of[v] = new_buffer(v, "output")
        else:
            need = max(4, v.numel * ITEMSIZE[v.dtype])
            fits = [b for b in free if buffers[b].nbytes >= need and buffers[b].dtype == v.dtype]
            if fits:
                b = min(fits, key=lambda b: buffers[b].nbytes)
                free.remove(b)
                buffer_of[v] = b
            else:
                buffer_of[v] = new_buffer(v, "temp")
        # Buffers read for the last time by this kernel are free for the next ones.
        free.extend(buffer_of[r] for r in releases.get(i, []))

    kernels = []
    for g, gen in zip(groups, gens):
        bindings = gen.binding_ids([buffer_of[v] for v in gen.reads], buffer_of[g.root])
        ops = [n.attrs.get("fn", n.op) for n in reversed(g.members) if n.op not in
               ("reshape", "permute", "expand")]
        lines = sorted({n.source for n in g.members if n.source})
        kernels.append(Kernel("+".join(dict.fromkeys(ops)) or "copy", gen.source, bindings,
                              gen.grid, lines, str(gen.key), gen.knobs, gen.workgroup_bytes))
    return Plan(
        buffers=buffers,
        kernels=kernels,
        inputs=[TensorSpec(buffer_of[v], v.shape, torch_dtypes[v]) for v in graph.inputs],
        outputs=[TensorSpec(buffer_of[v], v.shape, torch_dtypes[v]) for v in graph.outputs],
        output_tree=output_tree,
        constants=constants,
    )

