"""Runner: evaluate every problem of a suite, each in its own worker process.

A worker (worker.py) is started per problem in a new process session; the
runner watches it from outside: past the time limit, or past the memory limit
(resident memory of the worker and its children, read from /proc; not
RLIMIT_AS, since GPU drivers reserve huge address space), its whole process
group is killed and the problem is reported as "timeout" or "memory". A crash
(a signal, a lost device, an exit without a result) is reported as "crash" with
the tail of the worker's log. The run always goes on. `run_worker` runs any
`WorkerJob`: `kernelwright bench --train` runs each training workload through it
(training.py) under the same limits.

Each result is written to SQLite (`ResultStore`) the moment its problem
finishes; with ``resume=True`` problems already finished with the same settings,
the same compiler (`compiler_digest`) and an unchanged file are taken from the
store instead of being run again.
`run_suite` hands the list of result dicts to metrics and report.

With several jobs, a worker is only started beside running ones while the machine
has room (`memory_room`): MemAvailable at least MIN_AVAILABLE_FRACTION of
MemTotal. Each worker's limit is 80% of the machine, so without this only the
kernel's OOM killer stopped several large problems at once. Where the reference runs
on CUDA, the GPU's memory is shared out the same way: each problem gets a budget
estimated from its sizes (budget.py, asked in a subprocess with the GPU's free memory
at the start of the run), and a worker starts beside running ones only while their
budgets together fit (`Admission`; a problem that could not be sized counts as the
whole GPU). A worker alone always starts. A worker that ran out of memory (reason
"out-of-memory", oom.py) while another ran beside it is run once more alone; its
result says so, and an out-of-memory error alone is reported with its sizes. Without
CUDA (the wgpu device's memory is unknown) only the machine's memory is watched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch

from .gpulock import ENV as GPU_LOCK_ENV
from .oom import OOM_REASON, gib
from .problems import Problem
from .progress import Progress
from .worker import WorkerConfig

POLL_S = 0.1
RSS_POLL_S = 0.5  # reading every process's parent from /proc took ~30 ms here
LOG_TAIL_CHARS = 2000
# Another worker starts beside running ones only while at least this fraction of the
# machine's memory is available: 38 GB on the 128 GB H200 host, room for one more large
# problem (level-1 problems at full size have 1.9 GB inputs; their workers peaked at
# ~24 GB there when verification still held every trial's inputs at once) while the
# running ones may still grow.
MIN_AVAILABLE_FRACTION = 0.3
MEMORY_POLL_S = 1.0
BUDGET_TIMEOUT_S = 120.0  # for budget.py's subprocess: its imports and the GPU query,
BUDGET_TIMEOUT_PER_PROBLEM_S = 5.0  # and each problem's sizes on the meta device


def meminfo() -> dict[str, int]:
    """/proc/meminfo in kB (empty where it cannot be read)."""
    info = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if value.split():
                info[name] = int(value.split()[0])
    except (OSError, ValueError):
        pass
    return info


def default_rss_limit_gb() -> float:
    """80% of the machine's memory."""
    total = meminfo().get("MemTotal")
    return round(total / 2**20 * 0.8, 1) if total else 16.0


def memory_room() -> bool:
    """Whether MemAvailable is at least MIN_AVAILABLE_FRACTION of MemTotal (True when
    /proc/meminfo says neither)."""
    info = meminfo()
    total, available = info.get("MemTotal"), info.get("MemAvailable")
    if not total or available is None:
        return True
    return available >= MIN_AVAILABLE_FRACTION * total


@dataclass
class Job:
    """A worker admitted to run: its GPU budget (bytes; None: unknown) and whether
    another worker ran beside it at any time (`crowded`)."""

    name: str
    budget: int | None
    alone: bool = False
    crowded: bool = False


class Admission:
    """Which workers may start now. `capacity` is the GPU memory (bytes) the run may
    use, None where it is unknown (no CUDA): then only `room()` (the machine's memory)
    decides. Workers are admitted one at a time in the order they ask (`start` waits
    its turn), so a large problem is not passed over forever by small ones."""

    def __init__(self, capacity: int | None, stop: threading.Event | None = None,
                 room: Callable[[], bool] | None = None) -> None:
        self.capacity = capacity
        self.stop = stop or threading.Event()
        self.room = room or memory_room
        self.jobs: list[Job] = []
        self._turn = threading.Lock()
        self._changed = threading.Condition()

    def used(self) -> int:
        """The running workers' budgets; an unknown budget counts as the whole GPU."""
        return sum((self.capacity or 0) if job.budget is None else job.budget
                   for job in self.jobs)

    def may_start(self, budget: int | None, alone: bool = False) -> bool:
        """Whether a worker with `budget` may start now: none runs; or it need not run
        alone, none runs alone, the machine has room and (with a capacity) the budgets
        fit in it, an unknown budget counting as the whole GPU."""
        if not self.jobs:
            return True
        if alone or any(job.alone for job in self.jobs) or not self.room():
            return False
        if self.capacity is None:
            return True
        need = self.capacity if budget is None else budget
        return self.used() + need <= self.capacity

    def start(self, name: str, budget: int | None, alone: bool = False,
              on_wait: Callable[[], None] | None = None) -> Job:
        """Wait until `may_start` (or `stop` is set), then count the worker as running;
        `on_wait` is called at each look while waiting."""
        with self._turn:
            with self._changed:
                while not self.stop.is_set() and not self.may_start(budget, alone):
                    if on_wait:
                        on_wait()
                    self._changed.wait(MEMORY_POLL_S)
                job = Job(name, budget, alone, crowded=bool(self.jobs))
                for other in self.jobs:
                    other.crowded = True
                self.jobs.append(job)
                return job

    def finish(self, job: Job) -> None:
        with self._changed:
            self.jobs.remove(job)
            self._changed.notify_all()


def gpu_budgets(problems: list[Problem], size: str | None, seed: int,
                dtype: str | None = None, overrides: dict[str, str] | None = None,
                ) -> tuple[int | None, dict[str, dict | None]]:
    """The CUDA GPU's free memory and each problem's `budget.Estimate` (as a dict, None
    where unknown) at `size`, in `dtype`, with `overrides`, from budget.py in a
    subprocess; (None, {}) without CUDA or when it fails."""
    command = [sys.executable, "-m", "kernelwright.harness.budget", "--seed", str(seed)]
    if size:
        command += ["--size", size]
    if dtype:
        command += ["--dtype", dtype]
    for name, value in (overrides or {}).items():
        command += ["--set", f"{name}={value}"]
    command += [str(p.path) for p in problems]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=worker_env(),
                              stdin=subprocess.DEVNULL, check=True,
                              timeout=BUDGET_TIMEOUT_S + BUDGET_TIMEOUT_PER_PROBLEM_S
                              * len(problems))
        answer = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError):
        return None, {}
    if answer.get("capacity") is None:
        return None, {}
    by_path = answer.get("budgets") or {}
    return int(answer["capacity"]), {p.name: by_path.get(str(p.path)) for p in problems}


def cuda_present() -> bool:
    """Whether PyTorch sees a CUDA GPU (without opening a context in this process)."""
    return torch.cuda.is_available()


@dataclass
class BenchSettings:
    """How a suite is evaluated; all but the limits decide whether a stored result is
    reusable. `dtype` (``--dtype``: a name of problems.DTYPES, None for the problems' own)
    and `overrides` (``--set``: global name -> literal text) count only when set, so a run
    without them keeps the key it had before they existed."""

    size: str | None = "small"
    trials: int = 5
    loose: bool = False
    accelerated: bool = False
    compile_ref: bool = False
    candidate: str = "kernelwright"
    seed: int = 0
    alt_shape: bool = True
    time_target_s: float = 0.2
    timeout_s: float = 300.0
    max_rss_gb: float = 16.0
    dtype: str | None = None
    overrides: dict[str, str] = field(default_factory=dict)

    def key(self) -> str:
        fields = asdict(self)
        del fields["timeout_s"], fields["max_rss_gb"]
        for name in ("dtype", "overrides"):
            if not fields[name]:
                del fields[name]
        fields["compiler"] = compiler_digest()
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def worker_config(self, problem: Problem) -> WorkerConfig:
        return WorkerConfig(path=str(problem.path), name=problem.name, level=problem.level,
                            size=self.size, trials=self.trials, loose=self.loose,
                            accelerated=self.accelerated,
                            compile_ref=self.compile_ref, candidate=self.candidate,
                            seed=self.seed, alt_shape=self.alt_shape,
                            time_target_s=self.time_target_s, dtype=self.dtype,
                            overrides=dict(self.overrides))


NOT_COMPILER = ("harness", "optimize", "suite")  # the harness, the search agent, problems


def compiler_digest(package: Path | None = None) -> str:
    """A digest of the compiler's source: every Python file and WGSL template of the
    package less NOT_COMPILER (the bundled problems are keyed by their own file's
    digest): a result measured with other kernels is not reused by ``--resume``."""
    package = package or Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    files = [p for p in package.rglob("*") if p.suffix in (".py", ".wgsl") and p.is_file()]
    for path in sorted(files):
        relative = path.relative_to(package)
        if relative.parts[0] in NOT_COMPILER:
            continue
        digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


class ResultStore:
    """Results in SQLite, one row per (problem, settings), committed as each finishes; a
    store made before a column of ADDED existed gets it on opening."""

    COLUMNS = ("level", "compiled", "correct", "reason", "error", "compile_s", "time_ms",
               "ref_eager_ms", "speedup_eager", "ref_compile_ms", "speedup_compile",
               "dtype", "plan_bytes", "torch_peak_bytes")
    ADDED = {"dtype": "TEXT", "plan_bytes": "INTEGER", "torch_peak_bytes": "INTEGER"}

    def __init__(self, path: Path, fresh: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if fresh and path.exists():
            path.unlink()
        self.path = path
        self.db = sqlite3.connect(path)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS results (name TEXT NOT NULL, settings TEXT NOT NULL, "
            "file_sha TEXT, level INTEGER, compiled INTEGER, correct INTEGER, reason TEXT, "
            "error TEXT, compile_s REAL, time_ms REAL, ref_eager_ms REAL, speedup_eager REAL, "
            "ref_compile_ms REAL, speedup_compile REAL, finished_at TEXT, "
            "result TEXT NOT NULL, PRIMARY KEY (name, settings))")
        present = {row[1] for row in self.db.execute("PRAGMA table_info(results)")}
        for column, kind in self.ADDED.items():
            if column not in present:
                self.db.execute(f"ALTER TABLE results ADD COLUMN {column} {kind}")
        self.db.execute("CREATE TABLE IF NOT EXISTS runs (settings TEXT PRIMARY KEY, "
                        "description TEXT, started_at TEXT)")
        self.db.commit()

    def start_run(self, settings: BenchSettings) -> None:
        self.db.execute("INSERT OR IGNORE INTO runs VALUES (?, ?, ?)",
                        (settings.key(), json.dumps(asdict(settings)), now_iso()))
        self.db.commit()

    def get(self, name: str, key: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT result FROM results WHERE name = ? AND settings = ?",
                              (name, key)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, result: dict[str, Any], key: str) -> None:
        values = [result.get(column) for column in self.COLUMNS]
        self.db.execute(
            f"INSERT OR REPLACE INTO results (name, settings, file_sha, {', '.join(self.COLUMNS)}, "
            f"finished_at, result) VALUES (?, ?, ?, {', '.join('?' * len(self.COLUMNS))}, ?, ?)",
            [result["name"], key, result.get("file_sha"), *values, now_iso(),
             json.dumps(result, default=str)])
        self.db.commit()

    def all(self, key: str) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT result FROM results WHERE settings = ? ORDER BY rowid",
                               (key,)).fetchall()
        return [json.loads(row[0]) for row in rows]

    def close(self) -> None:
        self.db.close()


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def children_by_parent() -> dict[int, list[int]]:
    """Every process's children, from the parent field of /proc/PID/stat."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    return children


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc (0 if unreadable)."""
    children = children_by_parent()
    total, stack, seen = 0, [pid], set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        stack.extend(children.get(current, []))
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError):
            continue
    return total


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the worker's process group (it was started in a session of its own)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def log_tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-LOG_TAIL_CHARS:].strip()


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def worker_env() -> dict[str, str]:
    """The environment for workers: this package importable, output unbuffered."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    # torch.compile (--compile-ref) compiles in the worker itself, not in a pool of one
    # process per core: eight workers at once with a pool each took minutes to compile
    # one matmul on the 16-core H200 host.
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


class WorkerJob(Protocol):
    """What `run_worker` runs: a config whose `module` is the worker (run as ``python -m
    MODULE --config @CONFIG.json --result RESULT.json``, rewriting RESULT.json with its
    ``stage`` as it goes and ``finished: true`` at the end) and whose `blank` is the
    result of a worker that wrote none (a problem's WorkerConfig; training.TrainJob)."""

    module: ClassVar[str]
    name: str

    def to_json(self) -> str: ...

    def blank(self) -> dict[str, Any]: ...


def run_worker(cfg: WorkerJob, workdir: Path, timeout_s: float, max_rss_gb: float,
               on_tick: Callable[[float], None] | None = None,
               stop: threading.Event | None = None, gpu_lock: str | None = None,
               ) -> dict[str, Any]:
    """Run one job (a problem, a training workload) in a worker process under time and
    memory limits; a set `stop` kills it (the run was interrupted); `gpu_lock` is the
    lock file workers running at the same time share (gpulock.py)."""
    workdir.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^\w.-]+", "_", cfg.name)
    config_path = workdir / f"{stem}.config.json"
    result_path = workdir / f"{stem}.json"
    log_path = workdir / f"{stem}.log"
    config_path.write_text(cfg.to_json())
    result_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", cfg.module,
               "--config", f"@{config_path}", "--result", str(result_path)]
    limit_bytes = max_rss_gb * 2**30
    killed_for = None
    peak_rss = rss = 0
    started = last_rss = time.monotonic()
    env = worker_env()
    if gpu_lock:
        env[GPU_LOCK_ENV] = gpu_lock
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        try:
            while proc.poll() is None:
                now = time.monotonic()
                elapsed = now - started
                if now - last_rss >= RSS_POLL_S:
                    rss, last_rss = tree_rss_bytes(proc.pid), now
                    peak_rss = max(peak_rss, rss)
                if elapsed > timeout_s:
                    killed_for = "timeout"
                elif rss > limit_bytes:
                    killed_for = "memory"
                if stop is not None and stop.is_set():
                    killed_for = "interrupted"
                if killed_for:
                    kill_group(proc)
                    proc.wait()
                    break
                if on_tick:
                    on_tick(elapsed)
                time.sleep(POLL_S)
        finally:
            if proc.poll() is None:
                kill_group(proc)
                proc.wait()
    kill_group(proc)  # children the worker may have left behind
    wall_s = time.monotonic() - started

    result = None
    if result_path.exists():
        try:
            result = json.loads(result_path.read_text())
        except (OSError, json.JSONDecodeError):
            result = None
    if result is None:
        result = cfg.blank()
    result["peak_rss_gb"] = round(peak_rss / 2**30, 3)
    result["wall_s"] = wall_s
    result["log"] = str(log_path)
    if killed_for == "interrupted":
        fail(result, "interrupted", "the run was interrupted")
    elif killed_for == "timeout":
        fail(result, "timeout", f"killed after {timeout_s:g} s (stage: {result.get('stage')})")
    elif killed_for == "memory":
        fail(result, "memory", f"resident memory {rss / 2**30:.1f} GiB over the limit of "
             f"{max_rss_gb:g} GiB (stage: {result.get('stage')})")
    elif proc.returncode != 0 or not result.get("finished"):
        fail(result, "crash", f"worker {describe_exit(proc.returncode)} "
             f"(stage: {result.get('stage')}); log tail: {log_tail(log_path)[-500:]}")
    return result


def retried_alone(result: dict[str, Any], first_error: str | None) -> dict[str, Any]:
    """The result of a worker run again alone after it ran out of memory beside others
    (`first_error`): flagged when it got through, the error saying so when it did not."""
    result["oom_beside_others"] = first_error
    if result.get("reason") == OOM_REASON:
        result["error"] = f"{result['error']} (also when run alone, after running out of " \
                          "memory beside other jobs)"
    else:
        result.setdefault("flags", []).append(
            "ran out of memory beside other jobs; this result is from a run alone")
    return result


def describe_budget(capacity: int | None, estimate: dict | None) -> str:
    """The GPU budget of a job, for an out-of-memory error."""
    if capacity is None:
        return "GPU memory not budgeted (no CUDA GPU seen by the runner, or one job)"
    if not estimate:
        return f"its size could not be estimated; {gib(capacity)} of GPU memory free at the start"
    return (f"estimated budget {gib(estimate['budget_bytes'])} (inputs "
            f"{gib(estimate['input_bytes'])}, parameters {gib(estimate['param_bytes'])}, "
            f"output {gib(estimate['output_bytes'])}) of {gib(capacity)} of GPU memory free "
            "at the start")


def fail(result: dict[str, Any], reason: str, detail: str) -> None:
    result["correct"] = False
    result["reason"] = reason
    result["error"] = f"{reason}: {detail}"
    result["finished"] = True


def run_suite(problems: list[Problem], settings: BenchSettings, out_dir: Path,
              resume: bool = False, progress: Progress | None = None,
              jobs: int = 1) -> list[dict[str, Any]]:
    """Evaluate `problems`, `jobs` at a time; returns their results in the problems' order.

    With several jobs the workers share the GPU through `gpulock`: compiles and
    correctness trials overlap, timed calls never do; and another worker starts only
    while there is memory for it, the machine's and (with CUDA) the GPU's by the
    problems' budgets (`Admission`); one that ran out of memory beside others is run
    again alone (`retry_alone`). Results reach SQLite (from this thread only) in the
    order problems finish. On an exception (Ctrl-C) the running workers are killed
    and problems not started are dropped.
    """
    store = ResultStore(out_dir / "results.sqlite", fresh=not resume)
    store.start_run(settings)
    key = settings.key()
    progress = progress or Progress(len(problems))
    results: dict[int, dict[str, Any]] = {}
    todo = []
    for index, problem in enumerate(problems):
        sha = file_sha(problem.path)
        previous = store.get(problem.name, key) if resume else None
        if previous is not None and previous.get("file_sha") == sha:
            progress.finish(previous, "  (resumed)")
            results[index] = previous
        else:
            todo.append((index, problem, sha))
    workdir = out_dir / "work"
    gpu_lock = str(workdir / "gpu.lock") if jobs > 1 else None
    stop = threading.Event()
    capacity, budgets = None, {}
    if jobs > 1 and todo and cuda_present():
        capacity, budgets = gpu_budgets([problem for _, problem, _ in todo], settings.size,
                                        settings.seed, settings.dtype, settings.overrides)
    admission = Admission(capacity, stop)

    def run_admitted(problem: Problem, budget: int | None, alone: bool) -> tuple[dict, Job]:
        # the running workers' threads keep the progress line drawn while one waits
        job = admission.start(problem.name, budget, alone, progress.tick)
        try:
            progress.start(problem.name)
            return run_worker(settings.worker_config(problem), workdir, settings.timeout_s,
                              settings.max_rss_gb, progress.tick, stop=stop,
                              gpu_lock=gpu_lock), job
        finally:
            admission.finish(job)

    def evaluate(problem: Problem) -> dict[str, Any]:
        estimate = budgets.get(problem.name)
        budget = estimate["budget_bytes"] if estimate else None
        result, job = run_admitted(problem, budget, False)
        if result.get("reason") == OOM_REASON and job.crowded and not stop.is_set():
            first = result.get("error")
            result, _ = run_admitted(problem, budget, True)
            result = retried_alone(result, first)
        if result.get("reason") == OOM_REASON:
            result["gpu_budget"] = {"capacity_bytes": capacity, **(estimate or {})}
            result["error"] = f"{result['error']}; {describe_budget(capacity, estimate)}"
        return result

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        futures = {pool.submit(evaluate, problem): (index, sha) for index, problem, sha in todo}
        for future in as_completed(futures):
            index, sha = futures[future]
            result = future.result()
            result["file_sha"] = sha
            store.put(result, key)
            progress.finish(result)
            results[index] = result
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        store.close()
    return [results[index] for index in sorted(results)]
