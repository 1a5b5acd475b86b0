"""Worker: evaluate one problem, in a process of its own.

``python -m kernelwright.harness.worker --config CONFIG.json --result RESULT.json``
loads the problem, runs its reference, makes and verifies a candidate with the
configured factory, and, when the candidate is correct, times it and the
reference. The result (a flat JSON object, see `new_result`) is rewritten after
every stage with its ``stage`` and ``finished: false``, so that when the parent
kills a hung or bloated worker it still knows how far it got; the last write has
``finished: true``. The runner (runner.py) is what starts workers.

``compile_s`` is the wall time of the factory's call for the problem. For
kernelwright, a tiny module is compiled first (``warmup_s``), so that the one-time
costs of a fresh process (imports, opening the device, torch.export's first use)
are not billed to the problem; ``stage_s`` says when each stage began (seconds
after the worker's imports). Verification reports its own stages ("screen 0 (own)",
..., "compile", "trial 0 (own)", ..., "alt-shape", see verify.verify), so a worker
killed or crashed during it names the trial it was in.
``sequence`` is true when the module has state (a call changes its buffers) and was
judged as sequences of calls (see verify.py).

``dtype`` is the dtype the problem ran in: the configured one (``bench --dtype``: model
and float inputs cast, problems.load) or, without one, the float dtypes of its model and
inputs; ``overrides`` the ``--set`` globals. Memory: ``plan_bytes`` is the device memory
the candidate's plan allocates (kernelwright's `CompiledModule`; None for a candidate
without one), ``torch_peak_bytes`` torch.cuda.max_memory_allocated over the reference's
first call, its model and inputs on the GPU (gpu.torch_peak_bytes; None without CUDA).

The candidate factory is named by a spec: ``kernelwright`` (the compiler's
``kernelwright.compile``), ``package.module:function`` or ``path/to/file.py:function``;
the function is called as ``make(model, example_inputs)`` and returns a callable.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import sys
import time
import traceback
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

import kernelwright
from kernelwright.runtime import runtime

from ..check.tolerance import Tolerance
from . import gpu, problems, timing, verify
from .gpulock import GpuLock
from .oom import OOM_REASON, OutOfMemory, gib, is_out_of_memory, reraise_oom
from .problems import import_file

PROCESS_START = time.perf_counter()
SPEEDUP_REVIEW = 10.0  # speedups above this are flagged for review
TIMING_INPUT_SETS = 3  # input sets rotated through while timing


@dataclass
class WorkerConfig:
    """Everything a worker needs to evaluate one problem."""

    module: ClassVar[str] = "kernelwright.harness.worker"  # the worker run by the runner
    path: str
    name: str
    level: int
    size: str | None = None
    trials: int = 5
    loose: bool = False
    accelerated: bool = False  # compile(precision="accelerated"), fp16 tolerance
    compile_ref: bool = False
    candidate: str = "kernelwright"
    seed: int = 0
    alt_shape: bool = True
    check_torch_calls: bool = True
    time_target_s: float = 0.2
    dtype: str | None = None  # a name of problems.DTYPES, or None: the problem's own
    overrides: dict[str, str] = field(default_factory=dict)  # --set: global -> literal

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        return cls(**json.loads(text))

    def blank(self) -> dict[str, Any]:
        """The result of a worker that wrote none."""
        return new_result(self)


def new_result(cfg: WorkerConfig) -> dict[str, Any]:
    """The result record with every field present; the worker fills it in stage by stage."""
    return {
        "name": cfg.name, "level": cfg.level, "path": cfg.path, "size": cfg.size,
        "stage": "start", "finished": False,
        "loaded": False, "compiled": False, "correct": False,
        "reason": None, "error": None,
        "compile_s": None, "time_ms": None, "time": None,
        "ref_eager_ms": None, "ref_eager": None, "speedup_eager": None,
        "ref_compile_ms": None, "ref_compile": None, "speedup_compile": None,
        "ref_compile_error": None,
        "precision": precision_label(cfg.loose, cfg.accelerated),
        "dtype": cfg.dtype, "overrides": dict(cfg.overrides),
        "plan_bytes": None, "torch_peak_bytes": None,
        "reference": None, "device": None, "degenerate": None, "alt_shape": None,
        "sequence": False,
        "inputs": None, "input_bytes": None,
        "flags": [], "trials": [], "wall_s": None, "warmup_s": None, "stage_s": {},
    }


def precision_label(loose: bool, accelerated: bool) -> str:
    """The precision mode of a run, as check.tolerance.Tolerance labels it."""
    return Tolerance(loose, accelerated).label


def float_dtypes(model: torch.nn.Module, inputs: list) -> str | None:
    """The floating-point dtypes of a model's parameters and buffers and of the tensor
    inputs, by name ("float32", "bfloat16+float32"); None when there are none."""
    tensors = [*model.parameters(), *model.buffers(),
               *(x for x in inputs if isinstance(x, torch.Tensor))]
    names = sorted({str(t.dtype).removeprefix("torch.") for t in tensors
                    if t.is_floating_point()})
    return "+".join(names) or None


def plan_bytes(candidate: Any) -> int | None:
    """The device memory a kernelwright candidate's plan allocates (runtime.device_bytes of
    its Executable); None for a candidate that has none."""
    exe = getattr(candidate, "exe", None)
    return runtime.device_bytes([exe]) if isinstance(exe, runtime.Executable) else None


def write_json(path: Path, data: dict) -> None:
    """Write atomically: a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def load_factory(spec: str, precision: str = "strict"):  # returns a Factory
    """The candidate factory named by `spec` (see the module docstring)."""
    if spec == "kernelwright":
        def make(model, example_inputs):
            return kernelwright.compile(model, example_inputs, precision=precision)

        return make
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ValueError(f"candidate spec {spec!r} is not 'module:function' or 'file.py:function'")
    if target.endswith(".py"):
        module = import_file(Path(target), "kernelwright_candidate_" + Path(target).stem)
    else:
        module = importlib.import_module(target)
    return getattr(module, attr)


def describe_device(spec: str) -> str:
    if spec != "kernelwright":
        return f"none: candidates from {spec} (not kernelwright)"
    try:
        return runtime.default_device().description
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({type(exc).__name__}: {exc})"


def warm_up(make: Any) -> float:
    """Compile and run a tiny module once, so that one-time costs of a fresh process
    (imports, the device, torch.export's first use) are not billed to the problem's
    compile time; returns the seconds it took (stored as ``warmup_s``)."""
    start = time.perf_counter()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    inputs = [torch.randn(2, 4)]
    try:
        make(model, inputs)(*inputs)
    except Exception:  # noqa: BLE001 - the problem's own compile will report any real failure
        pass
    return time.perf_counter() - start


def speedup(ref_ms: float | None, cand_ms: float | None) -> float | None:
    if ref_ms is None or not cand_ms:
        return None
    return ref_ms / cand_ms


def evaluate(cfg: WorkerConfig, result: dict[str, Any], result_path: Path) -> dict[str, Any]:
    """Evaluate one problem into `result`; failures of the problem or candidate are
    recorded, and an allocation that failed anywhere is reported as out of memory
    (`report_oom`), never as the reference's or the candidate's failure."""
    try:
        return evaluate_stages(cfg, result, result_path)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        return report_oom(result, exc)


def report_oom(result: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """Record `exc`, an out-of-memory error, with the stage it happened in and the
    problem's input sizes."""
    where = exc.where if isinstance(exc, OutOfMemory) else result.get("stage")
    detail = exc.detail if isinstance(exc, OutOfMemory) else f"{type(exc).__name__}: {exc}"
    result["correct"] = False
    result["reason"] = OOM_REASON
    result["oom"] = {"stage": result.get("stage"), "where": where}
    result["error"] = (f"{OOM_REASON}: {result['name']} ran out of memory in {where} (stage "
                       f"{result.get('stage')}; inputs {result.get('inputs') or 'not drawn'}, "
                       f"{gib(result.get('input_bytes'))}): {detail}")[:3000]
    return result


def evaluate_stages(cfg: WorkerConfig, result: dict[str, Any],
                    result_path: Path) -> dict[str, Any]:
    """The stages of `evaluate`: load, reference, compile and verify, time."""
    started = time.perf_counter()
    lock = GpuLock.from_env()
    ref_device = "cuda" if torch.cuda.is_available() else "cpu"

    def stage(name: str) -> None:
        result["stage"] = name
        result["wall_s"] = time.perf_counter() - started
        result["stage_s"][name] = round(time.perf_counter() - PROCESS_START, 3)
        write_json(result_path, result)

    def fail(reason: str, error: str) -> dict[str, Any]:
        result["reason"], result["error"] = reason, f"{reason}: {error}"
        return result

    stage("load")
    problem = problems.Problem(cfg.name, Path(cfg.path), cfg.level)
    try:
        loaded = problems.load(problem, cfg.size, cfg.overrides, cfg.dtype)
        stage("reference")
        model = problems.call_user("reference", lambda: loaded.build_model(cfg.seed))
        # inputs are drawn on the reference's device (fast), or on the CPU where the
        # problem's get_inputs cannot run there (say it converts through numpy)
        input_device = ref_device
        with lock.shared(), torch.no_grad():  # on the device the reference is timed on
            try:
                own = problems.call_user("reference",
                                         lambda: loaded.inputs(cfg.seed, ref_device))
            except problems.ProblemError:
                if ref_device == "cpu":
                    raise
                input_device = "cpu"
                own = problems.call_user("reference", lambda: loaded.inputs(cfg.seed))
            result["inputs_drawn_on"] = input_device
            result["inputs"] = verify.describe_inputs(own)
            result["input_bytes"] = sum(x.numel() * x.element_size() for x in own
                                        if isinstance(x, torch.Tensor))
            result["dtype"] = cfg.dtype or float_dtypes(model, own)
            _, result["torch_peak_bytes"] = gpu.torch_peak_bytes(
                lambda: problems.call_user("reference", lambda: copy.deepcopy(model).to(
                    ref_device)(*[x.to(ref_device) if isinstance(x, torch.Tensor) else x
                                  for x in own])))
        own = None  # not kept: verification draws its inputs one trial at a time
    except problems.ProblemError as exc:
        return fail(exc.stage, exc.message)
    result["loaded"] = True

    def own_inputs(seed: int) -> list:
        return loaded.inputs(seed, input_device)

    stage("compile")
    try:
        make = load_factory(cfg.candidate, "accelerated" if cfg.accelerated else "strict")
    except Exception as exc:  # noqa: BLE001
        return fail("harness", f"cannot load candidate factory {cfg.candidate!r}: {exc}")
    if cfg.candidate == "kernelwright":
        stage("warm-up")
        result["warmup_s"] = warm_up(make)
    if ref_device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    try:
        verification = verify.verify(model, own_inputs, make, trials=cfg.trials,
                                     loose=cfg.loose, accelerated=cfg.accelerated,
                                     seed=cfg.seed, alt_shape=cfg.alt_shape,
                                     check_torch_calls=cfg.check_torch_calls,
                                     reference_device=ref_device, gpu_section=lock.shared,
                                     draw_section=lock.shared if input_device != "cpu"
                                     else nullcontext,
                                     on_stage=stage,
                                     dtype=problems.DTYPES.get(cfg.dtype or ""))
    except Exception as exc:  # noqa: BLE001 - the reference failed on a trial's own inputs
        reraise_oom(exc, f"verification (stage {result['stage']})")
        return fail("reference", f"{type(exc).__name__}: {exc}")
    verdict = verification.verdict
    result.update({key: value for key, value in verdict.to_dict().items()
                   if key in ("compiled", "correct", "reason", "error", "compile_s",
                              "degenerate", "alt_shape", "trials", "precision", "sequence")})
    if verdict.degenerate:
        result["flags"].append(f"degenerate: {verdict.degenerate}")
    result["flags"].extend(verdict.flags)
    if cfg.accelerated and getattr(verification.candidate, "precision", None) == "strict":
        result["flags"].append("accelerated mode unavailable on the device: strict kernels")
    reported = getattr(verification.candidate, "compile_seconds", None)
    if isinstance(reported, (int, float)):
        result["compile_s_reported"] = float(reported)
    result["device"] = describe_device(cfg.candidate)
    result["plan_bytes"] = plan_bytes(verification.candidate)
    if not verdict.correct:
        return result

    stage("timing-prepare")
    try:
        measure(cfg, result, verification.candidate, model, own_inputs, stage, lock)
    except Exception as exc:  # noqa: BLE001 - correct, but could not be timed
        reraise_oom(exc, f"timing (stage {result['stage']})")
        result["timing_error"] = f"{type(exc).__name__}: {exc}"[:2000]
        result["flags"].append("timing failed")
    return result


def measure(cfg: WorkerConfig, result: dict[str, Any], candidate: Any, model: Any,
            own_inputs: Any, stage: Any, lock: GpuLock) -> None:
    """Time the candidate and the reference (eager, and torch.compile when asked).

    Moving the reference to its device happens under the shared GPU lock, the timed
    calls under the exclusive one, so that with ``--jobs`` no other worker's GPU work
    overlaps them; torch.compile's compile (its first call) takes no lock: it is CPU
    work, and a timer waiting behind it stalled every worker.
    """
    with lock.shared():  # inputs may be drawn on the GPU
        input_sets = timing.timing_sets(lambda i: own_inputs(cfg.seed + 1000 + i),
                                        TIMING_INPUT_SETS)
        host_sets = [verify.for_candidate(inputs) for inputs in input_sets]
        eager = timing.prepare_reference(model, input_sets, False, allow_tf32=cfg.loose)
    compiled = None
    if cfg.compile_ref:  # outside the lock: torch.compile's compile is seconds of CPU work
        stage("compile-ref")
        try:
            compiled = timing.prepare_reference(model, input_sets, True, allow_tf32=cfg.loose)
        except Exception as exc:  # noqa: BLE001 - torch.compile itself failed
            reraise_oom(exc, "torch.compile of the reference")
            result["ref_compile_error"] = f"{type(exc).__name__}: {exc}"[:2000]
    stage("timing-wait")
    with lock.exclusive():
        stage("timing")
        cand = timing.time_candidate(candidate, host_sets, cfg.time_target_s)
        result["time_ms"], result["time"] = cand.median_ms, cand.to_dict()
        if cand.source != "gpu-timestamps":
            result["flags"].append(f"candidate timed by {cand.source}")
        stage("timing-eager")
        ref = timing.time_prepared(eager, cfg.time_target_s)
        result["ref_eager_ms"], result["ref_eager"] = ref.median_ms, ref.to_dict()
        result["reference"] = timing.reference_label()
        result["speedup_eager"] = speedup(ref.median_ms, cand.median_ms)
        if compiled is not None:
            stage("timing-compile")
            try:
                refc = timing.time_prepared(compiled, cfg.time_target_s)
                result["ref_compile_ms"], result["ref_compile"] = refc.median_ms, refc.to_dict()
                result["speedup_compile"] = speedup(refc.median_ms, cand.median_ms)
            except Exception as exc:  # noqa: BLE001 - torch.compile failed on another input
                reraise_oom(exc, "the torch.compile reference's timing")
                result["ref_compile_error"] = f"{type(exc).__name__}: {exc}"[:2000]
    stage("done")
    for label in ("eager", "compile"):
        value = result[f"speedup_{label}"]
        if value is not None and value > SPEEDUP_REVIEW:
            result["flags"].append(f"speedup {value:.1f}x vs {label} > {SPEEDUP_REVIEW:g}x: review")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelwright.harness.worker",
                                     description="Evaluate one problem (used by the runner).")
    parser.add_argument("--config", required=True, help="WorkerConfig as JSON, or @FILE")
    parser.add_argument("--result", required=True, type=Path, help="where to write the result")
    args = parser.parse_args(argv)
    text = Path(args.config[1:]).read_text() if args.config.startswith("@") else args.config
    cfg = WorkerConfig.from_json(text)
    started = time.perf_counter()
    result = new_result(cfg)
    try:
        evaluate(cfg, result, args.result)
    except Exception as exc:  # noqa: BLE001 - a bug of the harness: still report it
        traceback.print_exc()
        result["correct"] = False
        result["reason"] = "harness"
        result["error"] = f"harness: {type(exc).__name__}: {exc}"
    result["finished"] = True
    result["wall_s"] = time.perf_counter() - started
    write_json(args.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
