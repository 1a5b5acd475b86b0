"""The torch.compile entry point: `torch.compile(model, backend="kernelwright")`.

Dynamo hands the backend an FX graph of the traced region and example inputs.
Inference (no input requires a gradient, or grad mode off): kernelwright compiles that
graph like any module (plan_module, capture.trace_graph on the GraphModule) and returns
the CompiledModule as the region's callable. Training (an input, typically a parameter,
requires a gradient): AOTAutograd splits the region into a forward and a backward ATen
graph (with capture's decompositions, attention under the math backend) and
kernelwright lowers each (`lower_aten_graph`), so that `loss.backward()` runs
kernelwright's kernels too. Dynamo passes the model's parameters as inputs, so this
path uploads them on every call (an in-place change through `.data` bumps no version
counter, so caching them by version could return stale results), and the forward
sends the tensors the backward needs back to the host: the compatibility path;
`kernelwright.compile` and `compile_training` hold parameters on the GPU. Shapes are
static: a new shape makes dynamo trace again.
"""

from __future__ import annotations

import operator
import re
import time

import torch
from torch._dynamo.backends import registry
from torch._dynamo.backends.common import aot_autograd
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..compiler import CompiledModule, plan_module
from ..ir.ir import CompileError
from ..lower.registry import lookup
from ..options import CompileOptions
from ..progress import Progress
from ..runtime.runtime import Device, default_device
from ..schedule.schedule import build_plan
from ..tune import choose_knobs
from ..tune.waves import device_waves
from .capture import check_nodes, decomposition_table, fx_to_ir, user_line


def kernelwright_backend(gm: torch.fx.GraphModule, example_inputs):
    """The backend: `training_backend` where an input requires a gradient under grad
    mode, else a callable that compiles `gm` for each concrete input signature it meets
    (dynamo may mark shapes dynamic; kernelwright plans are static)."""
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                       for a in example_inputs):
        return training_backend(gm, example_inputs)
    plans: dict[tuple, CompiledModule] = {}

    def run(*args):
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a
                    for a in args)
        compiled = plans.get(key)
        if compiled is None:
            t0 = time.perf_counter()
            compiled = CompiledModule(plan_module(gm, args, progress=Progress("torch.compile")))
            compiled.compile_seconds = time.perf_counter() - t0
            plans[key] = compiled
        return compiled(*args)  # Python numbers among args: those its key compiled in

    run.plans = plans
    return run


def training_backend(gm: torch.fx.GraphModule, example_inputs, device: Device | None = None):
    """The region's forward and backward through AOTAutograd, each ATen graph lowered by
    kernelwright (`lower_aten_graph`) on `device` (None: the default device). The
    forward's and backward's CompiledModules are kept on the returned callable's
    `graphs` ("forward", "backward"; the backward once a backward ran)."""
    dev = device or default_device()
    graphs: dict[str, GraphRunner] = {}

    def compiler(kind: str):
        def compile_graph(fx: torch.fx.GraphModule, _inputs) -> GraphRunner:
            graphs[kind] = GraphRunner(fx, dev, kind)
            return graphs[kind]
        return compile_graph

    backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                           decompositions=decomposition_table())
    with sdpa_kernel(SDPBackend.MATH):  # its backward is plain ATen ops
        run = backend(gm, example_inputs)
    run.graphs = graphs
    return run


class GraphRunner:
    """One AOTAutograd graph compiled by kernelwright, called with AOTAutograd's boxed
    convention (a list of arguments it may clear). Outputs that are not tensors (the
    backward's None for an input without a gradient) are returned as the graph gives
    them. A graph with random ops (dropout in training mode) draws its key from torch's
    default generator at each call (torch.manual_seed repeats a run); the forward
    returns the masks the backward reads."""

    def __init__(self, fx: torch.fx.GraphModule, device: Device, kind: str) -> None:
        t0 = time.perf_counter()
        # in the instance's dict: dynamo's wrapper of the backward copies that, not the class
        self._boxed_call = True
        self.kind = kind
        self.compiled, self.outputs, self.random = lower_aten_graph(fx, device, kind)
        self.compile_seconds = time.perf_counter() - t0

    def __call__(self, args: list) -> list:
        inputs = list(args)
        args.clear()
        if self.random:
            inputs.append(torch.randint(-2**31, 2**31 - 1, (2,), dtype=torch.int32))
        outs = iter(self.compiled(*inputs))
        return [next(outs) if keep else value for keep, value in self.outputs]


def lower_aten_graph(fx: torch.fx.GraphModule, device: Device, kind: str = "graph"
                     ) -> tuple[CompiledModule, list[tuple[bool, object]], bool]:
    """An ATen FX graph (every placeholder a tensor input, static shapes) as a
    CompiledModule on `device`, and per output of the graph (True, None) where the
    CompiledModule returns it or (False, value) for a constant output (None). An op
    without a lowering is a CompileError naming the op and its source line; a symbolic
    shape is a CompileError (kernelwright plans are static). The flag last: whether the
    graph draws random numbers, its last input then the key (lower/random.key_tensor)."""
    for node in fx.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or any(not isinstance(d, int) for d in val.shape):
            raise CompileError(f"the {kind} graph's input '{node.name}' is {val!r}: "
                               "kernelwright compiles static shapes only (torch.compile("
                               "..., dynamic=False))")
    results = fx.graph.find_nodes(op="output")[0].args[0]
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    outputs: list[tuple[bool, object]] = []
    for r in results:
        val = r.meta.get("val") if isinstance(r, torch.fx.Node) else r
        if isinstance(val, torch.Tensor):
            outputs.append((True, None))
        elif val is None:
            outputs.append((False, None))
        else:
            raise CompileError(f"the {kind} graph returns {val!r}, not a tensor: kernelwright "
                               "compiles static shapes only")
    try:
        limits = device.binding_limits
    except Exception:  # noqa: BLE001 - no adapter: plan without a device's limits
        limits = None
    options = CompileOptions("strict", device_waves(device), limits, choose_knobs)
    keep = [i for i, (k, _) in enumerate(outputs) if k]
    _check_lowerings(fx, kind)
    try:
        b, torch_dtypes = fx_to_ir(fx, {}, keep, options=options, random=True)
    except CompileError as e:
        raise CompileError(f"torch.compile(backend='kernelwright'), {kind} graph: {e}") from e
    plan = build_plan(b.graph, "tuple", torch_dtypes, options)
    plan.scalars = {}
    return CompiledModule(plan, device), outputs, b.random_key is not None


def _check_lowerings(fx: torch.fx.GraphModule, kind: str) -> None:
    """A CompileError for the first op of `fx` without a lowering, naming the op, the
    module it comes from (for a backward op, the module whose forward it differentiates)
    and the user's source line, where dynamo recorded them."""
    checks = check_nodes(fx.graph)  # not lowered
    for node in [n for n in fx.graph.nodes if n.op == "call_function"]:
        name = str(node.target)
        if node.target is operator.getitem or lookup(name) is not None or node in checks:
            continue
        stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
        path, cls = list(stack.values())[-1] if stack else ("", "")
        path = re.sub(r"^L\['[^']*'\]\.?", "", str(path))
        where = f" in {path or 'the model'} ({getattr(cls, '__name__', cls)})" if stack else ""
        line = user_line(node)
        raise CompileError(f"torch.compile(backend='kernelwright'), {kind} graph: no lowering "
                           f"for ATen op '{name}'{where}" + (f"\n  at {line}" if line else ""))


def register() -> None:
    """Register the backend under "kernelwright" unless torch already knows the name:
    where the package is installed, torch finds it through the entry point
    (pyproject's torch_dynamo_backends) and registers it itself when it loads it, which
    imports this package; registering it here too would make that a duplicate."""
    known = set(getattr(registry, "_BACKENDS", {})) | set(getattr(registry, "_COMPILER_FNS", {}))
    if "kernelwright" not in known:
        registry.register_backend(name="kernelwright")(kernelwright_backend)
