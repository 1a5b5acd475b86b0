"""kernelwright: compile unmodified PyTorch modules into WGSL kernels run on wgpu.

    compiled = kernelwright.compile(module, example_inputs)
    outputs = compiled(*inputs)          # torch tensors in, torch tensors out

    torch.compile(module, backend="kernelwright")

The pipeline, one module per stage (docs/ARCHITECTURE.md draws it):
capture -> ir (+ ops registry) -> schedule (fusion, memory) -> templates/codegen
-> plan -> runtime.
"""

from . import runtime
from .compiler import CompiledModule, compile, plan_module
from .ir import CompileError
from .plan import Plan, PlanFileError

__all__ = ["CompileError", "CompiledModule", "Plan", "PlanFileError", "compile", "plan_module",
           "runtime"]

from .dynamo import register as _register_dynamo  # noqa: E402

_register_dynamo()
