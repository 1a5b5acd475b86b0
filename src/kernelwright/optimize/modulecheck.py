"""Whole-module verification of a plan, in a bench worker process.

A plan with optimized kernels swapped in is saved to a folder, and the bench harness
(harness/worker.py, started by harness.runner.run_worker, so in a subprocess with time
and memory limits) verifies and times it against PyTorch exactly as it does any
candidate: fresh inputs in several distributions, poisoned outputs, every element
within fp32 1e-4, and then GPU time against PyTorch eager. The candidate factory it
is given is a two-line file written next to the plan that calls `plan_factory`: the
factory loads the saved plan and refuses inputs of other shapes (an optimized plan is
for the shapes it was found at, so the harness's other-shape trial is off).

The module's gain is measured apart from those checks (`time_plans`): the compiler's
plan and the plan with the winners, each the compiled module, timed in one process
(``python -m kernelwright.optimize.modulecheck``, a subprocess: winners are never
run in the search's own process) on the same inputs, in alternating rounds (ABBA:
`interleaved_times`) with GPU timestamps, under the exclusive GPU lock. Each check's
speedup against PyTorch eager divides the module's time by an eager time taken at
another moment in another process, whose noise then enters the ratio of the two
(on the software driver a 1.30x faster module was once reported 15.69x that way).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ..compiler import CompiledModule
from ..harness import problems
from ..harness.gpulock import GpuLock
from ..harness.runner import default_rss_limit_gb, run_worker, worker_env
from ..harness.timing import keep_gpu_awake, warm_up
from ..harness.worker import WorkerConfig
from ..plan import Plan
from ..runtime import runtime


def plan_factory(folder: str | Path):
    """A bench candidate factory that returns the plan saved in `folder`, bound to the
    default device, for example inputs of the plan's shapes and dtypes."""
    def make(model, example_inputs):
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
    folder.mkdir(parents=True, exist_ok=True)
    plan.save(folder / "plan")
    spec = write_factory(folder / "plan")
    cfg = WorkerConfig(path=str(problem.path), name=problem.name, level=problem.level,
                       size=size, trials=trials, candidate=spec, seed=seed, alt_shape=False)
    try:
        return run_worker(cfg, folder / "worker", timeout_s, default_rss_limit_gb())
    finally:  # the constants of a full-size model take room; the plan can be made again
        shutil.rmtree(folder / "plan", ignore_errors=True)


class Timed(Protocol):
    def gpu_times_ms(self, inputs_list: list, reps: int) -> list[float]: ...


def interleaved_times(before: Timed, after: Timed, input_sets: list, rounds: int,
                      reps: int) -> dict[str, Any]:
    """The median GPU time (ms) per call of `before` and of `after` on the same input
    sets, `reps` calls each per round in ABBA order (A B, then B A, ...), so that a
    drift of the GPU's speed over the measurement weighs on both alike."""
    times: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(max(1, rounds)):
        order = (("before", before), ("after", after))
        for label, module in order if i % 2 == 0 else order[::-1]:
            times[label].extend(module.gpu_times_ms(input_sets, reps))
    return {"before_ms": statistics.median(times["before"]),
            "after_ms": statistics.median(times["after"]),
            "rounds": max(1, rounds), "reps": reps, "source": "gpu-timestamps, interleaved"}


def time_plans(before, after, folder: Path, problem, size: str | None, seed: int,
               rounds: int, reps: int, timeout_s: float) -> dict[str, Any]:
    """Time the compiled module with plan `before` and with plan `after` on the
    problem's own inputs of `seed`, interleaved, in a subprocess (`main`); the
    `interleaved_times` dict, or ``{"error": ...}`` when it failed."""
    folder.mkdir(parents=True, exist_ok=True)
    before.save(folder / "before")
    after.save(folder / "after")
    result_path = folder / "timed.json"
    result_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "kernelwright.optimize.modulecheck",
               "--before", str(folder / "before"), "--after", str(folder / "after"),
               "--problem", str(problem.path), "--seed", str(seed), "--rounds", str(rounds),
               "--reps", str(reps), "--result", str(result_path)]
    if size:
        command += ["--size", size]
    try:
        with open(folder / "timed.log", "wb") as log:
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=worker_env(),
                                  timeout=timeout_s)
        if done.returncode != 0 or not result_path.exists():
            tail = (folder / "timed.log").read_text(errors="replace")[-500:].strip()
            return {"error": f"timing exited with code {done.returncode}: {tail}"}
        return json.loads(result_path.read_text())
    except subprocess.TimeoutExpired:
        return {"error": f"timing killed after {timeout_s:g} s"}
    except (OSError, json.JSONDecodeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        shutil.rmtree(folder / "before", ignore_errors=True)
        shutil.rmtree(folder / "after", ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Time two saved plans of one problem interleaved (see `time_plans`)."""
    parser = argparse.ArgumentParser(prog="python -m kernelwright.optimize.modulecheck",
                                     description="Time two plans of a problem, interleaved.")
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--after", required=True, type=Path)
    parser.add_argument("--problem", required=True, type=Path)
    parser.add_argument("--size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--result", required=True, type=Path)
    args = parser.parse_args(argv)

    loaded = problems.load(problems.Problem(args.problem.stem, args.problem, 0), args.size)
    inputs = loaded.inputs(args.seed)
    device = runtime.default_device()
    keep_gpu_awake()  # Vulkan timings 3x apart without (harness/timing.py)
    before = CompiledModule(Plan.load(args.before), device)
    after = CompiledModule(Plan.load(args.after), device)
    with GpuLock.from_env().exclusive():
        for module in (before, after):
            warm_up(lambda n, module=module: module.gpu_times_ms([inputs], n))
        timed = interleaved_times(before, after, [inputs], args.rounds, args.reps)
    timed["device"] = device.description
    tmp = args.result.with_name(args.result.name + ".tmp")
    tmp.write_text(json.dumps(timed))
    os.replace(tmp, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
