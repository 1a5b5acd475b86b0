"""Tune one kernel: generate every candidate, check it, time the survivors, pick one.

`tune_kernel(request, device, settings)` takes a `templates.KernelRequest` (the
kernel with default knobs, its search space and a generator for any other knobs)
and runs each candidate as a plan of its own: one kernel, one input buffer per
buffer it reads (the same bindings, in the same order, as in the compiled plan) and
its output buffer. Every candidate sees the same fresh random inputs as the
default kernel (`trials` sets: normal values, then positive ones, so that a NaN of
the reference rarely hides an element the candidate did not write); outputs are
poisoned with NaN first and compared element by element with the default kernel's
(fp32: |got - want| <= 1e-4 * max(1, max |want|); integers and NaN/inf exactly).
A candidate whose knobs the template rejects, that the shader compiler rejects, or
that does not match is discarded and recorded with the reason.

The default and the survivors are timed with GPU timestamps (median over `reps`
runs after `warmup` runs). The default is timed first and again last and keeps the
better of its two medians; a candidate replaces it only when at least `min_gain`
times faster, so that noise does not swap knobs for nothing.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from ..ir import CompileError, Value
from ..plan import Buffer, Kernel, Plan, TensorSpec
from ..runtime import NUMPY_OF, Device, Executable
from ..templates import Generated, KernelKey, KernelRequest

TOLERANCE = 1e-4  # fp32, relative to the scale of the output (KernelBench's 1e-4)
TORCH_NAME = {"f32": "float32", "i32": "int32", "bool": "bool"}


@dataclass
class TuneSettings:
    reps: int = 20  # timed runs per candidate; the median counts
    warmup: int = 3  # untimed runs before them
    trials: int = 2  # random input sets every candidate is checked on
    seed: int = 0
    min_gain: float = 1.02  # how much faster than the default a winner must be
    deadline: float | None = None  # time.monotonic() past which no candidate is tried

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline


@dataclass
class Candidate:
    knobs: dict
    status: str  # "default" | "ok" | "invalid" | "compile error" | "run error" | "mismatch"
    ms: float | None = None
    error: str | None = None


@dataclass
class KernelResult:
    """What the tuner decided for one kernel."""

    key: KernelKey
    kind: str
    status: str  # "tuned" | "cached" (found in the cache) | "skipped" | "failed"
    default_knobs: dict
    knobs: dict  # the winner's (the default's unless tuned or cached)
    default_ms: float | None = None
    best_ms: float | None = None
    candidates: list[Candidate] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""

    @property
    def gain(self) -> float | None:
        """Default time over winner time."""
        if not self.default_ms or not self.best_ms:
            return None
        return self.default_ms / self.best_ms

    @property
    def rejected(self) -> list[Candidate]:
        return [c for c in self.candidates if c.status not in ("default", "ok")]

    def describe(self) -> str:
        """One line for progress output."""
        head = f"{short_key(self.key)}: {self.status}"
        if self.status in ("skipped", "failed"):
            return f"{head} ({self.note})"
        parts = [head]
        if self.candidates:
            parts.append(f"{len(self.candidates)} candidates, {len(self.rejected)} rejected")
        if self.gain is not None:
            parts.append(f"{self.default_ms:.4g} -> {self.best_ms:.4g} ms ({self.gain:.2f}x)")
        if self.knobs != self.default_knobs:
            parts.append(format_knobs(self.knobs))
        return ", ".join(parts)


def short_key(key: KernelKey) -> str:
    """Template, shapes and the digest's first characters (equal shapes, other fusions)."""
    return f"{key.template} {key.bucket} #{key.digest[:6]}"


def format_knobs(knobs: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in knobs.items())


def tune_kernel(request: KernelRequest, device: Device, settings: TuneSettings) -> KernelResult:
    """Try every setting of the request's space; the fastest correct one wins."""
    start = time.perf_counter()
    default = request.default
    result = KernelResult(request.key, request.kind, "tuned", default.knobs, default.knobs)
    if not device.has_timestamps:
        result.status, result.note = "failed", f"{device.description} has no timestamp queries"
        return result
    inputs = random_inputs(default.reads, settings.trials, settings.seed)
    base = Executable(single_kernel_plan(default, request.out), device)
    expected = [run_once(base, arrays) for arrays in inputs]
    first = Candidate(default.knobs, "default", time_ms(base, inputs[0], settings))
    result.candidates.append(first)
    for knobs in request.space[1:]:
        if settings.out_of_time():
            result.status, result.note = "skipped", "budget spent"
            break
        result.candidates.append(try_candidate(request, knobs, inputs, expected, device,
                                               settings))
    first.ms = min(first.ms, time_ms(base, inputs[0], settings))
    survivors = [c for c in result.candidates if c.ms is not None]
    best = min(survivors, key=lambda c: c.ms)
    if best.ms * settings.min_gain > first.ms:
        best = first
    result.default_ms, result.best_ms = first.ms, best.ms
    if result.status == "tuned":
        result.knobs = best.knobs
    result.seconds = time.perf_counter() - start
    return result


def try_candidate(request: KernelRequest, knobs: dict, inputs: list[list[np.ndarray]],
                  expected: list[list[np.ndarray]], device: Device,
                  settings: TuneSettings) -> Candidate:
    """Generate, compile and check one setting; time it when it is correct."""
    try:
        gen = request.generate(knobs)
    except CompileError as exc:
        return Candidate(knobs, "invalid", error=str(exc))
    if gen.key != request.key or [id(v) for v in gen.reads] != \
            [id(v) for v in request.default.reads]:
        return Candidate(knobs, "invalid", error="the knobs changed what the kernel computes")
    try:
        exe = Executable(single_kernel_plan(gen, request.out), device)
    except Exception as exc:  # noqa: BLE001 - the shader compiler's verdict, whatever its type
        return Candidate(knobs, "compile error", error=_first_lines(exc))
    try:
        for arrays, want in zip(inputs, expected):
            for w, g in zip(want, run_once(exe, arrays)):
                why = mismatch(w, g, request.out.dtype)
                if why:
                    return Candidate(knobs, "mismatch", error=why)
        return Candidate(knobs, "ok", time_ms(exe, inputs[0], settings))
    except Exception as exc:  # noqa: BLE001 - a device error while running it
        return Candidate(knobs, "run error", error=_first_lines(exc))


def single_kernel_plan(gen: Generated, out: Value) -> Plan:
    """A plan of this kernel alone: an input buffer per buffer it reads, then its output."""
    buffers = [Buffer(i, max(4, v.numel * 4), "input", v.dtype) for i, v in enumerate(gen.reads)]
    o = len(buffers)
    buffers.append(Buffer(o, max(4, out.numel * 4), "output", out.dtype))
    kernel = Kernel(gen.name, gen.source, list(range(o + 1)), gen.grid, key=str(gen.key),
                    knobs=gen.knobs)
    return Plan(buffers=buffers, kernels=[kernel],
                inputs=[TensorSpec(i, (max(1, v.numel),), TORCH_NAME[v.dtype])
                        for i, v in enumerate(gen.reads)],
                outputs=[TensorSpec(o, (max(1, out.numel),), TORCH_NAME[out.dtype])],
                output_tree="single")


def random_inputs(reads: list[Value], trials: int, seed: int) -> list[list[np.ndarray]]:
    """`trials` sets of random contents for the buffers a kernel reads: f32 normal in even
    trials, uniform in [0.1, 2) in odd ones; i32 in [0, 8); bool 0 or 1."""
    rng = np.random.default_rng(seed)
    sets = []
    for t in range(max(1, trials)):
        arrays = []
        for v in reads:
            n = max(1, v.numel)
            if v.dtype == "f32":
                a = rng.standard_normal(n) if t % 2 == 0 else rng.uniform(0.1, 2.0, n)
            else:
                a = rng.integers(0, 8 if v.dtype == "i32" else 2, n)
            arrays.append(a.astype(NUMPY_OF[v.dtype]))
        sets.append(arrays)
    return sets


def run_once(exe: Executable, arrays: list[np.ndarray]) -> list[np.ndarray]:
    exe.poison()
    return [o.copy() for o in exe.run(arrays)]


def time_ms(exe: Executable, arrays: list[np.ndarray], settings: TuneSettings) -> float:
    for _ in range(settings.warmup):
        exe.run(arrays)
    return statistics.median(exe.gpu_times_ms([arrays], max(1, settings.reps)))


def mismatch(want: np.ndarray, got: np.ndarray, dtype: str) -> str | None:
    """Why `got` is not `want` (None when every element matches)."""
    want, got = want.reshape(-1), got.reshape(-1)
    if dtype != "f32":
        bad = want != got
    else:
        w, g = want.astype(np.float64), got.astype(np.float64)
        finite = np.isfinite(w)
        scale = max(1.0, float(np.abs(w[finite]).max())) if finite.any() else 1.0
        with np.errstate(invalid="ignore"):
            ok = np.where(finite, np.abs(g - w) <= TOLERANCE * scale,
                          (w == g) | (np.isnan(w) & np.isnan(g)))
        bad = ~ok
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    return (f"{int(bad.sum())} of {bad.size} elements differ, the first at {i}: "
            f"{got[i]} for {want[i]}")


def _first_lines(exc: Exception, n: int = 6) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return "\n".join(text.splitlines()[:n])
