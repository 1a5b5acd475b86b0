"""The tolerance rule: when an output matches the expected one, element by element.

A finite expected element w matches got g when |g - w| <= atol + rtol * |w|; a
non-finite one when g is the same infinity, or both are NaN. `Tolerance` gives the
harness's (atol, rtol) by dtype (PyTorch reference against the candidate). A kernel
checked against the default kernel (the tuner, the optimize sandbox, gpucheck on the
GPU) has no float64 reference to fall back on: its atol is KERNEL_ATOL scaled by the
output's largest finite magnitude (at least 1), its rtol 0 (`kernel_atol`, `compare`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

KERNEL_ATOL = 1e-4  # fp32, relative to the scale of the output (KernelBench's 1e-4)
COMPARE_CHUNK = 1 << 22  # elements compared at a time (a 2 GB output's temporaries)


HALF = (torch.float16, torch.bfloat16)
HALF_TOLERANCE = 1e-2  # KernelBench's atol = rtol for fp16/bf16


@dataclass(frozen=True)
class Tolerance:
    """atol = rtol by dtype: fp32 1e-4 (strict) or 1e-2 (loose, and accelerated: the fp16
    tolerance for kernels whose matmuls round their operands to f16); fp16/bf16 1e-2. A
    run in a half `dtype` (``bench --dtype``) gives every float output the fp16/bf16
    tolerance, as KernelBench picks it by the run's precision: a float32 output of a
    model computed in bf16 carries bf16's error."""

    loose: bool = False
    accelerated: bool = False
    dtype: torch.dtype | None = None  # the dtype the problem runs in; None: its own

    @property
    def label(self) -> str:
        if self.accelerated:
            return "accelerated-f16"
        return "loose(1e-2)" if self.loose else "strict"

    def for_dtype(self, dtype: torch.dtype) -> tuple[float, float]:
        if dtype in HALF:
            return HALF_TOLERANCE, HALF_TOLERANCE
        if (dtype.is_floating_point or dtype.is_complex) and self.dtype in HALF:
            return HALF_TOLERANCE, HALF_TOLERANCE
        if dtype.is_floating_point or dtype.is_complex:
            return (1e-2, 1e-2) if self.loose or self.accelerated else (1e-4, 1e-4)
        return 0.0, 0.0


def kernel_atol(peak: float, atol: float = KERNEL_ATOL) -> float:
    """A kernel's atol against the default kernel: `atol` x max(1, the output's largest
    finite magnitude `peak`)."""
    return atol * max(1.0, peak)


def outside(got, want, atol: float, rtol: float = 0.0):
    """Per element (numpy arrays or torch tensors alike): True where `got` does not match
    `want` by the rule above."""
    xp = np if isinstance(want, np.ndarray) else torch
    if xp is np:
        atol, rtol = want.dtype.type(atol), want.dtype.type(rtol)
    with np.errstate(invalid="ignore", over="ignore"):
        bound = atol + rtol * abs(want) if rtol else atol
        near = abs(got - want) <= bound
        same = (want == got) | (xp.isnan(want) & xp.isnan(got))
        return ~xp.where(xp.isfinite(want), near, same)


def all_within(cc: torch.Tensor, rr: torch.Tensor, atol: float,
               rtol: float) -> tuple[float, float, float] | None:
    """(max |c - r|, max |r|, max |c|) of a chunk whose reference values are all finite
    and whose candidate values are all within ``atol + rtol * |r|`` of them (so finite:
    NaN compares false); None otherwise (then `outside` tells which elements are not)."""
    r_lo, r_hi = (float(v) for v in torch.aminmax(rr))  # NaN if any value is NaN
    if not (math.isfinite(r_lo) and math.isfinite(r_hi)):
        return None
    err = (cc - rr).abs_()
    if not bool((err <= rr.abs().mul_(rtol).add_(atol)).all()):
        return None
    c_lo, c_hi = (float(v) for v in torch.aminmax(cc))
    return float(err.max()), max(abs(r_lo), abs(r_hi)), max(abs(c_lo), abs(c_hi))


@dataclass
class Mismatch:
    """How an output differs from the expected one, element by element."""

    count: int  # elements outside the tolerance
    size: int
    first: list[tuple[int, float, float]]  # (index, got, want) of the first few
    max_abs_err: float  # over the finite expected elements
    scale: float  # max |want| (at least 1): the tolerance is kernel_atol(scale)
    rel_l2: float  # ||got - want|| / ||want|| over the finite expected elements
    unwritten: int  # NaN where a finite value was expected (poison left in place)

    def describe(self) -> str:
        firsts = "; ".join(f"[{i}] {g:.6g} for {w:.6g}" for i, g, w in self.first)
        text = (f"{self.count} of {self.size} elements differ, the first at {firsts}; "
                f"max |err| {self.max_abs_err:.3g} (tolerance {kernel_atol(self.scale):.3g}), "
                f"relative L2 error {self.rel_l2:.3g}")
        if self.unwritten:
            text += f"; {self.unwritten} elements NaN where a finite value was expected"
        return text


def compare(want: np.ndarray, got: np.ndarray, dtype: str, show: int = 5) -> Mismatch | None:
    """A kernel's output against the default kernel's: None when every element matches
    (fp32: `outside` with atol `kernel_atol` of the whole output, rtol 0; integers
    exactly), else how they differ."""
    want, got = want.reshape(-1), got.reshape(-1)
    if dtype == "f32":
        # The pass/fail test runs in float32 (the outputs' own type, 4x faster than
        # float64 on 16M elements): |g - w| is then off by at most an ulp of max(|g|, |w|),
        # ~1e-7 of the scale against a tolerance of 1e-4 of it. It goes by chunks, so that
        # its temporaries stay small next to a 2 GB output.
        w32, g32 = want.astype(np.float32, copy=False), got.astype(np.float32, copy=False)
        peak = max((finite_abs_max(w32[i:i + COMPARE_CHUNK])
                    for i in range(0, w32.size, COMPARE_CHUNK)), default=0.0)
        atol = kernel_atol(peak)
        bad = np.empty(w32.size, dtype=bool)
        for i in range(0, w32.size, COMPARE_CHUNK):
            bad[i:i + COMPARE_CHUNK] = outside(g32[i:i + COMPARE_CHUNK],
                                               w32[i:i + COMPARE_CHUNK], atol)
    else:
        bad = want != got
    if not bad.any():
        return None
    w, g = want.astype(np.float64), got.astype(np.float64)  # a mismatch's figures
    finite = np.isfinite(w)
    scale = max(1.0, float(np.abs(w[finite]).max())) if finite.any() else 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(g[finite] - w[finite])
        max_abs = float(np.nanmax(err)) if err.size and not np.isnan(err).all() else float("nan")
        if np.isnan(err).any():
            max_abs = float("nan")
        norm = float(np.linalg.norm(w[finite]))
        rel_l2 = float(np.linalg.norm(g[finite] - w[finite])) / norm if norm else float("inf")
    idx = np.flatnonzero(bad)[:show]
    first = [(int(i), float(got[i]), float(want[i])) for i in idx]
    unwritten = int((finite & np.isnan(g)).sum())
    return Mismatch(int(bad.sum()), bad.size, first, max_abs, scale, rel_l2, unwritten)


def finite_abs_max(w: np.ndarray) -> float:
    """The largest finite |w| (0 when none is finite)."""
    finite = np.isfinite(w)
    return float(np.abs(w[finite]).max()) if finite.any() else 0.0
