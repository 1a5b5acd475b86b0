"""The user-facing compile path: module -> capture -> IR -> schedule -> plan -> runtime.

`compile(module, example_inputs)` returns a `CompiledModule`: call it with torch
tensors of the compiled shapes and dtypes; it returns torch tensors computed by
kernelwright's WGSL kernels alone.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
import warnings

import numpy as np
import torch

from . import templates
from .capture import export_graph, fx_to_ir, to_device_array
from .ir import GraphBuilder
from .plan import Plan
from .runtime import Device, Executable, default_device
from .schedule import build_plan
from .tune import device_waves

TORCH_DTYPE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
               "float64": torch.float64, "int64": torch.int64, "int32": torch.int32,
               "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
               "bool": torch.bool}


def plan_module(module: torch.nn.Module, example_inputs, precision: str = "strict",
                device: Device | None = None) -> Plan:
    """Capture and schedule a module into a Plan for precision mode `precision`
    (templates.precision; compile() decides whether a device can run it), the waves
    of `device` (None: the default device; tune.device_waves, measured there once per
    device, the only GPU work) and the storage buffers its kernels may bind
    (Device.max_bindings; no limit where no device can be opened)."""
    try:
        max_bindings = (device or default_device()).max_bindings
    except Exception:  # noqa: BLE001 - no adapter: plan without a device's limits
        max_bindings = None
    with templates.waves(device_waves(device)), _collector_paused():
        return _plan(module, example_inputs, precision, max_bindings)


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while planning: a plan's graph is hundreds
    of thousands of objects that all stay alive until it is built, and each full
    collection walked them all again (a 6-layer bidirectional GRU over 512 steps,
    scripts/compile_time.py: about 20% of its planning time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _plan(module: torch.nn.Module, example_inputs, precision: str,
          max_bindings: int | None) -> Plan:
    ep = export_graph(module, example_inputs)
    sig = ep.graph_signature
    constants = {}
    for spec in sig.input_specs:
        if spec.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            t = ep.state_dict.get(spec.target)
            if t is None:
                t = ep.constants[spec.target]
            constants[spec.arg.name] = t
    user_outputs = [i for i, spec in enumerate(sig.output_specs)
                    if spec.kind.name == "USER_OUTPUT"]
    builder, torch_dtypes = fx_to_ir(ep.graph_module, constants, user_outputs)
    # A module returning one tensor gets one back; tuples and lists get a tuple.
    out_spec = ep.call_spec.out_spec
    single = out_spec is None or (out_spec.num_leaves == 1 and out_spec.type not in (tuple, list))
    with templates.precision(precision):
        return build_plan(builder.graph, "single" if single else "tuple", torch_dtypes,
                          max_bindings=max_bindings)


class CompiledModule:
    """A compiled plan bound to a device, called like the module it came from."""

    precision = "strict"  # the mode its kernels were made for: "strict" or "accelerated-f16"

    def __init__(self, plan: Plan, device: Device | None = None,
                 compile_seconds: float = 0.0) -> None:
        self.plan = plan
        self.exe = Executable(plan, device)
        self.compile_seconds = compile_seconds
        self._timing_sets: tuple[list, list[list[np.ndarray]]] | None = None

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
            arrays.append(to_device_array(t))
        return arrays

    def __call__(self, *inputs, poison: bool = False):
        arrays = self._arrays(inputs)
        if poison:
            self.exe.poison()
        outs = [self._to_torch(a, spec) for a, spec in
                zip(self.exe.run(arrays), self.plan.outputs)]
        return outs[0] if self.plan.output_tree == "single" else tuple(outs)

    @staticmethod
    def _to_torch(a: np.ndarray, spec) -> torch.Tensor:
        t = torch.from_numpy(a.copy())
        if a.dtype == np.uint32:
            t = t.view(torch.int32)
        return t.to(TORCH_DTYPE[spec.torch_dtype])

    def gpu_times_ms(self, inputs_list, reps: int) -> list[float]:
        """Per-call GPU time (ms, from timestamps) over `reps` calls, rotating inputs."""
        # Timing calls this in rounds with the same input sets: convert them once.
        if self._timing_sets is None or self._timing_sets[0] is not inputs_list:
            self._timing_sets = (inputs_list, [self._arrays(inp) for inp in inputs_list])
        return self.exe.gpu_times_ms(self._timing_sets[1], reps)

    def kernel_times_ms(self, *inputs) -> list[tuple[str, float]]:
        """GPU time of each kernel of one call."""
        times = self.exe.kernel_times_ms(self._arrays(inputs))
        return [(k.name, t) for k, t in zip(self.plan.kernels, times)]


def compile(module: torch.nn.Module, example_inputs, device: Device | None = None,
            precision: str | None = None) -> CompiledModule:
    """Compile `module` for `example_inputs`' shapes. `precision`: "strict" (fp32, the
    default) or "accelerated" (matmuls with f16 operands and f32 accumulation on the
    cooperative-matrix units, where the device has them; else a warning and strict);
    None reads KERNELWRIGHT_PRECISION. The result's `precision` says which it got."""
    t0 = time.perf_counter()
    dev = device or default_device()
    mode = resolve_precision(precision, dev)
    plan = plan_module(module, example_inputs, mode, dev)
    cm = CompiledModule(plan, dev)
    cm.precision = PRECISION_LABELS[mode]
    cm.compile_seconds = time.perf_counter() - t0
    return cm


# -- precision modes --------------------------------------------------------------------
PRECISION_LABELS = {"strict": "strict", "accelerated": "accelerated-f16"}
_ACCELERATED: dict[int, str | None] = {}  # id(Device) -> why accelerated kernels cannot run


def resolve_precision(precision: str | None, device: Device) -> str:
    """The precision mode of a compile: `precision`, else KERNELWRIGHT_PRECISION, else
    "strict". "accelerated" stays so only on a device where accelerated_unavailable finds
    nothing against it; elsewhere a warning says why and the compile is strict."""
    mode = (precision or os.environ.get("KERNELWRIGHT_PRECISION", "") or "strict").strip().lower()
    if mode not in templates.PRECISIONS:
        raise ValueError(f"precision {mode!r} is none of {templates.PRECISIONS}")
    if mode == "accelerated":
        why = accelerated_unavailable(device)
        if why is not None:
            warnings.warn(f"accelerated precision is not available on {device.description}: "
                          f"{why}; compiling strict fp32 kernels", stacklevel=3)
            return "strict"
    return mode


def accelerated_unavailable(device: Device) -> str | None:
    """Why `device` cannot run the accelerated mode's kernels (None: it can). Asked once
    per device: it needs the cooperative-matrix, shader-f16 and subgroup features, and a
    small product with partial tiles on every side through the real template
    (matmul_coop) must match the same product of the f16-rounded operands."""
    key = id(device)
    if key not in _ACCELERATED:
        _ACCELERATED[key] = _probe_accelerated(device)
    return _ACCELERATED[key]


def _probe_accelerated(device: Device) -> str | None:
    if not device.has_coop_matrix:
        why = f" ({device.coop_error})" if device.coop_error else ""
        return f"the device has no cooperative-matrix feature{why}"
    for feature in ("shader-f16", "subgroup"):
        if feature not in device.device.features:
            return f"the device has no {feature} feature"
    m, k, n = 40, 50, 72
    b = GraphBuilder()
    x, y = b.input((m, k), "f32", "x"), b.input((k, n), "f32", "y")
    out = b.matmul(x, y)
    b.graph.outputs.append(out)
    with templates.precision("accelerated"):
        plan = build_plan(b.graph, "single", {x: "float32", y: "float32", out: "float32"},
                          choose=None)
    rng = np.random.default_rng(0)
    xs, ys = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
    try:
        (got,) = Executable(plan, device).run([xs, ys])
    except Exception as exc:  # noqa: BLE001 - the shader or the driver refused it
        return f"the cooperative-matrix kernel does not build or run: {type(exc).__name__}: {exc}"
    want = xs.astype(np.float16).astype(np.float32) @ ys.astype(np.float16).astype(np.float32)
    err = float(np.nanmax(np.abs(got - want))) if np.isfinite(got).all() else float("inf")
    if err > 1e-3 * (1.0 + float(np.abs(want).max())):
        return (f"the cooperative-matrix kernel computes wrong results (max |diff| {err:.3g} on "
                f"a {m}x{k}x{n} product; bench/coop_matmul.py tries its variants)")
    return None
