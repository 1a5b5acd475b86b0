"""The sandbox: candidate kernels are compiled and run in a process of their own.

``python -m kernelwright.optimize.sandbox`` reads jobs, one JSON object per line, on
stdin and answers each with one JSON line (on the stdout it was started with; anything
else the process prints goes to stderr). A job carries the kernel's bindings
(element count, dtype, access), the *reference* kernel (the compiler's kernel, which
was verified against PyTorch as part of the module), the current *best* kernel and one
*candidate*. The worker

1. checks the candidate's declared bindings: exactly @group(0) @binding(0..n-1), the
   inputs `var<storage, read>`, the output `read_write` ("rejected" otherwise);
2. builds its pipeline: a shader compiler error is "compile_error" with the text;
3. runs the reference and the candidate on `trials` fresh random input sets (normal,
   positive and heavy-tailed in turn; check.inputs.kernel_inputs), the output poisoned
   with NaN before every run, and compares every element with the reference's
   (check.tolerance: fp32 within 1e-4 of the output's scale), on the GPU
   (tune.gpucheck, which also compares the inputs with the reference's copies; only a
   mismatch is read back, to be described). Cheats are
   "rejected": poison left in place (part of the output unwritten), inputs written to,
   an output equal to one of the inputs, or the same constant everywhere where the
   reference's output varies; any other difference is a "mismatch" with the first
   differing elements and the error norms;
4. times the best kernel and the candidate with GPU timestamps, interleaved (best,
   candidate, best, candidate; each the median of `reps` runs), and returns both.

The parent (`Sandbox`) starts the worker once, waits for its "ready" line, sends one
job at a time and kills the worker's process group when a job runs past its timeout
("timeout") or the worker dies ("crash"); the next job starts a fresh worker. So a
candidate that hangs or crashes costs that candidate only, and no candidate is ever
compiled or run in the agent's process. Each job builds its own buffers and
pipelines; nothing but the opened device is shared between jobs. When problems are
searched side by side (``optimize --jobs``), the worker holds the bench harness's GPU
lock (harness/gpulock.py) shared around its runs and exclusive while it times.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from ..check.inputs import kernel_inputs
from ..codegen.codegen import declared_bindings
from ..harness.gpulock import GpuLock
from ..harness.runner import worker_env
from ..harness.timing import keep_gpu_awake
from ..runtime import runtime
from ..runtime.runtime import Executable
from ..tune.gpucheck import check_kernel
from ..tune.tuner import TuneSettings, single_kernel_plan, time_ms

START_TIMEOUT_S = 180.0  # imports and opening the device


# -- the worker (child process) ---------------------------------------------------------
def binding_problem(source: str, bindings: list[dict]) -> str | None:
    """Why the candidate's declared bindings differ from the kernel's, else None."""
    declared = declared_bindings(source)
    want = {b["index"]: b["access"] for b in bindings}
    seen: dict[int, str] = {}
    for group, binding, space, access, _ in declared:
        if group != 0 or binding not in want:
            return f"declares @group({group}) @binding({binding}), which the kernel does not have"
        if space != "storage":
            return f"binding {binding} is var<{space}>; every binding is var<storage, ...>"
        seen[binding] = access
    for index, access in want.items():
        if index not in seen:
            return f"binding {index} is not declared"
        if seen[index] != access:
            return (f"binding {index} is declared {seen[index]}, the kernel's is {access} "
                    "(inputs must be var<storage, read>)")
    return None


def evaluate(job: dict, device) -> dict:
    """Check and time one candidate (see the module docstring)."""
    # The buffers: one per binding of the reference that views no other; a kernel's
    # binding that views another (`alias`, a vec4 view) binds that binding's buffer.
    ref_bindings = job["reference"]["bindings"]
    buffers = [(b["numel"], b["dtype"]) for b in ref_bindings if b.get("alias") is None]

    def views(bindings: list[dict]) -> list[int]:
        return [b["alias"] for b in bindings[:-1] if b.get("alias") is not None]

    def build(kernel: dict) -> Executable:
        plan = single_kernel_plan("kernel", kernel["source"], tuple(kernel["grid"]), buffers,
                                  views=views(kernel["bindings"]),
                                  trusted=kernel.get("trusted", False))
        return Executable(plan, device)

    cand = job["candidate"]
    why = binding_problem(cand["source"], cand["bindings"])
    own = [(b["numel"], b["dtype"]) for b in cand["bindings"] if b.get("alias") is None]
    if why is None and own != buffers:
        why = f"its buffers {own} are not the kernel's {buffers}"
    aliases = [b.get("alias") is not None for b in cand["bindings"]]
    if why is None and (aliases[:-1] != sorted(aliases[:-1]) or aliases[-1]):
        why = "views of inputs must come after the inputs, before the output"
    if why:
        return {"status": "rejected", "message": f"bindings: {why}"}
    lock = GpuLock.from_env()  # set when problems run side by side (optimize --jobs)
    started = time.perf_counter()
    with lock.shared():
        reference = build(job["reference"])
    try:
        with lock.shared():
            exe = build(cand)
    except Exception as exc:  # noqa: BLE001 - the shader compiler's verdict, whatever its type
        return {"status": "compile_error", "message": f"{type(exc).__name__}: {exc}".strip()}

    # One input set at a time (the first is kept for the timing), the outputs checked
    # where they are (tune.gpucheck): only a mismatch is read back, to be described.
    trials, seed = max(1, job.get("trials", 3)), job.get("seed", 0)
    built = time.perf_counter()
    check = check_kernel(device, reference, exe,
                         lambda t: kernel_inputs(buffers[:-1], t, seed), trials, lock)
    if check.status != "correct":
        return {"status": check.status, "message": check.message}
    first, max_err = check.first, check.max_abs_err
    checked = time.perf_counter()
    with lock.shared():
        best = build(job["best"]) if job.get("best") else reference
    settings = TuneSettings(reps=job.get("reps", 20), warmup=job.get("warmup", 3))
    best_times, cand_times = [], []
    with lock.exclusive():
        for _ in range(max(1, job.get("rounds", 2))):
            best_times.append(time_ms(best, first, settings))
            cand_times.append(time_ms(exe, first, settings))
    done = time.perf_counter()
    return {"status": "correct", "time_ms": min(cand_times), "best_ms": min(best_times),
            "max_abs_err": max_err,
            "message": f"{check.message}; build {built - started:.1f} s, check "
                       f"{checked - built:.1f} s, timing {done - checked:.1f} s"}


def serve() -> int:
    """The worker loop: jobs on stdin, one JSON line per job on the original stdout."""
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else written to stdout (drivers, prints) goes to the log
    sys.stdout = sys.stderr

    # the checked device: the candidate is untrusted, and the reference, the best kernel
    # and the comparisons must share its buffers (Dawn's checked device is another one)
    device = runtime.default_device().checked()
    keep_gpu_awake()  # timings 1.6-3.6x apart without (harness/timing.py)
    reply.write(json.dumps({"ready": True, "device": device.description,
                            "timestamps": device.has_timestamps}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = evaluate(json.loads(line), device)
        except Exception as exc:  # noqa: BLE001 - reported as this candidate's crash
            traceback.print_exc()
            result = {"status": "crash", "message": f"{type(exc).__name__}: {exc}"[:4000]}
        reply.write(json.dumps(result) + "\n")
    return 0


# -- the parent side --------------------------------------------------------------------
class Sandbox:
    """A worker process that judges one candidate at a time; restarted after a timeout
    or a crash. Use as a context manager (or call `close`)."""

    def __init__(self, log_path: str | Path | None = None, timeout_s: float = 60.0) -> None:
        self.log_path = Path(log_path) if log_path else None
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen | None = None
        self.device: str | None = None
        self.restarts = 0

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kernelwright.optimize.sandbox"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, start_new_session=True, env=worker_env())
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        hello = self._read_line(START_TIMEOUT_S)
        if hello is None:
            self.close()
            raise RuntimeError("the sandbox worker did not start (see its log "
                               f"{self.log_path})" if self.log_path else
                               "the sandbox worker did not start")
        self.device = json.loads(hello).get("device")

    def _read_line(self, timeout_s: float) -> str | None:
        """One line from the worker, or None when it died or the time ran out."""
        assert self.proc is not None and self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        buf = b""
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(min(left, 1.0)):
                    if left <= 0:
                        return None
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    return None
                buf += chunk
                if buf.endswith(b"\n"):
                    return buf.decode()
        finally:
            sel.close()

    def evaluate(self, job: dict, timeout_s: float | None = None) -> dict:
        """The worker's verdict on one job; "timeout" or "crash" when it hangs or dies."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        timeout = timeout_s or self.timeout_s
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
            line = self._read_line(timeout)
        except (BrokenPipeError, OSError):
            line = None
        if line is not None:
            return json.loads(line)
        died = self.proc.poll()
        self.close()
        self.restarts += 1
        if died is None:
            return {"status": "timeout", "message": f"killed after {timeout:g} s"}
        return {"status": "crash", "message": f"the sandbox worker died ({_exit(died)})"}

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self.proc = None


def _exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


if __name__ == "__main__":
    sys.exit(serve())
