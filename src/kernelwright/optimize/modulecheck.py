"""Whole-module verification of a plan, in a bench worker process.

A plan with optimized kernels swapped in is saved to a folder, and the bench harness
(bench/worker.py, started by bench.runner.run_worker, so in a subprocess with time
and memory limits) verifies and times it against PyTorch exactly as it does any
candidate: fresh inputs in several distributions, poisoned outputs, every element
within fp32 1e-4, and then GPU time against PyTorch eager. The candidate factory it
is given is a two-line file written next to the plan that calls `plan_factory`: the
factory loads the saved plan and refuses inputs of other shapes (an optimized plan is
for the shapes it was found at, so the harness's other-shape trial is off).
"""

from __future__ import annotations

import shutil
from pathlib import Path


def plan_factory(folder: str | Path):
    """A bench candidate factory that returns the plan saved in `folder`, bound to the
    default device, for example inputs of the plan's shapes and dtypes."""
    def make(model, example_inputs):
        from ..compiler import CompiledModule
        from ..plan import Plan

        plan = Plan.load(folder, trust=True)  # written by this search (check_plan)
        shapes = [tuple(x.shape) for x in example_inputs]
        if shapes != [tuple(s.shape) for s in plan.inputs]:
            raise ValueError(f"the saved plan is for inputs {[s.shape for s in plan.inputs]}, "
                             f"not {shapes}")
        return CompiledModule(plan)
    return make


def write_factory(folder: Path) -> str:
    """Write `folder`/factory.py for the plan saved in `folder`; returns the bench
    candidate spec (``file.py:make``)."""
    path = folder / "factory.py"
    path.write_text("from kernelwright.optimize.modulecheck import plan_factory\n\n"
                    f"make = plan_factory({str(folder.resolve())!r})\n")
    return f"{path.resolve()}:make"


def check_plan(plan, folder: Path, problem, size: str | None, seed: int, trials: int,
               timeout_s: float) -> dict:
    """Verify and time `plan` for `problem` in a bench worker; the worker's result dict
    (correct, reason, error, time_ms, ref_eager_ms, speedup_eager, ...)."""
    from ..bench.runner import default_rss_limit_gb, run_worker
    from ..bench.worker import WorkerConfig

    folder.mkdir(parents=True, exist_ok=True)
    plan.save(folder / "plan")
    spec = write_factory(folder / "plan")
    cfg = WorkerConfig(path=str(problem.path), name=problem.name, level=problem.level,
                       size=size, trials=trials, candidate=spec, seed=seed, alt_shape=False)
    try:
        return run_worker(cfg, folder / "worker", timeout_s, default_rss_limit_gb())
    finally:  # the constants of a full-size model take room; the plan can be made again
        shutil.rmtree(folder / "plan", ignore_errors=True)
