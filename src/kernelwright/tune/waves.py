"""A device's waves: how many workgroups of each large-product tile setting it runs at
once (kernels.Waves), measured once per device and kept in the tune cache.

WebGPU does not say how many SMs (compute units) a device has, nor how many workgroups
of a kernel fit in one, and a large product's choice of tiles and K chunks depends on
it (kernels.matmul_wave_cost). So it is measured: the product of one tile row and
PROBE_MAX_TILES tile columns (K = PROBE_K, operands left at zero) is built once per tile
setting, and its first T workgroups alone are timed (GPU timestamps) for T = 4, 8, ...:
with S slots the time stays flat while T <= S and steps up by a wave at every multiple
of S. The steps are the rises of more than half the largest rise; every one of them
must fall at a multiple of the first, at least two must be seen, and the first is then
found to the workgroup. A staircase that is not this clean measures nothing (None:
the fixed rules of kernels.matmul_tiles).

Measured on the H200 (2026-12-02e, bench/results/wave_probe_k4096_h200_2026-12-02e.json,
K 4096): the wide tiles step after 264, 528 and 792 workgroups (rises of 0.59 ms;
smaller ones of 0.18 ms after 132, where each SM starts its second), the plain ones
after every 132 (0.17-0.24 ms); this probe (wave_probe_h200_2026-12-02e.json, K 1024)
finds 264 and 132.

`device_waves(device)` is what plan_module asks: KERNELWRIGHT_WAVES ("off", or the two
slot counts "WIDE,PLAIN") decides first; the software driver and devices without
timestamps have none; else the tune cache's record for the device (unless
KERNELWRIGHT_TUNE=off), else a measurement (1.5-2.0 s on the H200 in three fresh
processes, its two pipelines' compiles included: h200_session_2026-12-02e.log, call 4;
once per process without a cache), stored there -- a failed one too, so that it is not
repeated.
"""

from __future__ import annotations

import os
import statistics
import sys
from dataclasses import asdict

from ..ir.ir import GraphBuilder
from ..kernels import MATMUL_LARGE_TILES, MATMUL_PLAIN_TILES, matmul_knobs
from ..options import CompileOptions, Waves
from ..runtime import runtime
from ..runtime.runtime import Executable
from ..schedule.schedule import build_plan
from .cache import default_cache
from .choose import tune_mode

WAVES_ENV = "KERNELWRIGHT_WAVES"
FACT = "waves"
PROBE_K = 1024
PROBE_STEP = 4
PROBE_MAX_TILES = 640
PROBE_MAX_BYTES = 1 << 29  # the B operand's, at most (fewer tiles where it would exceed)
PROBE_REPS = 5
STEP_SHARE = 0.5  # a step: a rise of more than this share of the largest rise
_MEMO: dict[str, Waves | None] = {}


def device_waves(device=None) -> Waves | None:
    """The waves of `device` (None: the default device), or None where unknown."""
    env = os.environ.get(WAVES_ENV, "").strip().lower()
    if env == "off":
        return None
    if env:
        try:
            wide, plain = (int(x) for x in env.split(","))
            return Waves(wide, plain)
        except ValueError:
            raise ValueError(f"{WAVES_ENV}={env!r}: expected 'off' or two slot counts "
                             "'WIDE,PLAIN' (e.g. 264,132)") from None
    try:
        device = device or runtime.default_device()
    except Exception:  # noqa: BLE001 - no adapter: nothing to measure
        return None
    if device.is_software or not device.has_timestamps:
        return None
    desc = device.description
    if desc not in _MEMO:
        _MEMO[desc] = None
        cache = default_cache() if tune_mode() != "off" else None
        stored = cache.lookup_fact(desc, FACT) if cache is not None else None
        if stored is None:
            kept = "once; kept in the tune cache" if cache is not None else "tuning off: not kept"
            print(f"kernelwright: measuring the waves of {desc} ({kept})", file=sys.stderr,
                  flush=True)
            try:
                facts = measure_waves(device)
            except Exception as exc:  # noqa: BLE001 - a device that cannot run the probe
                print(f"kernelwright: the wave probe failed ({type(exc).__name__}: {exc}); "
                      "large products keep their fixed tiles", file=sys.stderr, flush=True)
                facts = None
            if cache is not None:
                cache.store_fact(desc, FACT, asdict(facts) if facts else {})
        else:
            try:
                facts = Waves(**stored) if stored else None
            except (TypeError, ValueError):  # a record this version cannot read: ignored
                facts = None
        _MEMO[desc] = facts
    return _MEMO[desc]


def measure_waves(device) -> Waves | None:
    """Both tile settings' slots on `device`, or None where either staircase is unclear."""
    slots = [probe_slots(device, tiles) for tiles in (MATMUL_LARGE_TILES, MATMUL_PLAIN_TILES)]
    return None if None in slots else Waves(*slots)


def probe_slots(device, tiles) -> int | None:
    """The slots of the default large-product knobs on `tiles` (kernels.matmul_knobs)."""
    time_tiles, most = probe(device, tiles)
    counts = list(range(PROBE_STEP, most + 1, PROBE_STEP))
    if len(counts) < 8:  # the device cannot bind enough tiles to show a staircase
        return None
    time_tiles(most)  # warm up
    first = staircase_first_step(counts, [time_tiles(t) for t in counts])
    if first is None:
        return None
    fine = list(range(first, first + PROBE_STEP + 1))
    return staircase_first_step(fine, [time_tiles(t) for t in fine], rise=None)


def probe(device, tiles, knobs: dict | None = None):
    """(time_tiles, most): the probe product on `tiles` (with `knobs` over their default
    knobs) built for `most` tile columns, and a function giving the median GPU ms of its
    first T workgroups."""
    # no waves: the fixed rules, the wide tiles where `wide`
    knobs = {**matmul_knobs(4096, 4096, wide=tuple(tiles) == MATMUL_LARGE_TILES),
             **(knobs or {})}
    limits = device.limits
    limit = min(PROBE_MAX_BYTES, limits.get("max-storage-buffer-binding-size", PROBE_MAX_BYTES),
                limits.get("max-buffer-size", PROBE_MAX_BYTES))
    most = min(PROBE_MAX_TILES, limit // (4 * PROBE_K * knobs["BN"]))
    b = GraphBuilder()
    x = b.input((knobs["BM"], PROBE_K), "f32", "x")
    y = b.input((PROBE_K, knobs["BN"] * most), "f32", "y")
    out = b.matmul(x, y)
    b.graph.outputs.append(out)
    force = CompileOptions(choose=lambda r: {**r.default.knobs, **knobs}
                           if r.kind == "matmul" else None)
    plan = build_plan(b.graph, "single", {x: "float32", y: "float32", out: "float32"}, force)
    (kern,) = plan.kernels
    if tuple(kern.grid) != (most, 1, 1):
        raise RuntimeError(f"the wave probe planned {kern.grid}, not {most} workgroups")
    exe = Executable(plan, device)  # the operands stay zero: only the time counts
    pipe, group, _ = exe.steps[0]

    def time_tiles(count: int) -> float:
        exe.steps = [(pipe, group, (count, 1, 1))]
        return statistics.median(exe.gpu_times_ms([[]], PROBE_REPS))

    return time_tiles, most


def staircase_first_step(counts: list[int], times: list[float],
                         rise: float | None = STEP_SHARE) -> int | None:
    """The count after which the times first step up: with `rise`, the steps are the
    rises of more than `rise` times the largest, at least two and at most one in four
    counts, each at a multiple of the first (within the counts' spacing), else None;
    with rise None, the count before the largest rise (a step already found, located
    exactly)."""
    ups = [(t1 - t0, c) for c, t0, t1 in zip(counts, times, times[1:])]
    if rise is None:
        return max(ups)[1]
    top = max(d for d, _ in ups)
    steps = [c for d, c in ups if d > rise * top]
    spacing = counts[1] - counts[0]
    if not 2 <= len(steps) <= len(counts) // 4 or top <= 0:  # not a ramp: flat between
        return None
    if any(abs(c - (i + 1) * steps[0]) > (i + 1) * spacing for i, c in enumerate(steps)):
        return None
    return steps[0]
