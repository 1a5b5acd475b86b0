"""Kernel specs: what the search knows about each kernel of a compiled problem.

`capture_problem(model, inputs, choose)` compiles a module the way the compile path does
(plan_module, each kernel's knobs from `choose` or the compiler's own
choice: tuned knobs, never an optimized kernel), keeping each kernel's
`kernels.KernelRequest`. `kernel_specs(plan, requests, times)` then describes every
plan kernel as a `KernelSpec`: its WGSL, its bindings with the shapes and dtypes of
the values they hold (the plan's buffers are physical and may be larger), its grid
and knobs, the template's search space and a `variant(knobs)` function that
regenerates it, its rewrites (the same kernel by another lowering of its op, with
the same bindings: rewrite.py), a description and a reference (the fused IR ops, one line each, with
the user's source lines), and its share of the module's GPU time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .. import tune
from ..compiler import plan_module
from ..ir.ir import Value
from ..kernels import KernelRequest, KnobChooser
from ..plan import Plan
from .generator import Binding, Candidate, KernelSpec, bindings_of
from .rewrite import rewrites_of

ATTRS_CHARS = 160  # attributes shown per op in a reference


@dataclass
class Captured:
    """A compiled plan and the request behind each of its kernels (same order)."""

    plan: Plan
    requests: list[KernelRequest]


def capture_problem(model, inputs, choose: KnobChooser | None = None) -> Captured:
    """Compile `model` for `inputs`, keeping each kernel's request. Knobs come from
    `choose` when given, else from the compiler's choice (tune.compiler_choice): the
    search starts from what the compiler makes by itself."""
    inner = choose or tune.compiler_choice
    requests: list[KernelRequest] = []

    def keep(request: KernelRequest):
        requests.append(request)
        return inner(request)

    plan = plan_module(model, inputs, choose=keep)
    if len(requests) != len(plan.kernels) or any(
            str(r.key) != k.key for r, k in zip(requests, plan.kernels)):
        raise RuntimeError("the plan's kernels and the compiler's requests do not line up")
    return Captured(plan, requests)


def _shape(v: Value) -> str:
    return f"{v.dtype}[{','.join(map(str, v.shape))}]"


def reference_text(request: KernelRequest) -> str:
    """The IR ops this kernel computes, one line each, from its bindings to `out`."""
    names = {id(v): f"in{i}" for i, v in enumerate(request.default.reads)}
    lines: list[str] = []

    def name(v: Value) -> str:
        if id(v) in names:
            return names[id(v)]
        if v.kind == "scalar":
            return repr(v.scalar)
        if v.node is None:
            return f"<{v.kind} {_shape(v)}>"
        args = [name(x) for x in v.node.inputs]
        node = v.node
        fn = node.attrs.get("fn")
        attrs = {k: a for k, a in node.attrs.items() if k != "fn"}
        text = json.dumps(attrs, default=str) if attrs else ""
        if len(text) > ATTRS_CHARS:
            text = text[:ATTRS_CHARS] + "...}"
        op = node.op + (f".{fn}" if fn else "")
        label = f"t{len(lines)}"
        call = f"{label} = {op}({', '.join(args)}{', ' + text if text else ''})"
        lines.append(f"{call}  # {_shape(v)}" + (f"  <- {node.source}" if node.source else ""))
        names[id(v)] = label
        return label

    result = name(request.out)
    reads = [f"in{i}: {_shape(v)}" for i, v in enumerate(request.default.reads)]
    return "\n".join([f"# bindings: {', '.join(reads)}; out: {_shape(request.out)}", *lines,
                      f"out = {result}"])


def views_of(bindings: list[Binding]) -> list[int]:
    """The reads bound again after the reads (kernels.Generated.views)."""
    return [b.alias for b in bindings[:-1] if b.alias is not None]


def variant_of(request: KernelRequest):
    """A function knobs -> Candidate regenerating this kernel with other knobs."""
    def variant(knobs: dict) -> Candidate:
        gen = request.generate(knobs)
        if gen.key != request.key or [id(v) for v in gen.reads] != \
                [id(v) for v in request.default.reads]:
            raise ValueError("the knobs changed what the kernel computes")
        r = len(gen.reads)
        ids = gen.binding_ids(list(range(r)), r)
        return Candidate(gen.source, tuple(gen.grid), dict(gen.knobs),
                         note="knobs " + " ".join(f"{k}={v}" for k, v in gen.knobs.items()),
                         bindings=bindings_of(ids, gen.source, gen.reads, request.out))
    return variant


def kernel_specs(plan: Plan, requests: list[KernelRequest],
                 times_ms: list[float] | None = None) -> list[KernelSpec]:
    """A KernelSpec per plan kernel (`times_ms`: each kernel's GPU time, for profiles)."""
    total = sum(times_ms) if times_ms else 0.0
    specs = []
    for i, (kernel, request) in enumerate(zip(plan.kernels, requests)):
        bindings = bindings_of(kernel.bindings, kernel.source, request.default.reads,
                               request.out)
        ins = ", ".join(f"in{j} {_shape(v)}" for j, v in enumerate(request.default.reads))
        description = (f"{kernel.name}: a {request.kind} kernel computing out "
                       f"{_shape(request.out)} from {ins or 'nothing'}")
        if kernel.source_lines:
            description += "; from the user's lines:\n" + "\n".join(
                f"  {line}" for line in kernel.source_lines)
        profile = {"index": i, "kernels": len(plan.kernels)}
        if times_ms:
            profile.update(time_ms=times_ms[i], module_ms=total,
                           share=times_ms[i] / total if total else 0.0)
        specs.append(KernelSpec(
            key=request.spec_key, name=kernel.name, kind=request.kind, source=kernel.source,
            bindings=bindings, grid=tuple(kernel.grid), knobs=dict(kernel.knobs),
            description=description, reference=reference_text(request), profile=profile,
            knob_space=[dict(k) for k in request.space], variant=variant_of(request),
            rewrites=rewrites_of(request)))
    return specs
