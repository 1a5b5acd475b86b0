"""The runner and `kernelwright bench` end to end, with numpy candidates: isolation
(a crash, a hang, a memory hog cost one problem each), SQLite, --resume, the files
written under --out, and the report as Chromium renders it."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import bench_suite as s
import pytest
from bench_browser import dump_dom, needs_chromium

from kernelwright.cli import main as cli
from kernelwright.harness import gpulock, problems, runner
from kernelwright.harness.gpulock import GpuLock
from kernelwright.harness.progress import Progress

FIELDS = ("name", "level", "compiled", "correct", "error", "compile_s", "time_ms",
          "ref_eager_ms", "speedup_eager")


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One `kernelwright bench` run over a suite with good, crashing and broken problems."""
    root = tmp_path_factory.mktemp("bench")
    suite = s.write_suite(root / "suite", {
        "level1/1_relu.py": s.RELU,
        "level1/2_segfault.py": s.SEGFAULT,
        "level2/1_missing_get_inputs.py": s.MISSING_GET_INPUTS,
    })
    out = root / "out"
    code = cli.main(["bench", str(suite), "--out", str(out), "--trials", "3",
                     "--candidate", s.CANDIDATES, "--timeout", "120", "--jobs", "2"])
    return {"code": code, "out": out, "suite": suite,
            "json": json.loads((out / "results.json").read_text())}


def by_name(document: dict) -> dict[str, dict]:
    return {p["name"]: p for p in document["problems"]}


@pytest.mark.slow
def test_the_run_goes_on_past_crashes_and_broken_files(bench_run: dict) -> None:
    assert bench_run["code"] == 0
    results = by_name(bench_run["json"])  # two at a time, reported in the suite's order
    assert list(results) == ["level1/1_relu", "level1/2_segfault",
                             "level2/1_missing_get_inputs"]
    assert results["level1/1_relu"]["correct"], results["level1/1_relu"]["error"]
    segfault = results["level1/2_segfault"]
    assert segfault["reason"] == "crash" and "SIGSEGV" in segfault["error"]
    assert segfault["stage"] == "compile" and segfault["loaded"]
    missing = results["level2/1_missing_get_inputs"]
    assert missing["reason"] == "load" and "missing get_inputs" in missing["error"]


def test_jobs_on_a_machine_that_times_on_the_cpu_are_labelled(bench_run: dict) -> None:
    """Two jobs here (no CUDA): the timed calls share the CPU with the other job's work."""
    import torch

    caveat = bench_run["json"].get("timing_caveat")
    if torch.cuda.is_available():
        pytest.skip("CUDA times the reference here")
    assert caveat and caveat.startswith("--jobs 2: ") and "CPU" in caveat


def test_results_json_has_every_field_and_the_summary(bench_run: dict) -> None:
    document = bench_run["json"]
    for problem in document["problems"]:
        assert all(field in problem for field in FIELDS)
    relu = by_name(document)["level1/1_relu"]
    assert relu["level"] == 1 and relu["compiled"] and relu["error"] is None
    assert relu["time_ms"] > 0 and relu["ref_eager_ms"] > 0
    assert relu["speedup_eager"] == pytest.approx(relu["ref_eager_ms"] / relu["time_ms"])
    assert relu["time"]["source"] == "wall-clock" and relu["ref_eager"]["source"] == "cpu"
    assert relu["ref_compile_ms"] is None and relu["speedup_compile"] is None
    assert relu["size"] == "small"  # no CUDA here: small sizes by default
    assert len(relu["trials"]) == 3
    assert document["precision"] == "strict"
    assert "device" in document and "reference" in document
    overall = document["summary"]["overall"]
    assert (overall["problems"], overall["loaded"], overall["compiled"], overall["correct"]) == (
        3, 2, 1, 1)
    assert set(document["summary"]["levels"]) == {"1", "2"}


def test_sqlite_has_a_row_per_problem(bench_run: dict) -> None:
    db = sqlite3.connect(bench_run["out"] / "results.sqlite")
    rows = db.execute("SELECT name, correct, reason, result FROM results ORDER BY name").fetchall()
    db.close()
    # rows come in the order problems finish (two ran at once); names sort as the suite does
    assert [r[0] for r in rows] == [p["name"] for p in bench_run["json"]["problems"]]
    assert [r[1] for r in rows] == [1, 0, 0]
    assert json.loads(rows[0][3])["name"] == "level1/1_relu"


@needs_chromium
def test_report_opens_in_headless_chromium(bench_run: dict) -> None:
    dom = dump_dom(bench_run["out"] / "report.html")
    assert 'id="summary"' in dom and 'id="plot-speedup-eager"' in dom
    assert "level1/2_segfault" in dom and "SIGSEGV" in dom


def test_resume_runs_only_what_is_missing(bench_run: dict, capsys: pytest.CaptureFixture) -> None:
    out = bench_run["out"]
    db = sqlite3.connect(out / "results.sqlite")
    db.execute("DELETE FROM results WHERE name = 'level2/1_missing_get_inputs'")
    db.commit()
    db.close()
    before = by_name(bench_run["json"])
    code = cli.main(["bench", str(bench_run["suite"]), "--out", str(out), "--trials", "3",
                     "--candidate", s.CANDIDATES, "--resume"])
    assert code == 0
    err = capsys.readouterr().err
    assert err.count("(resumed)") == 2
    after = by_name(json.loads((out / "results.json").read_text()))
    assert list(after) == list(before)
    relu = "level1/1_relu"
    assert after[relu]["time_ms"] == before[relu]["time_ms"]  # reused, not re-measured
    assert after["level2/1_missing_get_inputs"]["reason"] == "load"


def test_other_settings_are_not_resumed(tmp_path: Path) -> None:
    store = runner.ResultStore(tmp_path / "results.sqlite")
    strict, loose = runner.BenchSettings(), runner.BenchSettings(loose=True)
    assert strict.key() != loose.key()
    assert strict.key() == runner.BenchSettings(timeout_s=5).key()  # limits do not count
    store.put({"name": "p", "correct": True}, strict.key())
    assert store.get("p", strict.key()) == {"name": "p", "correct": True}
    assert store.get("p", loose.key()) is None
    store.close()


def test_results_of_another_compiler_are_not_resumed(monkeypatch) -> None:
    before = runner.BenchSettings().key()
    assert runner.compiler_digest() == runner.compiler_digest()
    monkeypatch.setattr(runner, "compiler_digest", lambda: "another")
    assert runner.BenchSettings().key() != before


def test_the_compiler_digest_covers_wgsl_templates_not_problems(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    for name, text in {"ir.py": "x = 1", "kernels/scan.wgsl": "fn main() {}",
                       "suite/level1/p.py": "a", "harness/b.py": "b"}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    first = runner.compiler_digest(package)
    (package / "suite/level1/p.py").write_text("changed")  # a problem: keyed by its file
    (package / "harness/b.py").write_text("changed")
    assert runner.compiler_digest(package) == first
    (package / "kernels/scan.wgsl").write_text("fn main() { }")  # a kernel template
    assert runner.compiler_digest(package) != first


def worker_for(tmp_path: Path, text: str) -> runner.WorkerConfig:
    suite = s.write_suite(tmp_path / "suite", {"p.py": text})
    problem = problems.discover(suite)[0]
    return runner.BenchSettings(candidate=s.CANDIDATES, trials=2).worker_config(problem)


def test_a_hang_is_killed_by_the_timeout(tmp_path: Path) -> None:
    result = runner.run_worker(worker_for(tmp_path, s.HANG), tmp_path / "work",
                               timeout_s=2.0, max_rss_gb=16)
    assert result["reason"] == "timeout" and not result["correct"]
    assert "killed after 2 s" in result["error"]
    assert result["wall_s"] < 10


def test_an_exit_without_a_result_is_a_crash(tmp_path: Path) -> None:
    result = runner.run_worker(worker_for(tmp_path, s.EXIT), tmp_path / "work",
                               timeout_s=60, max_rss_gb=16)
    assert result["reason"] == "crash" and "exit code 3" in result["error"]


def test_a_crash_during_verification_names_the_trial(tmp_path: Path) -> None:
    result = runner.run_worker(worker_for(tmp_path, s.SEGFAULT_IN_TRIAL), tmp_path / "work",
                               timeout_s=60, max_rss_gb=16)
    assert result["reason"] == "crash" and "SIGSEGV" in result["error"]
    assert result["stage"] == "trial 0 (own)" and "(stage: trial 0 (own))" in result["error"]
    assert {"screen 0 (own)", "screen 1 (normal)", "compile"} <= set(result["stage_s"])


def test_a_memory_hog_is_killed_by_the_rss_limit(tmp_path: Path) -> None:
    result = runner.run_worker(worker_for(tmp_path, s.RELU), tmp_path / "work",
                               timeout_s=60, max_rss_gb=0.03)
    assert result["reason"] == "memory" and "over the limit" in result["error"]


def test_no_problems_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert cli.main(["bench", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert cli.main(["bench", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2


LOCKER = """
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("gpulock", sys.argv[1])
gpulock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpulock)  # alone: importing the package (torch) is slow
lock_path, mode, name, folder = sys.argv[2:]

def log(text):
    with open(os.path.join(folder, "log"), "a") as f:
        f.write(f"{name} {text}\\n")

lock = gpulock.GpuLock(lock_path)
log("waiting")
with (lock.exclusive() if mode == "ex" else lock.shared()):
    log("in")
    if mode == "fork" and os.fork() == 0:  # a child outliving the lock, as compile workers do
        time.sleep(5)
        os._exit(0)
    while mode == "hold" and not os.path.exists(os.path.join(folder, "release")):
        time.sleep(0.05)
    log("out")
"""


def locker(tmp_path: Path, mode: str, name: str) -> subprocess.Popen:
    script = tmp_path / "locker.py"
    script.write_text(LOCKER)
    return subprocess.Popen([sys.executable, str(script), gpulock.__file__,
                             str(tmp_path / "gpu.lock"), mode, name, str(tmp_path)])


def log_of(tmp_path: Path) -> list[str]:
    path = tmp_path / "log"
    return path.read_text().splitlines() if path.exists() else []


def wait_for(tmp_path: Path, line: str) -> None:
    deadline = time.monotonic() + 60
    while line not in log_of(tmp_path):
        assert time.monotonic() < deadline, log_of(tmp_path)
        time.sleep(0.05)


def test_gpu_lock_times_alone_and_a_waiting_timer_is_not_starved(tmp_path: Path) -> None:
    procs = [locker(tmp_path, "hold", "verifier")]  # shared, until told to release
    wait_for(tmp_path, "verifier in")
    procs.append(locker(tmp_path, "ex", "timer"))
    wait_for(tmp_path, "timer waiting")
    time.sleep(1.5)  # the timer now holds the gate and waits for the verifier
    procs.append(locker(tmp_path, "sh", "late"))
    wait_for(tmp_path, "late waiting")
    time.sleep(1.5)
    assert log_of(tmp_path) == ["verifier waiting", "verifier in", "timer waiting",
                                "late waiting"]
    (tmp_path / "release").touch()
    for proc in procs:
        assert proc.wait(60) == 0
    assert log_of(tmp_path)[4:] == ["verifier out", "timer in", "timer out", "late in",
                                    "late out"]


def test_a_forked_child_does_not_keep_the_gpu_lock(tmp_path: Path) -> None:
    assert locker(tmp_path, "fork", "forker").wait(60) == 0  # its child lives on for 5 s
    started = time.monotonic()
    assert locker(tmp_path, "ex", "timer").wait(60) == 0
    assert time.monotonic() - started < 4.5




def test_one_job_needs_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the runner's lock path (one job) the lock opens no file; with one, it
    opens the lock and its gate beside it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(gpulock.ENV, raising=False)
    alone = GpuLock.from_env()
    assert alone.path is None
    fds = set(os.listdir("/dev/fd"))
    with alone.exclusive(), alone.shared():
        assert set(os.listdir("/dev/fd")) == fds and not list(tmp_path.iterdir())
    monkeypatch.setenv(gpulock.ENV, str(tmp_path / "gpu.lock"))
    with GpuLock.from_env().exclusive():
        assert len(set(os.listdir("/dev/fd")) - fds) == 2
        assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.lock", "gpu.lock.gate"]


def run_fake_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   available_kb: int) -> tuple[int, int]:
    """run_suite, 3 jobs, over three problems with workers that only sleep, /proc/meminfo
    saying `available_kb` of 100000 kB: how many workers ran at once at most, and how
    often the progress line was redrawn while one waited for memory."""
    suite = s.write_suite(tmp_path / "suite", {f"p{i}.py": s.RELU for i in range(3)})
    state = {"running": 0, "most": 0, "waits": 0}
    lock = threading.Lock()

    def fake_worker(cfg, workdir, timeout_s, max_rss_gb, on_tick=None, stop=None,
                    gpu_lock=None) -> dict:
        with lock:
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
        time.sleep(0.5)
        with lock:
            state["running"] -= 1
        return {"name": cfg.name, "level": cfg.level, "correct": True, "finished": True}

    def tick(*args, **kwargs) -> None:
        if not args and not kwargs:  # as Admission.start calls it; start() forces a redraw
            state["waits"] += 1

    monkeypatch.setattr(runner, "run_worker", fake_worker)
    monkeypatch.setattr(runner, "MEMORY_POLL_S", 0.01)
    monkeypatch.setattr(runner, "meminfo",
                        lambda: {"MemTotal": 100000, "MemAvailable": available_kb})
    progress = Progress(3, io.StringIO(), live=False)
    monkeypatch.setattr(progress, "tick", tick)
    results = runner.run_suite(problems.discover(suite), runner.BenchSettings(),
                               tmp_path / "out", progress=progress, jobs=3)
    assert [r["name"] for r in results] == ["p0", "p1", "p2"]
    return state["most"], state["waits"]


def test_workers_start_beside_others_only_with_memory_to_spare(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert runner.MIN_AVAILABLE_FRACTION == 0.3
    assert run_fake_suite(tmp_path / "room", monkeypatch, available_kb=30000) == (3, 0)
    # too little: one at a time (a worker alone always starts), the progress line redrawn
    most, waits = run_fake_suite(tmp_path / "full", monkeypatch, available_kb=29999)
    assert most == 1 and waits > 0


def test_memory_room_reads_meminfo(monkeypatch: pytest.MonkeyPatch) -> None:
    info = runner.meminfo()
    assert info["MemTotal"] >= info["MemAvailable"] > 0
    monkeypatch.setattr(runner, "meminfo", lambda: {"MemTotal": 1000, "MemAvailable": 299})
    assert not runner.memory_room()
    monkeypatch.setattr(runner, "meminfo", lambda: {"MemTotal": 1000, "MemAvailable": 300})
    assert runner.memory_room()
    monkeypatch.setattr(runner, "meminfo", lambda: {})  # no /proc: never in the way
    assert runner.memory_room()
