"""Out of memory with --jobs: GPU budgets per problem, admission by budget, an
out-of-memory error recognised wherever a job raises it, retried alone, and reported
as such (never as a reference that fails on its own inputs)."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import bench_suite as s
import pytest
import torch

from kernelwright.harness import budget, problems, runner, worker
from kernelwright.harness.oom import OOM_REASON, OutOfMemory, is_out_of_memory, reraise_oom
from kernelwright.harness.progress import Progress, status_of

GIB = 1 << 30


class GPUOutOfMemoryError(MemoryError):
    """Named as wgpu's is."""


class VulkanError(RuntimeError):
    pass


@pytest.mark.parametrize("exc", [
    torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB"),
    MemoryError(),
    GPUOutOfMemoryError("Not enough memory left"),
    RuntimeError("CUDA error: out of memory"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"),
    VulkanError("vkAllocateMemory: ERROR_OUT_OF_DEVICE_MEMORY"),
    OutOfMemory("candidate", "whatever"),
])
def test_out_of_memory_errors_are_recognised(exc: BaseException) -> None:
    assert is_out_of_memory(exc)
    with pytest.raises(OutOfMemory):
        reraise_oom(exc, "somewhere")


@pytest.mark.parametrize("exc", [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x3)"),
    ValueError("memory layout not supported"), IndexError("index 7 is out of bounds"),
])
def test_other_errors_are_not(exc: BaseException) -> None:
    assert not is_out_of_memory(exc)
    reraise_oom(exc, "somewhere")  # returns: the caller handles it as before


def test_an_error_raised_from_an_out_of_memory_one_is_one() -> None:
    try:
        try:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        except RuntimeError as inner:
            raise ValueError("the problem failed") from inner
    except ValueError as outer:
        assert is_out_of_memory(outer)


# --- the worker: what it reports ---------------------------------------------

# The reference runs once in the worker before verification; with `FAIL_AT` 2 it fails
# at the first screen of verification, which used to say "the reference fails on its
# own inputs (seed 101)".
REFERENCE_OOM = s.HEADER + """
rows = 64
CALLS = [0]
FAIL_AT = {fail_at}


class Relu(nn.Module):
    def forward(self, x):
        CALLS[0] += 1
        if CALLS[0] >= FAIL_AT:
            raise {error}
        return torch.relu(x)


Model = Relu


def get_inputs():
    return [torch.randn(rows, 32)]


def get_init_inputs():
    return []
"""

CANDIDATE_OOM = """
def make(model, example):
    def run(*inputs):
        raise MemoryError("the candidate could not allocate its output")
    return run
"""


def run_worker_in_process(tmp_path: Path, text: str, candidate: str = s.CANDIDATES) -> dict:
    suite = s.write_suite(tmp_path / "suite", {"big_problem.py": text})
    problem = problems.discover(suite)[0]
    cfg = runner.BenchSettings(size=None, candidate=candidate, trials=2,
                               alt_shape=False).worker_config(problem)
    out = tmp_path / "result.json"
    assert worker.main(["--config", cfg.to_json(), "--result", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("fail_at, error", [
    (2, 'torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")'),
    (1, "MemoryError()"),
])
def test_a_reference_out_of_memory_is_reported_as_such(tmp_path: Path, fail_at: int,
                                                       error: str) -> None:
    result = run_worker_in_process(tmp_path, REFERENCE_OOM.format(fail_at=fail_at, error=error))
    assert result["reason"] == OOM_REASON and not result["correct"], result["error"]
    assert status_of(result) == "OOM"
    assert "fails on its own inputs" not in result["error"]
    assert "big_problem" in result["error"]
    assert result["stage"] in result["error"]
    if fail_at == 2:  # verification had begun: the inputs were drawn and are named
        assert result["stage"] == "screen 0 (own)"
        assert "float32[64, 32]" in result["error"] and "GiB" in result["error"]


def test_a_candidate_out_of_memory_is_not_a_runtime_failure(tmp_path: Path) -> None:
    factory = tmp_path / "oom_candidate.py"
    factory.write_text(CANDIDATE_OOM)
    result = run_worker_in_process(tmp_path, s.RELU,
                                   candidate=f"{factory}:make")
    assert result["reason"] == OOM_REASON, result["error"]
    assert "the candidate on inputs (float32[" in result["error"]


def test_a_reference_that_really_fails_is_still_the_reference(tmp_path: Path) -> None:
    result = run_worker_in_process(tmp_path, REFERENCE_OOM.format(
        fail_at=2, error='RuntimeError("shapes do not match")'))
    assert result["reason"] == "reference"
    assert "fails on its own inputs (seed 101): RuntimeError: shapes do not match" \
        in result["error"]


# --- budgets and admission -----------------------------------------------------


def test_budget_of_a_problem_from_its_sizes_on_the_meta_device(tmp_path: Path) -> None:
    path = s.write_suite(tmp_path, {"linear.py": s.LINEAR}) / "linear.py"
    estimate = budget.estimate(path, "full")
    assert estimate.inputs == "(float32[64, 256])"
    assert estimate.input_bytes == 64 * 256 * 4
    assert estimate.param_bytes == (256 * 128 + 128) * 4
    assert estimate.output_known and estimate.output_bytes == 64 * 128 * 4
    assert estimate.budget_bytes == budget.BUDGET_FACTOR * (
        estimate.input_bytes + estimate.param_bytes + estimate.output_bytes
    ) + budget.JOB_OVERHEAD_BYTES
    assert budget.estimate(path, "small").input_bytes == 4 * 16 * 4


def test_admission_by_budget() -> None:
    admission = runner.Admission(capacity=10 * GIB, room=lambda: True)
    a = admission.start("a", 4 * GIB)
    assert admission.may_start(6 * GIB) and not admission.may_start(7 * GIB)
    b = admission.start("b", 4 * GIB)
    assert not admission.may_start(3 * GIB) and admission.may_start(2 * GIB)
    assert not admission.may_start(None)  # unknown: counts as the whole GPU
    assert not admission.may_start(1, alone=True)
    admission.finish(a)
    admission.finish(b)
    assert admission.may_start(50 * GIB)  # alone, whatever its budget
    big = admission.start("big", 50 * GIB)
    assert not admission.may_start(1)
    admission.finish(big)
    unknown = admission.start("unknown", None)
    assert not admission.may_start(1)
    admission.finish(unknown)
    alone = admission.start("alone", 1, alone=True)
    assert not admission.may_start(1)
    admission.finish(alone)
    assert (a.crowded, b.crowded, big.crowded) == (True, True, False)


def test_admission_without_a_capacity_is_the_machine_memory_only() -> None:
    room = [True]
    admission = runner.Admission(capacity=None, room=lambda: room[0])
    admission.start("a", 500 * GIB)
    assert admission.may_start(500 * GIB) and admission.may_start(None)
    room[0] = False
    assert not admission.may_start(1)


def test_a_waiting_job_starts_when_a_running_one_finishes() -> None:
    admission = runner.Admission(capacity=10 * GIB, room=lambda: True)
    first = admission.start("first", 8 * GIB)
    started = threading.Event()

    def second() -> None:
        admission.start("second", 8 * GIB)
        started.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert not started.wait(0.3)
    admission.finish(first)
    assert started.wait(5)
    thread.join()


# --- the runner: retried alone --------------------------------------------------


def run_oom_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                  always: set[str]) -> tuple[list[dict], list[tuple[str, int]]]:
    """run_suite, 3 jobs, GPU capacity 10 GiB, budgets 3 GiB: fake workers that run out
    of memory whenever another ran beside them (and those in `always`, alone too).
    Returns the results and (name, workers running) at each worker's start."""
    suite = s.write_suite(tmp_path / "suite", {f"p{i}.py": s.RELU for i in range(3)})
    lock = threading.Lock()
    state = {"running": 0}
    starts: list[tuple[str, int]] = []

    def fake_worker(cfg, workdir, timeout_s, max_rss_gb, on_tick=None, stop=None,
                    gpu_lock=None) -> dict:
        with lock:
            state["running"] += 1
            starts.append((cfg.name, state["running"]))
            crowded, started = state["running"] > 1, len(starts)
        time.sleep(0.3)
        with lock:  # another ran beside it: at its start, or started since
            crowded = crowded or len(starts) > started
            state["running"] -= 1
        result = {"name": cfg.name, "level": cfg.level, "correct": True, "finished": True,
                  "flags": [], "reason": None, "error": None}
        if crowded or cfg.name in always:
            result.update(correct=False, reason=OOM_REASON,
                          error=f"{OOM_REASON}: {cfg.name} ran out of memory")
        return result

    estimate = {"inputs": "(float32[1024])", "input_bytes": GIB // 2, "param_bytes": 0,
                "output_bytes": GIB // 4, "output_known": True, "budget_bytes": 3 * GIB}
    monkeypatch.setattr(runner, "run_worker", fake_worker)
    monkeypatch.setattr(runner, "cuda_present", lambda: True)
    monkeypatch.setattr(runner, "gpu_budgets", lambda found, size, seed, *settings: (
        10 * GIB, {p.name: estimate for p in found}))
    monkeypatch.setattr(runner, "memory_room", lambda: True)
    results = runner.run_suite(problems.discover(suite), runner.BenchSettings(),
                               tmp_path / "out", progress=Progress(3, io.StringIO(), live=False),
                               jobs=3)
    return results, starts


def test_out_of_memory_beside_others_is_retried_alone(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    results, starts = run_oom_suite(tmp_path, monkeypatch, always=set())
    assert max(n for _, n in starts) == 3  # 3 budgets of 3 GiB fit in 10
    assert all(r["correct"] for r in results), results
    retried = [name for name, _ in starts[3:]]
    assert sorted(retried) == ["p0", "p1", "p2"]
    assert all(n == 1 for _, n in starts[3:])  # each retry ran alone
    assert all("a run alone" in " ".join(r["flags"]) for r in results)
    assert all(r["oom_beside_others"] for r in results)


def test_out_of_memory_alone_is_reported_with_its_sizes(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    results, _ = run_oom_suite(tmp_path, monkeypatch, always={"p1"})
    by_name = {r["name"]: r for r in results}
    assert by_name["p0"]["correct"] and by_name["p2"]["correct"]
    p1 = by_name["p1"]
    assert p1["reason"] == OOM_REASON and status_of(p1) == "OOM"
    assert "also when run alone" in p1["error"]
    assert "estimated budget 3.00 GiB (inputs 0.50 GiB" in p1["error"]
    assert "of 10.00 GiB of GPU memory free" in p1["error"]


@pytest.mark.slow
def test_budgets_by_subprocess_without_cuda_change_nothing(tmp_path: Path) -> None:
    suite = s.write_suite(tmp_path / "suite", {"p.py": s.RELU})
    capacity, budgets = runner.gpu_budgets(problems.discover(suite), "small", 0)
    if torch.cuda.is_available():
        assert capacity and budgets["p"]["input_bytes"] == 8 * 32 * 4
    else:
        assert (capacity, budgets) == (None, {})
