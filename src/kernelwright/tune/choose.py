"""Which knobs each kernel gets: compile()'s default chooser, and tuning sessions.

`choose_knobs(request)` is the chooser compile() passes down (CompileOptions.choose)
unless its caller passes another (a tuning session's, a test forcing knobs), asked
once per kernel. In order:

1. KERNELWRIGHT_TUNE=off: None, the heuristic defaults, without opening the cache;
2. KERNELWRIGHT_TUNE=on: a session for the whole process tunes what the cache lacks;
3. otherwise (the default, "cache"): the cache's answer for this device, else None:
   a whole kernel found by ``kernelwright optimize`` for the request's spec key when
   there is one (returned as a `kernels.Generated`), else the tuned knobs for its
   key. Without a cache file this costs one stat. `compiler_choice` is the same
   without the optimized kernels (what kernelwright optimize starts from).

A winner is used only while the kernel it was measured against is the one the compiler
would make without it (`fresh`): tuned knobs while the template's default knobs are
those it beat, an optimized kernel while the knobs it beat are the ones chosen without
it. A winner of an earlier default is ignored (and, in a tuning session, tuned again):
it was never shown faster than the new default.

A `TuningSession`'s `choose`, passed to a compile, uses the cache's winners and
tunes each kernel whose key the cache lacks, stores the winner and uses it. A kernel
that fails to tune keeps its defaults; tuning never makes a compile fail.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable

from ..kernels import Generated, KernelRequest
from ..runtime import runtime
from .cache import TuneCache, Winner, default_cache
from .tuner import KernelResult, TuneSettings, tune_kernel

MODES = ("off", "cache", "on")
_PROCESS_SESSION: TuningSession | None = None


def tune_mode() -> str:
    """KERNELWRIGHT_TUNE: "off", "cache" (the default) or "on"."""
    mode = os.environ.get("KERNELWRIGHT_TUNE", "").strip().lower() or "cache"
    if mode not in MODES:
        warnings.warn(f"KERNELWRIGHT_TUNE={mode!r} is none of {MODES}; using 'cache'",
                      stacklevel=2)
        return "cache"
    return mode


def choose_knobs(request: KernelRequest) -> dict | Generated | None:
    """The knobs for one kernel (None: the template's defaults)."""
    mode = tune_mode()
    if mode == "off":
        return None
    cache = default_cache()
    if mode == "on":
        global _PROCESS_SESSION
        if _PROCESS_SESSION is None or _PROCESS_SESSION.cache is not cache:
            _PROCESS_SESSION = TuningSession(cache=cache)
        return _PROCESS_SESSION.choose(request)
    return cached_choice(request, cache, optimized=True)


def compiler_choice(request: KernelRequest) -> dict | None:
    """The compiler's own choice: tuned knobs from the cache (by KERNELWRIGHT_TUNE),
    never an optimized kernel."""
    if tune_mode() == "off":
        return None
    return cached_choice(request, default_cache(), optimized=False)


def cached_choice(request: KernelRequest, cache: TuneCache,
                  optimized: bool) -> dict | Generated | None:
    """The cache's answer for this device: an optimized kernel (when `optimized`), else
    the tuned knobs, else None; winners measured against other knobs are ignored."""
    if not cache.exists():
        return None
    device = _device_description()
    if device is None:
        return None
    default = request.default.knobs
    winner = cache.lookup(device, str(request.key))
    tuned = winner.knobs if winner and fresh(winner.default_knobs, default) else None
    if optimized:
        found = cache.lookup_kernel(device, request.spec_key)
        if found is not None and fresh(found.baseline_knobs, {**default, **(tuned or {})}):
            return dataclasses.replace(request.default, source=found.source,
                                       grid=tuple(found.grid), knobs=dict(found.knobs or {}),
                                       views=list(found.views), workgroup_bytes=0,
                                       trusted=found.trusted)
    return tuned


def fresh(beaten: dict | None, current: dict) -> bool:
    """Whether a winner that beat the kernel with knobs `beaten` was measured against
    `current`. Knobs added to a template after the winner was stored count as their
    defaults; a winner that did not record what it beat (None) is not fresh."""
    return beaten is not None and {**current, **beaten} == current


def _device_description() -> str | None:
    try:
        return runtime.default_device().description
    except Exception:  # noqa: BLE001 - no adapter: no tuned knobs either
        return None


class TuningSession:
    """Uses the cache's winners and tunes (then stores) the kernels it lacks. Each
    kernel's outcome is appended to `results` and passed to `report`."""

    def __init__(self, settings: TuneSettings | None = None, cache: TuneCache | None = None,
                 device=None, report: Callable[[KernelResult], None] | None = None) -> None:
        self.settings = settings or TuneSettings()
        self.cache = cache or default_cache()
        self.device = device or runtime.default_device()
        self.report = report
        self.results: list[KernelResult] = []

    def choose(self, request: KernelRequest) -> dict | None:
        key, desc = request.key, self.device.description
        default = request.default.knobs
        winner = self.cache.lookup(desc, str(key))
        if winner is not None and not fresh(winner.default_knobs, default):
            winner = None  # tuned against an earlier default: tune again
        if winner is not None:
            result = KernelResult(key, request.kind, "cached", default, winner.knobs,
                                  winner.default_ms, winner.best_ms)
        elif self.settings.out_of_time():
            result = KernelResult(key, request.kind, "skipped", default, default,
                                  note="budget spent")
        else:
            try:
                result = tune_kernel(request, self.device, self.settings)
            except Exception as exc:  # noqa: BLE001 - e.g. the default kernel failed to build
                result = KernelResult(key, request.kind, "failed", default, default,
                                      note=f"{type(exc).__name__}: {exc}".splitlines()[0])
            if result.status == "tuned":
                rejected = [{"knobs": c.knobs, "status": c.status, "error": c.error}
                            for c in result.rejected]
                self.cache.store(desc, request.key,
                                 Winner(result.knobs, default, result.default_ms,
                                        result.best_ms),
                                 len(result.candidates), rejected)
        self.results.append(result)
        if self.report is not None:
            self.report(result)
        return result.knobs if result.status in ("tuned", "cached") else None
