"""The user-facing compile path: module -> capture -> IR -> schedule -> plan -> runtime.

`compile(module, example_inputs)` returns a `CompiledModule`: call it with torch
tensors of the compiled shapes and dtypes; it returns torch tensors computed by
kernelwright's WGSL kernels alone, in the structure the module returns them (a tensor,
tuples, lists, dicts, ModelOutput-like classes registered with torch's pytree).
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
import warnings

import numpy as np
import torch
from torch.utils import _pytree as pytree

from .dtypes import host_tensor, is_packed, torch_dtype
from .frontend import caches
from .frontend.capture import (
    Captured,
    export_graph,
    from_exported,
    fx_to_ir,
    to_device_array,
    trace_graph,
)
from .ir.ir import CompileError, GraphBuilder
from .kernels import KnobChooser, matrix_unit
from .options import PRECISIONS, CompileOptions, MatrixUnit
from .plan import Plan
from .progress import QUIET, Progress
from .runtime.runtime import Device, Executable, default_device
from .schedule.schedule import build_plan
from .tune import choose_knobs
from .tune.waves import device_waves


def plan_module(module: torch.nn.Module, example_inputs, precision: str = "strict",
                device: Device | None = None, progress: Progress = QUIET,
                choose: KnobChooser | None = None) -> Plan:
    """Capture and schedule a module into a Plan for precision mode `precision`
    (options.CompileOptions; compile() decides whether a device can run it), the waves
    of `device` (None: the default device; tune.waves.device_waves, measured there once per
    device, the only GPU work) and what its kernels may bind
    (Device.binding_limits; no limit where no device can be opened). `progress` reports
    stages that run long. `choose` picks each kernel's knobs (None: tune.choose_knobs,
    the tuning cache's answer by KERNELWRIGHT_TUNE). The module is captured by one trace
    (capture.trace_graph); where that cannot capture it, or lowering its graph fails, by
    torch.export (capture.export_graph: its errors name the user's source line)."""
    return _plan(module, example_inputs, precision, device, progress, choose)[0]


def _plan(module: torch.nn.Module, example_inputs, precision: str, device: Device | None,
          progress: Progress, choose: KnobChooser | None = None,
          made: dict | None = None, shared: frozenset[str] = frozenset()
          ) -> tuple[Plan, list[tuple[str, torch.Tensor]]]:
    """The plan, and the module's tensors (parameters, buffers) it holds as constants.
    `made`: arrays made from them by an earlier plan (GraphBuilder.made); `shared`: the
    names of the state another plan sharing this one's updates."""
    try:
        limits = (device or default_device()).binding_limits
    except Exception:  # noqa: BLE001 - no adapter: plan without a device's limits
        limits = None
    with progress.stage("measuring the device's waves"):
        waves = device_waves(device)
    matrix = None
    if precision == "accelerated":
        dev = device or default_device()
        matrix = device_matrix(dev)
        if matrix is None:
            raise ValueError(f"precision 'accelerated' on {dev.description}: "
                             f"{_no_matrix_unit(dev)} (compile() falls back to strict)")
    options = CompileOptions(precision, waves, limits, choose or choose_knobs, matrix)
    caches.register()  # transformers' caches among the arguments or outputs
    with _collector_paused():
        with progress.stage("capture"):
            captured = trace_graph(module, example_inputs)
            if captured is not None:
                try:
                    builder, torch_dtypes = _lower(captured, options, made, shared)
                except CompileError:  # exported below: its error names the source line
                    captured = None
            if captured is None:
                captured = from_exported(export_graph(module, example_inputs))
                builder, torch_dtypes = _lower(captured, options, made, shared)
        with progress.stage(f"scheduling {len(builder.graph.nodes)} operations"):
            tree = output_tree(captured.out_spec)
            if tree == "single" and not builder.graph.outputs:  # forward returned None
                tree = "none"
            plan = build_plan(builder.graph, tree, torch_dtypes, options)
    plan.scalars = captured.scalars
    if caches.found(list(example_inputs)):  # its lengths are baked in: calls must match
        plan.input_tree = pytree.tree_structure(list(example_inputs), is_leaf=_is_none)
    return plan, captured.weights


def _is_none(x) -> bool:
    return x is None


def _lower(captured: Captured, options: CompileOptions, made: dict | None = None,
           shared: frozenset[str] = frozenset()) -> tuple[GraphBuilder, dict]:
    """The captured graph in IR (capture.fx_to_ir)."""
    return fx_to_ir(captured.graph_module, captured.constants, captured.user_outputs,
                    captured.mutations, options=options, made=made,
                    shared={p: n for p, n in captured.names.items() if n in shared})


def output_tree(spec: pytree.TreeSpec | None) -> str | pytree.TreeSpec:
    """Plan.output_tree for an exported program's output spec: 'single' for one tensor,
    'tuple' for a flat tuple, else the spec itself (unflattened at each call)."""
    if spec is None or spec.is_leaf():
        return "single"
    children = spec.children() if hasattr(spec, "children") else spec.children_specs
    if spec.type is tuple and all(c.is_leaf() for c in children):
        return "tuple"
    return spec


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while planning: a plan's graph is hundreds
    of thousands of objects that all stay alive until it is built, and each full
    collection walked them all again (a 6-layer bidirectional GRU over 512 steps,
    tools/compile_time.py: about 20% of its planning time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class CompiledModule:
    """A compiled plan bound to a device, called like the module it came from: with the
    same arguments (tensors of the compiled shapes and dtypes, nested in lists and
    tuples as at compile time; Python numbers and None equal to those compiled, which
    the kernels hold as constants), returning the same structure. `weights` are the
    module's parameters and buffers the kernels hold as constants: a call raises a
    RuntimeError when one of them changed since compile (`changed_weights`)."""

    precision = "strict"  # the mode its kernels were made for: "strict" or "accelerated-f16"

    def __init__(self, plan: Plan, device: Device | None = None,
                 compile_seconds: float = 0.0,
                 weights: list[tuple[str, torch.Tensor]] | None = None,
                 share_state: CompiledModule | None = None) -> None:
        self.plan = plan
        caches.register()  # a loaded plan's calls flatten a cache passed in
        # the other's constants are shared only while its weights are what it uploaded
        self.exe = Executable(plan, device, share_state.exe if share_state else None,
                              share_constants=share_state is not None
                              and not share_state.changed_weights())
        self.compile_seconds = compile_seconds
        self._weights = [(name, t, _version(t), t.data_ptr()) for name, t in weights or []]
        self.made: dict = {}  # host arrays made from the weights (GraphBuilder.made)
        self._timing_sets: tuple[list, list[list[np.ndarray]]] | None = None

    def changed_weights(self) -> list[str]:
        """The weights changed since compile: replaced (`p.data = ...`, new storage) or
        modified in place through the tensor (an optimizer step, `load_state_dict`, `p.mul_`
        under no_grad: its version counter moved). An in-place change through `p.data`
        moves no version counter and is not seen."""
        return [name for name, t, version, ptr in self._weights
                if t.data_ptr() != ptr or _version(t) != version]

    def _tensors(self, args) -> list:
        """The tensor arguments of a call, with the Python numbers checked against those
        the plan was compiled with."""
        leaves, tree = pytree.tree_flatten(list(args), is_leaf=_is_none)
        if self.plan.input_tree is not None and tree != self.plan.input_tree:
            raise ValueError(
                "the arguments' structure differs from the compiled one (a cache of other "
                "lengths, layers or classes; compiled for "
                f"{_cache_shapes(self.plan.input_tree)}, got {_cache_shapes(tree)}): a cache "
                "passed in is compiled for its lengths, so compile again for this one "
                "(kernelwright.generate decodes without recompiling)")
        scalars = self.plan.scalars
        want = len(self.plan.inputs) + len(scalars)
        if len(leaves) != want:
            raise ValueError(f"expected {want} inputs, got {len(leaves)}")
        tensors = []
        for i, a in enumerate(leaves):
            if i not in scalars:
                tensors.append(a)
            elif isinstance(a, torch.Tensor) or type(a) is not type(scalars[i]) \
                    or a != scalars[i]:
                raise ValueError(f"argument {i} is {a!r}, but this module was compiled with "
                                 f"{scalars[i]!r} there: Python numbers are constants of the "
                                 "compiled kernels; compile it again for another value, or "
                                 "pass a tensor")
        return tensors

    def _arrays(self, inputs) -> list[np.ndarray]:
        specs = self.plan.inputs
        if len(inputs) != len(specs):
            raise ValueError(f"expected {len(specs)} inputs, got {len(inputs)}")
        arrays = []
        for i, (t, spec) in enumerate(zip(inputs, specs)):
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"input {i} is {type(t).__name__}, expected a tensor")
            if tuple(t.shape) != spec.shape or str(t.dtype).replace("torch.", "") != \
                    spec.torch_dtype:
                raise ValueError(
                    f"input {i} is {str(t.dtype).replace('torch.', '')}{list(t.shape)} but this "
                    f"module was compiled for {spec.torch_dtype}{list(spec.shape)}; compile it "
                    "again for the new shape")
            arrays.append(to_device_array(t, self.plan.buffers[spec.buffer].dtype))
        return arrays

    def __call__(self, *args, poison: bool = False):
        if self._weights:
            changed = self.changed_weights()
            if changed:
                raise RuntimeError(
                    f"the module's weights changed since it was compiled ({', '.join(changed)}); "
                    "the compiled kernels hold the values of compile time: compile it again")
        arrays = self._arrays(self._tensors(args))
        if poison:
            self.exe.poison()
        outs = [self._to_torch(a, spec) for a, spec in
                zip(self.exe.run(arrays), self.plan.outputs)]
        written = []
        if self.plan.writes:  # inputs the module changes in place
            tensors = self._tensors(args)
            with torch.no_grad():
                for i, spec in self.plan.writes:
                    tensors[i].copy_(self._to_torch(self.exe.read(spec), spec))
                    written.append(tensors[i])
        tree = self.plan.output_tree
        if tree == "none":
            return None
        if tree == "single":
            return outs[0]
        if tree == "tuple":
            return tuple(outs)
        result = pytree.tree_unflatten(outs, tree)
        if self.plan.input_tree is not None:  # the cache passed in, updated, as eager's
            result = caches.into_given(args, result, written)
        return result

    def _to_torch(self, a: np.ndarray, spec) -> torch.Tensor:
        stored = "" if spec.buffer is None else self.plan.buffers[spec.buffer].dtype
        if is_packed(stored):  # the half tensor as its buffer holds it
            return host_tensor(a, stored)
        t = torch.from_numpy(a.copy())
        if a.dtype == np.uint32:
            t = t.view(torch.int32)
        return t.to(torch_dtype(spec.torch_dtype))

    def state(self) -> dict[str, torch.Tensor]:
        """The buffers the module changes in forward (batch norm's running statistics in
        training mode, a tensor attribute it assigns), as the compiled module holds them
        on the GPU after its last call: each call reads the value the call before left,
        as eager does with the module's own buffers (which stay unchanged here)."""
        return {name: self._to_torch(self.exe.read(spec), spec) for name, spec in self.plan.state}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Write state (names as `state()` gives them) into the GPU buffers the next call
        reads: a checkpoint's parameters and optimizer state, say. A name the plan has
        no state of, or a tensor of another shape, is a ValueError."""
        specs = dict(self.plan.state)
        for name, t in tensors.items():
            spec = specs.get(name)
            if spec is None or tuple(t.shape) != tuple(spec.shape):
                raise ValueError(f"state {name!r} {list(t.shape)}: the plan holds "
                                 f"{list(spec.shape) if spec else 'no such state'}")
        for name, t in tensors.items():
            self.exe.write(specs[name].buffer,
                           to_device_array(t, self.plan.buffers[specs[name].buffer].dtype))

    def gpu_times_ms(self, inputs_list, reps: int) -> list[float]:
        """Per-call GPU time (ms, from timestamps) over `reps` calls, rotating inputs."""
        # Timing calls this in rounds with the same input sets: convert them once.
        if self._timing_sets is None or self._timing_sets[0] is not inputs_list:
            self._timing_sets = (inputs_list,
                                 [self._arrays(self._tensors(inp)) for inp in inputs_list])
        return self.exe.gpu_times_ms(self._timing_sets[1], reps)

    def kernel_times_ms(self, *inputs) -> list[tuple[str, float]]:
        """GPU time of each kernel of one call."""
        times = self.exe.kernel_times_ms(self._arrays(self._tensors(inputs)))
        return [(k.name, t) for k, t in zip(self.plan.kernels, times)]


def compile(module: torch.nn.Module, example_inputs, device: Device | None = None,
            precision: str | None = None, progress: float | None = 2.0,
            share_state: CompiledModule | None = None,
            runtime: str | None = None,
            choose: KnobChooser | None = None) -> CompiledModule:
    """Compile `module` for `example_inputs`' shapes. `precision`: "strict" (fp32, the
    default) or "accelerated" (matmuls with f16 operands and f32 accumulation on the
    matrix units: Dawn's subgroup matrices or wgpu-native's cooperative matrices, where
    the device has them; else a warning and strict);
    None reads KERNELWRIGHT_PRECISION. The result's `precision` says which it got.

    Python numbers (and None) among the inputs are baked into the kernels: calls must
    pass the same values (another is a ValueError). The module's weights are uploaded
    once: a call after they changed is a RuntimeError (CompiledModule.changed_weights).
    float64 inputs and weights are computed in float32 (a warning says so; outputs keep
    the module's dtypes). A stage of the compile still running after `progress` seconds
    reports on stderr (None: never). Buffers the module changes in forward carry over
    from call to call on the GPU (`CompiledModule.state`); `share_state` (a module
    compiled from the same model for other shapes) makes both read and update one copy
    of them, and hold one copy of the weights they both read (any constant of the same
    bytes; not when the other's weights changed since its compile). Without a `device`,
    the default one of `runtime` ("wgpu": wgpu-native, "dawn": Dawn; None reads
    KERNELWRIGHT_RUNTIME, else wgpu-native; runtimes.py). `choose` picks each kernel's
    knobs (a kernels.KnobChooser; None: tune.choose_knobs, the tuning cache's answer by
    KERNELWRIGHT_TUNE)."""
    t0 = time.perf_counter()
    report = Progress(type(module).__name__, progress)
    dev = device or default_device(runtime)
    mode = resolve_precision(precision, dev)
    # what lowering made from the weights (a merged product's weight), made once for the
    # plans sharing them while they are unchanged
    made = {} if share_state is None or share_state.changed_weights() else share_state.made
    # the other's state, read from the buffers it updates (this plan may not update it)
    shared = frozenset(n for n, _ in share_state.plan.state) if share_state else frozenset()
    plan, weights = _plan(module, example_inputs, mode, dev, report, choose, made, shared)
    if share_state is not None:
        _check_constant_state(plan, share_state)
    with report.stage(f"building {len(plan.kernels)} pipelines"):
        cm = CompiledModule(plan, dev, weights=weights, share_state=share_state)
    cm.made = made
    cm.precision = PRECISION_LABELS[mode]
    cm.compile_seconds = time.perf_counter() - t0
    return cm


def _cache_shapes(tree: pytree.TreeSpec) -> str:
    """The caches of an argument structure, for a message: each cache's class and its
    layers' token counts (the length of what a layer holds, or its count attribute)."""
    found = []

    def walk(spec):
        if caches.is_cache_spec(spec):
            found.append(caches.describe(spec.context))
        for child in spec.children():
            walk(child)

    walk(tree)
    return "; ".join(found) or "no cache"


def _check_constant_state(plan: Plan, other: CompiledModule) -> None:
    """A CompileError where `plan` updates a buffer that `other` (compiled first, for
    shapes whose forward does not change it) holds as a constant: its kernels would
    read the compile-time value, not the one this plan writes."""
    theirs = {n for n, _ in other.plan.state}
    frozen = sorted({n for n, _ in plan.state} & {n for n, *_ in other._weights} - theirs)
    if frozen:
        raise CompileError(
            f"share_state: this plan changes {', '.join(frozen)}, which the other plan "
            "holds as constants (its forward did not change them at its shapes): compile "
            "first the plan that changes them, then the others with share_state")


def _version(t: torch.Tensor) -> int:
    """The tensor's version counter (-1 for an inference tensor, which has none)."""
    try:
        return t._version
    except RuntimeError:
        return -1


# -- precision modes --------------------------------------------------------------------
PRECISION_LABELS = {"strict": "strict", "accelerated": "accelerated-f16"}
_ACCELERATED: dict[int, str | None] = {}  # id(Device) -> why accelerated kernels cannot run


def resolve_precision(precision: str | None, device: Device) -> str:
    """The precision mode of a compile: `precision`, else KERNELWRIGHT_PRECISION, else
    "strict". "accelerated" stays so only on a device where accelerated_unavailable finds
    nothing against it; elsewhere a warning says why and the compile is strict."""
    mode = (precision or os.environ.get("KERNELWRIGHT_PRECISION", "") or "strict").strip().lower()
    if mode not in PRECISIONS:
        raise ValueError(f"precision {mode!r} is none of {PRECISIONS}")
    if mode == "accelerated":
        why = accelerated_unavailable(device)
        if why is not None:
            warnings.warn(f"accelerated precision is not available on {device.description}: "
                          f"{why}; compiling strict fp32 kernels", stacklevel=3)
            return "strict"
    return mode


def device_matrix(device: Device) -> MatrixUnit | None:
    """The matrix unit the accelerated matmul uses on `device` (kernels.matrix_unit: a
    subgroup-matrix config Dawn reports, else wgpu-native's cooperative matrices)."""
    return matrix_unit(device.features, device.subgroup_matrix_configs)


def _no_matrix_unit(device: Device) -> str:
    """Why `device` has no matrix unit for the accelerated matmul."""
    for feature in ("shader-f16", "subgroups"):
        if feature not in device.features:
            return f"the device has no {feature} feature"
    if "subgroup-matrix" in device.features:
        configs = ", ".join(f"{c.component}->{c.result} {c.m}x{c.n}x{c.k} subgroups "
                            f"{c.min_subgroup}-{c.max_subgroup}"
                            for c in device.subgroup_matrix_configs)
        return ("none of its subgroup-matrix configs has f16 operands, f32 results and one "
                f"subgroup size ({configs or 'none reported'})")
    why = f" ({device.coop_error})" if device.coop_error else ""
    return ("the device has neither subgroup matrices (Dawn's runtime) nor the "
            f"cooperative-matrix feature (wgpu-native){why}")


def accelerated_unavailable(device: Device) -> str | None:
    """Why `device` cannot run the accelerated mode's kernels (None: it can). Asked once
    per device: it needs a matrix unit (device_matrix), and a small product with partial
    tiles on every side through the real template (matmul_coop) must match the same
    product of the f16-rounded operands."""
    key = id(device)
    if key not in _ACCELERATED:
        _ACCELERATED[key] = _probe_accelerated(device)
    return _ACCELERATED[key]


def _probe_accelerated(device: Device) -> str | None:
    unit = device_matrix(device)
    if unit is None:
        return _no_matrix_unit(device)
    m, k, n = 40, 50, 72
    b = GraphBuilder()
    x, y = b.input((m, k), "f32", "x"), b.input((k, n), "f32", "y")
    out = b.matmul(x, y)
    b.graph.outputs.append(out)
    plan = build_plan(b.graph, "single", {x: "float32", y: "float32", out: "float32"},
                      CompileOptions("accelerated", matrix=unit))
    rng = np.random.default_rng(0)
    xs, ys = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
    try:
        (got,) = Executable(plan, device).run([xs, ys])
    except Exception as exc:  # noqa: BLE001 - the shader or the driver refused it
        return (f"the {unit.api} matmul does not build or run: "
                f"{type(exc).__name__}: {exc}")
    want = xs.astype(np.float16).astype(np.float32) @ ys.astype(np.float16).astype(np.float32)
    err = float(np.nanmax(np.abs(got - want))) if np.isfinite(got).all() else float("inf")
    if err > 1e-3 * (1.0 + float(np.abs(want).max())):
        return (f"the {unit.api} matmul computes wrong results (max |diff| {err:.3g} on "
                f"a {m}x{k}x{n} product; tools/coop_matmul.py tries its variants)")
    return None
