"""GPU memory budgets: how much of the GPU a problem's worker may need, estimated.

``kernelwright bench --jobs N`` on one CUDA GPU starts a worker beside running ones
only while the budgets of all of them fit the GPU memory free at the start of the run
(runner.Admission). A problem's budget comes from its sizes, found without allocating
anything: ``get_init_inputs``, the model and ``get_inputs`` run with PyTorch's "meta"
device as the default device (shapes and dtypes, no data), and the model on those
inputs gives the output's size (when its ops have meta kernels; else the largest
input stands in for it). The budget is

    BUDGET_FACTOR x (inputs + parameters + output) + JOB_OVERHEAD_BYTES.

Why 4: at its peak a worker holds on the GPU, in PyTorch, the reference's copy of the
model (P), a trial's inputs as drawn and as placed for the reference (2 I) and its
output (O), and for a strict mismatch the float64 check's doubled copies (2 P + 2 I +
2 O), about 3 (P + I + O) with the drawn set counted once; beside it the candidate's
own Vulkan buffers hold its constants, inputs and output (P + I + O) plus
intermediates. JOB_OVERHEAD_BYTES is a CUDA context and its allocator's slack. An
estimate is a guess, so an out-of-memory error of a job run beside others is retried
alone (runner.py).

``python -m kernelwright.harness.budget [--size S] [--seed N] [--dtype D] [--set NAME=VALUE]
FILE...`` (the bench's options of those names) prints one JSON
object: ``capacity`` (free bytes of CUDA device 0, null without CUDA) and, when there
is a capacity, ``budgets`` (problem file -> `Estimate` fields, or null where the
problem cannot be sized this way). The runner calls it in a subprocess: problem files
are user code, and the runner's own process opens no CUDA context.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from .problems import DTYPES, Problem, load, parse_override
from .verify import describe_inputs

BUDGET_FACTOR = 4
JOB_OVERHEAD_BYTES = 1 << 30


@dataclass
class Estimate:
    """A problem's sizes in bytes and the GPU memory budget of its worker."""

    inputs: str  # the inputs' dtypes and shapes
    input_bytes: int
    param_bytes: int
    output_bytes: int
    output_known: bool  # False: the largest input stands in for the output
    budget_bytes: int


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in `value` (nested lists, tuples and dicts too)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    return 0


def budget_bytes(input_bytes: int, param_bytes: int, output_bytes: int) -> int:
    """The budget of a worker for these sizes (see the module docstring)."""
    return BUDGET_FACTOR * (input_bytes + param_bytes + output_bytes) + JOB_OVERHEAD_BYTES


def estimate(path: Path, size: str | None, seed: int = 0,
             overrides: dict[str, str] | None = None, dtype: str | None = None) -> Estimate:
    """The sizes of the problem file at `path` with SIZES[size] and `overrides` applied and
    cast to `dtype` (problems.load), found on the meta device; raises where the problem
    cannot run there at all."""
    loaded = load(Problem(path.stem, path, 0), size, overrides, dtype)
    inputs = loaded.inputs(seed, "meta")
    input_bytes = tensor_bytes(inputs)
    largest = max((tensor_bytes(x) for x in inputs), default=0)
    param_bytes, output_bytes, known = 0, largest, False
    try:
        with torch.device("meta"):
            model = loaded.build_model(seed)
        param_bytes = tensor_bytes(list(model.parameters()) + list(model.buffers()))
        with torch.no_grad():
            output_bytes, known = tensor_bytes(model(*inputs)), True
    except Exception:  # noqa: BLE001 - an op without a meta kernel, data-dependent code
        pass
    return Estimate(describe_inputs(inputs), input_bytes, param_bytes, output_bytes, known,
                    budget_bytes(input_bytes, param_bytes, output_bytes))


def cuda_capacity() -> int | None:
    """Free bytes on CUDA device 0 now, or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    free, _total = torch.cuda.mem_get_info(0)
    return int(free)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelwright.harness.budget",
                                     description="GPU memory budgets of problems (JSON).")
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=sorted(DTYPES))
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        type=parse_override, metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    overrides = dict(args.overrides)
    capacity = cuda_capacity()
    budgets: dict[str, dict | None] = {}
    if capacity is not None:
        for path in args.files:
            try:
                budgets[str(path)] = asdict(estimate(path, args.size, args.seed, overrides,
                                                     args.dtype))
            except (Exception, SystemExit):  # noqa: BLE001 - user code: its budget stays unknown
                budgets[str(path)] = None
    json.dump({"capacity": capacity, "budgets": budgets}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
