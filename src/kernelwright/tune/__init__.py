"""The autotuner: the fastest correct knobs of each kernel, found once per device.

Every template has knobs (tile sizes, workgroup size, elements per invocation, ...)
with heuristic defaults and a small, shape-keyed search space (kernels/). The
tuner takes one kernel as the compiler is about to generate it (a
`kernels.KernelRequest`: its key, the kernel with default knobs, its space),
generates the kernel for every setting of the space, runs each alone on fresh random
inputs and checks every element against the default kernel's output (fp32: within
1e-4 of the output's scale); a candidate that does not compile or does not match is
discarded and recorded. The survivors are timed with GPU timestamps (median of many
runs) and the fastest is kept. Correctness comes first: no timing ever makes a
wrong kernel win.

Winners are stored in SQLite (cache.py), keyed by the device's description and the
kernel's key: its template, its operand shapes (the shape bucket, which for now is
the exact shape) and a digest of its generated loader and epilogue functions, so a
kernel with other fused ops is another key. Every compile asks `choose_knobs`
(choose.py, compile()'s default chooser, passed down in CompileOptions.choose) for
each kernel's knobs: the cache's answer for this device when it has one, else the
heuristic defaults; a compile given a tuning session's chooser (`TuningSession.choose`,
what ``kernelwright tune`` runs) tunes the kernels the cache lacks.
KERNELWRIGHT_TUNE=off turns the cache off; KERNELWRIGHT_TUNE=on tunes missing kernels
in any compile; KERNELWRIGHT_TUNE_DB moves the database.

Modules: cache.py (the SQLite store), tuner.py (one kernel: candidates, checks,
timing), choose.py (the default chooser and tuning sessions), command.py
(``kernelwright tune``), waves.py (the device's waves, measured once and kept in the
cache: which tiles and K chunks large products take; it builds a plan to measure them,
so it is imported as tune.waves, not from this package, which schedule imports).
"""

from .cache import KernelWinner, TuneCache, Winner, db_path, default_cache
from .choose import TuningSession, choose_knobs, compiler_choice, tune_mode
from .tuner import Candidate, KernelResult, TuneSettings, tune_kernel

__all__ = ["Candidate", "KernelResult", "KernelWinner", "TuneCache", "TuneSettings",
           "TuningSession", "Winner", "choose_knobs", "compiler_choice", "db_path",
           "default_cache", "tune_kernel", "tune_mode"]
