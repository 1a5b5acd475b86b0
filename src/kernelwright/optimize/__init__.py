"""kernelwright optimize: per-kernel search for faster kernels, verified and cached.

API (used by the CLI and by tests):

    from kernelwright.optimize import Budget, Settings, optimize_problem
    report = optimize_problem(path, generators=[gen_or_name, ...], attempts=K, out=DIR,
                              budget=Budget(problem_s=..., run_tokens=..., ...),
                              settings=Settings(...), resume=False)
    -> ProblemReport: per searched kernel a KernelReport (status, generator, baseline_ms,
       best_ms, gain, pass_at, diff()), the harness's results before/after the swap
       (speedup_before, speedup_after against PyTorch eager), the module's GPU time
       before and after timed interleaved (module_ms) and their ratio (gain), winners
       stored

``generators`` are objects following optimize.generator.Generator, or names looked up
through optimize.generators.make ("builtin", "openai:MODEL", "anthropic:MODEL"). Every
candidate is compiled, verified and timed in a sandboxed subprocess (sandbox.py); the
plan with the winners swapped in is verified against PyTorch in a bench worker
subprocess (modulecheck.py); winners are stored in the tuner's SQLite cache (table
`kernels`), which every later compile consults through tune.choose_knobs.

Modules: generator.py (the interface and registry), spec.py (kernel specs from a
compiled plan), builtin.py (the template knob search), sandbox.py (the candidate
worker process), search.py (the loop, budgets, reports), store.py (OUT/optimize.sqlite,
resume), modulecheck.py (whole-module verification), command.py (the CLI), llm.py
(language-model generators).
"""

from kernelwright.optimize.generator import Attempt, Binding, Candidate, Generator, KernelSpec
from kernelwright.optimize.search import (
    Budget,
    KernelReport,
    ProblemReport,
    Settings,
    optimize_problem,
    pass_at_k,
)

__all__ = ["Attempt", "Binding", "Budget", "Candidate", "Generator", "KernelReport",
           "KernelSpec", "ProblemReport", "Settings", "optimize_problem", "pass_at_k"]
