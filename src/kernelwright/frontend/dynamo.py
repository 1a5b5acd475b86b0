"""The torch.compile entry point: `torch.compile(model, backend="kernelwright")`.

Dynamo hands the backend an FX graph of the traced region and example inputs;
kernelwright compiles that graph like any module (capture.export_graph on the
GraphModule) and returns the CompiledModule as the region's callable. Dynamo
passes the model's parameters as inputs, so this path uploads them on every call
(an in-place change through `.data` bumps no version counter, so caching them by
version could return stale results); `kernelwright.compile` holds them on the GPU
as constants instead. Shapes are static: a new shape makes dynamo trace again.
"""

from __future__ import annotations

import time

import torch
from torch._dynamo.backends import registry

from ..compiler import CompiledModule, plan_module
from ..progress import Progress


def kernelwright_backend(gm: torch.fx.GraphModule, example_inputs):
    """Returns a callable that compiles `gm` for each concrete input signature it
    meets (dynamo may mark shapes dynamic; kernelwright plans are static)."""
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


def register() -> None:
    """Register the backend under "kernelwright" unless torch already knows the name:
    where the package is installed, torch finds it through the entry point
    (pyproject's torch_dynamo_backends) and registers it itself when it loads it, which
    imports this package; registering it here too would make that a duplicate."""
    known = set(getattr(registry, "_BACKENDS", {})) | set(getattr(registry, "_COMPILER_FNS", {}))
    if "kernelwright" not in known:
        registry.register_backend(name="kernelwright")(kernelwright_backend)
