"""Rewrites: a kernel computed by another lowering of its template node's op.

An op lowered one way can note the others (ir.Node.lowering and .alternatives): a
convolution lowered to the direct kernel notes its implicit GEMM (one matmul over the
whole depth), one lowered to an implicit GEMM notes the direct kernel (lower/conv.py).
`rewrites_of(request)` builds, for the kernel of a `kernels.KernelRequest`, each
alternative in new nodes, puts it in place of the template node's output in a copy of
the kernel's epilogue (bias, activations: the ops between the template node and the
stored value) and generates that kernel with the other template.

A rewrite replaces the kernel one for one in the plan (search.swap), so it must bind
the same buffers: it is kept only when it reads exactly the kernel's buffers and
stores the same output; it is then generated with the kernel's reads bound first in
the kernel's order (kernels.fill_kernel `order`), its own vec4 views after them as
any template's. Whether it computes the same values is the sandbox's to check, as for
every candidate.
"""

from __future__ import annotations

from ..codegen.codegen import NotFusable
from ..ir.ir import CompileError, GraphBuilder, Node, Value
from ..kernels import KernelRequest, fill_kernel
from .generator import Candidate, Rewrite, bindings_of


def _substitute(out: Value, old: Value, new: Value, materialized) -> Value:
    """`out` with `old` replaced by `new`: the nodes between them copied, the rest
    (buffers, values that do not depend on `old`) shared."""
    memo: dict[int, Value] = {id(old): new}
    reaches: dict[int, bool] = {}

    def depends(v: Value) -> bool:
        if id(v) not in reaches:
            reaches[id(v)] = v is old or (
                v.kind == "node" and (v is out or v not in materialized)
                and any(depends(x) for x in v.node.inputs))
        return reaches[id(v)]

    def copy(v: Value) -> Value:
        if id(v) in memo:
            return memo[id(v)]
        if not depends(v):
            return v
        node = v.node
        c = Value(v.shape, v.dtype, name=v.name)
        c.node = Node(node.op, [copy(x) for x in node.inputs], node.attrs, c, node.source)
        memo[id(v)] = c
        return c

    return copy(out)


def _template_node(v: Value) -> Node:
    while v.node is not None and v.node.op == "reshape":
        v = v.node.inputs[0]
    if v.node is None:
        raise CompileError("the alternative lowering computes no node")
    return v.node


def _knob_text(knobs: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in knobs.items())


def rewrite_of(request: KernelRequest, name: str, build) -> Rewrite:
    """The kernel of `request` with its template node's op lowered as `name` (`build`:
    GraphBuilder -> the op's result); a CompileError, NotFusable or ValueError when that
    kernel cannot replace it one for one."""
    tnode = request.tnode
    gb = GraphBuilder(request.options)
    gb.source = tnode.source
    new = gb.reshape(build(gb), tnode.out.shape)
    new_tnode = _template_node(new)
    out = _substitute(request.out, tnode.out, new, request.materialized)
    natural = fill_kernel(out, new_tnode, request.materialized, request.buffer_of,
                          options=request.options)
    want = [request.buffer_of(v) for v in request.default.reads]
    got = [request.buffer_of(v) for v in natural.reads]
    if sorted(got) != sorted(want) or len(set(got)) != len(got):
        raise ValueError(f"the {name} lowering reads {len(got)} buffers, not the kernel's "
                         f"{len(want)}")
    reads = tuple(request.default.reads)
    default = fill_kernel(out, new_tnode, request.materialized, request.buffer_of, None,
                          (), reads, request.band_only, request.options)
    alt = KernelRequest(default, out, new_tnode, request.materialized, request.buffer_of,
                        (), reads, request.band_only, request.options)
    ids = [id(v) for v in reads]
    replaces = tnode.lowering or request.kind

    def variant(knobs: dict) -> Candidate:
        gen = alt.generate(knobs)
        if [id(v) for v in gen.reads] != ids:
            raise ValueError(f"the {name} lowering binds other buffers with knobs {knobs}")
        r = len(gen.reads)
        return Candidate(gen.source, tuple(gen.grid), {"rewrite": name, **gen.knobs},
                         note=f"rewrite {replaces} -> {name} ({gen.name} template), knobs "
                              + _knob_text(gen.knobs),
                         bindings=bindings_of(gen.binding_ids(list(range(r)), r), gen.source,
                                              gen.reads, request.out))

    return Rewrite(name, replaces, default.name, [dict(k) for k in alt.space], variant)


def rewrites_of(request: KernelRequest) -> list[Rewrite]:
    """Every alternative lowering of the kernel's template node that can replace it
    (see the module docstring), in the order the op noted them."""
    tnode = request.tnode
    if tnode is None or request.phases or not tnode.alternatives:
        return []
    found = []
    for name, build in tnode.alternatives.items():
        try:
            found.append(rewrite_of(request, name, build))
        except (CompileError, NotFusable, ValueError):
            continue
    return found
