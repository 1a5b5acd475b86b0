"""kernelwright optimize: per-kernel search for faster kernels, verified and cached.

API (used by the CLI and by tests):

    from kernelwright.optimize import optimize_problem
    report = optimize_problem(path, generators=[gen, ...], attempts=K, out=DIR,
                              budget=Budget(seconds=..., tokens=..., cost_usd=...))
    -> ProblemReport   (per-kernel results, pass@k, module speedup before/after)

``generators`` are objects following optimize.generator.Generator (or names looked up
through optimize.generator.make).  Every candidate is compiled, verified and timed in a
sandboxed subprocess (optimize/sandbox.py); winners are re-verified at module level in a
subprocess and stored in the tuner's SQLite cache so a later compile uses them.
"""

from kernelwright.optimize.generator import Attempt, Binding, Candidate, Generator, KernelSpec

__all__ = ["Attempt", "Binding", "Candidate", "Generator", "KernelSpec"]
