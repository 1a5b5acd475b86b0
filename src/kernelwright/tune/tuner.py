"""Tune one kernel: generate every candidate, check it, time the survivors, pick one.

`tune_kernel(request, device, settings)` takes a `kernels.KernelRequest` (the
kernel with default knobs, its search space and a generator for any other knobs)
and runs each candidate as a plan of its own: one kernel, one input buffer per
buffer it reads (the same bindings, in the same order, as in the compiled plan) and
its output buffer. Every candidate is checked against the default kernel by
gpucheck.check_kernel, as the search's sandbox checks its candidates: both run on the
same fresh random inputs (`trials` sets of check.inputs.kernel_inputs, drawn one at a
time: normal values, then positive ones, so that a NaN of the reference rarely hides an
element the candidate did not write), outputs poisoned with NaN first and compared
element by element on the GPU (check.tolerance's rule: fp32 |got - want| <= 1e-4 *
max(1, max |want|); integers and NaN/inf exactly; check.tolerance.compare describes a
mismatch).
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

from ..check.inputs import kernel_inputs
from ..dtypes import buffer_bytes, default_torch_name
from ..ir.ir import CompileError, Value
from ..kernels import Generated, KernelKey, KernelRequest
from ..plan import Buffer, Kernel, Plan, TensorSpec
from ..runtime.runtime import Device, Executable
from .gpucheck import check_kernel


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
    operands = operands_of(default, request.out)
    # every candidate is checked on the same sets: drawn once (set 0 is also timed on)
    sets = [kernel_inputs(operands[:-1], t, settings.seed)
            for t in range(max(1, settings.trials))]
    inputs = sets[0]
    base = Executable(single_kernel_plan(default.name, default.source, default.grid, operands,
                                         str(default.key), default.knobs, default.views,
                                         default.workgroup_bytes), device)
    first = Candidate(default.knobs, "default", time_ms(base, inputs, settings))
    result.candidates.append(first)
    for knobs in request.space[1:]:
        if settings.out_of_time():
            result.status, result.note = "skipped", "budget spent"
            break
        result.candidates.append(try_candidate(request, knobs, base, sets.__getitem__, device,
                                               settings))
    first.ms = min(first.ms, time_ms(base, inputs, settings))
    survivors = [c for c in result.candidates if c.ms is not None]
    best = min(survivors, key=lambda c: c.ms)
    if best.ms * settings.min_gain > first.ms:
        best = first
    result.default_ms, result.best_ms = first.ms, best.ms
    if result.status == "tuned":
        result.knobs = best.knobs
    result.seconds = time.perf_counter() - start
    return result


def try_candidate(request: KernelRequest, knobs: dict, base: Executable, input_set,
                  device: Device, settings: TuneSettings) -> Candidate:
    """Generate, compile and check one setting against the default kernel `base`
    (gpucheck.check_kernel on `settings.trials` sets of `input_set(t)`); time it when it
    is correct."""
    try:
        gen = request.generate(knobs)
    except CompileError as exc:
        return Candidate(knobs, "invalid", error=str(exc))
    if gen.key != request.key or [id(v) for v in gen.reads] != \
            [id(v) for v in request.default.reads]:
        return Candidate(knobs, "invalid", error="the knobs changed what the kernel computes")
    try:
        exe = Executable(single_kernel_plan(gen.name, gen.source, gen.grid,
                                            operands_of(gen, request.out), str(gen.key),
                                            gen.knobs, gen.views, gen.workgroup_bytes), device)
    except Exception as exc:  # noqa: BLE001 - the shader compiler's verdict, whatever its type
        return Candidate(knobs, "compile error", error=_first_lines(exc))
    try:
        check = check_kernel(device, base, exe, input_set, settings.trials)
        if check.status != "correct":
            return Candidate(knobs, "mismatch", error=check.message)
        return Candidate(knobs, "ok", time_ms(exe, check.first, settings))
    except Exception as exc:  # noqa: BLE001 - a device error while running it
        return Candidate(knobs, "run error", error=_first_lines(exc))


def operands_of(gen: Generated, out: Value) -> list[tuple[int, str]]:
    """(element count, buffer dtype) of every buffer the kernel binds: reads, then out."""
    return [(v.numel, v.stored) for v in gen.reads] + [(out.numel, out.stored)]


def single_kernel_plan(name: str, source: str, grid: tuple[int, int, int],
                       operands: list[tuple[int, str]], key: str = "",
                       knobs: dict | None = None, views: list[int] = (),
                       workgroup_bytes: int = 0, trusted: bool = True) -> Plan:
    """A plan of one kernel alone: an input buffer per buffer it reads, then its output
    (`operands`: (element count, device dtype) per buffer, the output last; `views`: the
    reads also bound as vec4 arrays, Generated.views)."""
    buffers = [Buffer(i, buffer_bytes(n, dtype), "input" if i < len(operands) - 1 else "output",
                      dtype) for i, (n, dtype) in enumerate(operands)]
    o = len(buffers) - 1
    kernel = Kernel(name, source, list(range(o)) + list(views) + [o], tuple(grid), key=key,
                    knobs=knobs or {}, workgroup_bytes=workgroup_bytes, trusted=trusted)
    specs = [TensorSpec(i, (max(1, n),), default_torch_name(dtype))
             for i, (n, dtype) in enumerate(operands)]
    return Plan(buffers=buffers, kernels=[kernel], inputs=specs[:-1], outputs=specs[-1:],
                output_tree="single")


def time_ms(exe: Executable, arrays: list[np.ndarray], settings: TuneSettings) -> float:
    """The median GPU time of `reps` calls on one input set, after `warmup` calls. The
    warm-up calls are dispatches, like the timed ones: a full run would also read the
    output back (seconds for a 2 GB output, per call)."""
    if settings.warmup:
        exe.gpu_times_ms([arrays], settings.warmup)
    return statistics.median(exe.gpu_times_ms([arrays], max(1, settings.reps)))


def _first_lines(exc: Exception, n: int = 6) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return "\n".join(text.splitlines()[:n])
