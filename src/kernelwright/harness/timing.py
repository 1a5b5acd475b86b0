"""Timing: how long a candidate and its PyTorch reference take, measured honestly.

The candidate is timed from GPU timestamps when it offers ``gpu_times_ms`` (as
kernelwright's compiled modules do; uploads excluded), else by the wall clock,
labelled so. The reference is timed with CUDA events on the same machine's GPU
when CUDA is there (eager, or ``torch.compile`` when asked), else on the CPU with
the wall clock, labelled "cpu". Every measurement warms up first, picks its
repetitions to last about `target_s`, rotates among several input sets so that
caches do not flatter, and reports the median with the quartiles.

It hands `Timing` records (median, spread, repetitions, source) to the worker.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..runtime import runtime

TARGET_S = 0.2  # aim for this much measured time per figure
MIN_REPS = 5
MAX_REPS = 1000
WARMUP_BATCH = 5  # calls per warm-up round
WARMUP_ROUNDS = 12  # at most; warm-up stops once two rounds agree within 10%
WARMUP_BUDGET_S = 2.0
WALL_BUDGET_S = 2.0  # the measured calls may take this long in wall time, at most
ROTATE_MAX_BYTES = 64 << 20  # input sets larger than this are not rotated (see timing_sets)
# Why a wall budget: on a software driver one timestamped call took ~10 ms of wall
# time for 0.05 ms of GPU time, so 0.2 s of GPU time cost 10 s per problem.
# Why rounds and not a fixed count: in a fresh process PyTorch's first ~20 small CPU
# ops each took 8 ms here (2026-11, 2-core CPU machine, OpenMP), 1000x their steady time.


@dataclass
class Timing:
    median_ms: float
    q1_ms: float
    q3_ms: float
    min_ms: float
    max_ms: float
    reps: int
    source: str  # "gpu-timestamps", "wall-clock", "cuda-events", "cpu"
    build_s: float | None = None  # first call (torch.compile's compile), when measured

    @property
    def iqr_ms(self) -> float:
        return self.q3_ms - self.q1_ms

    def to_dict(self) -> dict:
        data = asdict(self)
        data["iqr_ms"] = self.iqr_ms
        return data


def summarize_times(times_ms: list[float], source: str, build_s: float | None = None) -> Timing:
    if not times_ms:
        raise ValueError("no timings")
    ordered = sorted(times_ms)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return Timing(statistics.median(ordered), q1, q3, ordered[0], ordered[-1], len(ordered),
                  source, build_s)


def choose_reps(estimate_ms: float, target_s: float = TARGET_S, max_reps: int = MAX_REPS) -> int:
    if estimate_ms <= 0 or not math.isfinite(estimate_ms):
        return max_reps
    return max(MIN_REPS, min(max_reps, int(target_s * 1000 / estimate_ms)))


def measure(batch: Callable[[int], list[float]], source: str, target_s: float = TARGET_S,
            max_reps: int = MAX_REPS, build_s: float | None = None) -> Timing:
    """Warm up with `batch(n)` (n calls, their times in ms) until steady, then measure."""
    previous, wall_per_call = warm_up(batch)
    reps = choose_reps(previous, target_s, max_reps)
    reps = min(reps, max(MIN_REPS, int(WALL_BUDGET_S / max(wall_per_call, 1e-9))))
    return summarize_times(list(batch(reps)), source, build_s)


def warm_up(batch: Callable[[int], list[float]]) -> tuple[float, float]:
    """Call `batch(WARMUP_BATCH)` until two rounds agree within 10% (or WARMUP_BUDGET_S
    passed); returns the last round's median (ms) and the wall seconds per call. A GPU
    fresh from idle ran the first calls of a 4096^3 matmul 3.4x slower on the H200
    (tools/kernels.py's first case, 2026-12-01, before it warmed up)."""
    previous, wall_per_call = None, 0.0
    started = time.perf_counter()
    for _ in range(WARMUP_ROUNDS):
        round_start = time.perf_counter()
        current = statistics.median(batch(WARMUP_BATCH))
        wall_per_call = (time.perf_counter() - round_start) / WARMUP_BATCH
        steady = previous is not None and abs(current - previous) <= 0.1 * previous
        previous = current
        if steady or time.perf_counter() - started > WARMUP_BUDGET_S:
            break
    return previous, wall_per_call


_AWAKE: list = []  # the CUDA tensor that keeps this process's context open


def keep_gpu_awake() -> bool:
    """Open a CUDA context for the rest of this process when PyTorch sees a CUDA GPU
    (True then); nothing elsewhere. On the H200, Vulkan compute ran 3x slower while no
    process had a CUDA context open (gemm_4096: 12.5 ms, 3.95 ms right after
    `torch.zeros(1, device="cuda")`; docs/PERF.md), and a search's sandbox, which opened
    none, timed kernels 1.6-3.6x apart from one call to the next as other processes'
    contexts came and went. Every process that times Vulkan kernels calls this first:
    the optimize sandbox, the optimize profile, `kernelwright tune`, tools/kernels.py
    (the harness's workers have PyTorch's open for their references)."""
    if not _AWAKE and torch.cuda.is_available():
        _AWAKE.append(torch.zeros(1, device="cuda"))
        torch.cuda.synchronize()
    return bool(_AWAKE)


def side_by_side_caveat() -> str | None:
    """Why figures timed while other jobs run (``--jobs``) cannot be trusted on this
    machine, or None. The GPU lock keeps the other jobs' GPU work off a timed call, not
    their CPU work: that is fine for GPU timestamps and CUDA events, not where the timed
    calls themselves run on the CPU."""
    if not torch.cuda.is_available():
        return "the reference is timed on the CPU, beside the other jobs' CPU work"
    try:
        if runtime.default_device().is_software:
            return "the GPU is a software driver: its timed calls share the CPU with the " \
                   "other jobs' work"
    except Exception:  # noqa: BLE001 - no device: nothing of ours is timed
        return None
    return None


def timing_sets(make: Callable[[int], list], count: int) -> list[list]:
    """The input sets to rotate through, `make(i)` for i < count: all of them, unless
    the first is larger than ROTATE_MAX_BYTES (more than the H200's 50 MB L2: no cache
    can flatter a call, and uploading hundreds of MB before every timed call of the
    candidate cost seconds); then only the first is made (host memory: several
    workers of a parallel run hold their sets at once)."""
    first = make(0)
    nbytes = sum(x.numel() * x.element_size() for x in first if isinstance(x, torch.Tensor))
    if nbytes > ROTATE_MAX_BYTES:
        return [first]
    return [first] + [make(i) for i in range(1, count)]


def wall_times_ms(fn: Callable[[list], Any], input_sets: list[list], reps: int,
                  sync: Callable[[], None] = lambda: None) -> list[float]:
    times = []
    for i in range(reps):
        inputs = input_sets[i % len(input_sets)]
        sync()
        start = time.perf_counter()
        fn(inputs)
        sync()
        times.append((time.perf_counter() - start) * 1000)
    return times


def time_candidate(candidate: Callable, input_sets: list[list], target_s: float = TARGET_S,
                   max_reps: int = MAX_REPS) -> Timing:
    """GPU time per call from the candidate's timestamps, else wall time per call."""
    gpu_times = getattr(candidate, "gpu_times_ms", None)
    if callable(gpu_times):
        return measure(lambda n: list(gpu_times(input_sets, n)), "gpu-timestamps",
                       target_s, max_reps)

    def call(inputs: list) -> Any:
        return candidate(*inputs)

    return measure(lambda n: wall_times_ms(call, input_sets, n), "wall-clock", target_s,
                   max_reps)


def reference_label(compiled: bool = False) -> str:
    """Where and how the reference is timed, for reports."""
    mode = "torch.compile" if compiled else "eager"
    if torch.cuda.is_available():
        return f"PyTorch {mode}, CUDA events on {torch.cuda.get_device_name()}"
    return f"PyTorch {mode} on the CPU ({torch.get_num_threads()} threads, no CUDA), wall clock"


def to_device(inputs: list, device: torch.device) -> list:
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


@dataclass
class PreparedReference:
    """The reference, on its device, ready to be timed (see `prepare_reference`)."""

    fn: Callable
    sets: list[list]
    cuda: bool
    build_s: float | None  # torch.compile's first call, when compiled


def prepare_reference(model: torch.nn.Module, input_sets: list[list], compiled: bool = False,
                      allow_tf32: bool = False) -> PreparedReference:
    """Put the reference and its inputs on the timing device and call it once (with
    `compiled`, that first call is torch.compile's compile, reported as `build_s`).

    TF32 stays off unless `allow_tf32` (strict mode compares fp32 with fp32).
    """
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32
    module = copy.deepcopy(model).to(device).eval()
    sets = [to_device(inputs, device) for inputs in input_sets]
    fn = torch.compile(module) if compiled else module
    with torch.no_grad():
        start = time.perf_counter()
        fn(*sets[0])
        if cuda:
            torch.cuda.synchronize()
    return PreparedReference(fn, sets, cuda, time.perf_counter() - start if compiled else None)


def time_prepared(ref: PreparedReference, target_s: float = TARGET_S,
                  max_reps: int = MAX_REPS) -> Timing:
    """The reference's time per call: CUDA events when CUDA is there, else CPU wall clock."""
    with torch.no_grad():
        if ref.cuda:
            return measure(lambda n: event_times_ms(ref.fn, ref.sets, n), "cuda-events",
                           target_s, max_reps, ref.build_s)
        return measure(lambda n: wall_times_ms(lambda inputs: ref.fn(*inputs), ref.sets, n),
                       "cpu", target_s, max_reps, ref.build_s)


def event_times_ms(fn: Callable, sets: list[list], reps: int) -> list[float]:
    """Per-call GPU time between CUDA events, synchronising after each call."""
    times = []
    for i in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*sets[i % len(sets)])
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times
