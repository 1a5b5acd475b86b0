"""kernelwright: compile unmodified PyTorch modules into WGSL kernels run on wgpu.

    compiled = kernelwright.compile(module, example_inputs)
    outputs = compiled(*inputs)          # torch tensors in, torch tensors out

    torch.compile(module, backend="kernelwright")

    step = kernelwright.compile_training(model, (x, y), loss_fn,
                                         optimizer=kernelwright.optim.AdamW(lr=1e-3))
    loss = step(x, y)                    # forward, backward and update on the GPU
    tokens = kernelwright.generate(causal_lm, input_ids, max_new_tokens=32)

The pipeline, one folder per stage (docs/ARCHITECTURE.md draws it):
frontend -> ir <- lower (the op registry) -> schedule (fusion, memory) ->
kernels/codegen -> plan -> runtime.
"""

from . import runtime
from .compiler import CompiledModule, compile, plan_module
from .generate import generate
from .ir.ir import CompileError
from .plan import Plan, PlanFileError
from .train import TrainingStep, compile_training, optim

__all__ = ["CompileError", "CompiledModule", "Plan", "PlanFileError", "TrainingStep", "compile",
           "compile_training", "generate", "optim", "plan_module", "register_cache_pytrees",
           "runtime"]

from .frontend.caches import register as register_cache_pytrees  # noqa: E402
from .frontend.dynamo import register as _register_dynamo  # noqa: E402

_register_dynamo()
register_cache_pytrees()  # where transformers is imported already
