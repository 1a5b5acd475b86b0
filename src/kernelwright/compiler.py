"""The user-facing compile path: module -> capture -> IR -> schedule -> plan -> runtime.

`compile(module, example_inputs)` returns a `CompiledModule`: call it with torch
tensors of the compiled shapes and dtypes; it returns torch tensors computed by
kernelwright's WGSL kernels alone.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from .capture import export_graph, fx_to_ir, to_device_array
from .plan import Plan
from .runtime import Device, Executable
from .schedule import build_plan

TORCH_DTYPE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
               "float64": torch.float64, "int64": torch.int64, "int32": torch.int32,
               "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
               "bool": torch.bool}


def plan_module(module: torch.nn.Module, example_inputs) -> Plan:
    """Capture and schedule a module into a Plan (no GPU work)."""
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
    return build_plan(builder.graph, "single" if single else "tuple", torch_dtypes)


class CompiledModule:
    """A compiled plan bound to a device, called like the module it came from."""

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
            ) -> CompiledModule:
    t0 = time.perf_counter()
    plan = plan_module(module, example_inputs)
    cm = CompiledModule(plan, device)
    cm.compile_seconds = time.perf_counter() - t0
    return cm
