"""``kernelwright tune``: tune every kernel of a suite's problems and cache the winners.

For each problem of a KernelBench-format suite (loaded with harness.problems) it
compiles the model inside a tuning session (choose.tuning), which tunes each kernel
whose key the cache lacks and stores the winner; kernels already in the cache are
used as they are. The compiled plan, now with the tuned knobs, is then checked once
against PyTorch on the problem's inputs (atol = rtol = 1e-4); should it fail where
the heuristic plan passes, the problem's winners are removed from the cache again.

Progress goes to stderr, one line per problem and per kernel; the summary (kernels
tuned, and per kernel the gain: default ms / winner ms) to stdout. Problems run in
this process, one after another; ``--budget`` bounds the whole run's tuning time.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..cli.options import add_suite_options, bundled_suite, select
from ..compiler import CompiledModule, plan_module
from ..harness import problems
from ..harness.timing import keep_gpu_awake
from ..runtime import runtime
from .cache import TuneCache, default_cache
from .choose import TuningSession
from .tuner import KernelResult, TuneSettings, format_knobs, short_key


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tune", help="find the fastest correct knobs of every kernel of a suite",
        description="Compile every problem of SUITE, tune each of its kernels that the tuning "
                    "cache lacks (every candidate checked against the default kernel, the "
                    "survivors timed on the GPU) and store the winners.")
    parser.add_argument("suite", nargs="?", type=Path,
                        help="folder (or file) of KernelBench-format problems; default: the "
                             "bundled suite")
    add_suite_options(parser)
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="stop tuning after this many seconds (default: no limit); "
                             "kernels not reached keep their defaults and are tuned next time")
    parser.add_argument("--reps", type=int, default=TuneSettings.reps,
                        help=f"timed runs per candidate (default: {TuneSettings.reps})")
    parser.add_argument("--db", type=Path,
                        help="the tuning cache (default: KERNELWRIGHT_TUNE_DB or "
                             "~/.cache/kernelwright/tune.sqlite)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the problems' weights, "
                        "inputs and the tuner's random inputs (default: 0)")
    parser.set_defaults(handler=run)


@dataclass
class ProblemOutcome:
    name: str
    results: list[KernelResult] = field(default_factory=list)
    error: str | None = None  # the problem could not be loaded or compiled
    mismatch: str | None = None  # the tuned plan disagrees with PyTorch
    seconds: float = 0.0


def run(args: argparse.Namespace) -> int:
    suite = args.suite or bundled_suite()
    try:
        chosen = select(problems.discover(suite), args.only, args.level)
    except FileNotFoundError as exc:
        print(f"kernelwright tune: {exc}", file=sys.stderr)
        return 2
    if not chosen:
        print(f"kernelwright tune: no problems in {suite} match", file=sys.stderr)
        return 2
    device = runtime.default_device()
    keep_gpu_awake()  # the candidates' times: see harness/timing.py
    size = args.size or ("small" if device.is_software else "full")
    cache = TuneCache(args.db) if args.db else default_cache()
    deadline = time.monotonic() + args.budget if args.budget is not None else None
    settings = TuneSettings(reps=args.reps, seed=args.seed, deadline=deadline)
    budget = f"{args.budget:g} s" if args.budget is not None else "no limit"
    print(f"kernelwright tune: {len(chosen)} problems from {suite}, size {size}, device "
          f"{device.description}, cache {cache.path}, budget {budget}", file=sys.stderr)

    outcomes: list[ProblemOutcome] = []
    interrupted = False
    try:
        for i, problem in enumerate(chosen, 1):
            if settings.out_of_time():
                print(f"budget spent: {len(chosen) - i + 1} problems not tuned", file=sys.stderr)
                break
            print(f"[{i}/{len(chosen)}] {problem.name}", file=sys.stderr)
            outcome = tune_problem(problem, size, settings, cache, device)
            outcomes.append(outcome)
            print(f"[{i}/{len(chosen)}] {problem.name}: {problem_line(outcome)}", file=sys.stderr)
    except KeyboardInterrupt:
        interrupted = True
    print(summary(outcomes, device))
    if interrupted:
        print("interrupted; the winners found so far are stored", file=sys.stderr)
        return 130
    return 1 if any(o.mismatch for o in outcomes) else 0


def tune_problem(problem, size: str, settings: TuneSettings, cache, device) -> ProblemOutcome:
    """Compile one problem in a tuning session, then check the tuned plan against PyTorch."""
    start = time.perf_counter()
    outcome = ProblemOutcome(problem.name)

    def report(result: KernelResult) -> None:
        print(f"    {result.describe()}", file=sys.stderr)

    try:
        loaded = problems.load(problem, size)
        model = problems.call_user("reference", lambda: loaded.build_model(settings.seed))
        inputs = problems.call_user("reference", lambda: loaded.inputs(settings.seed))
        session = TuningSession(settings, cache, device, report)
        plan = plan_module(model, inputs, device=device, choose=session.choose)
        outcome.results = session.results
        outcome.mismatch = check_plan(plan, model, inputs, device)
        if outcome.mismatch:
            heuristic = plan_module(model, inputs, device=device, choose=lambda request: None)
            if check_plan(heuristic, model, inputs, device):
                outcome.mismatch = None  # the compiler's, not the tuner's: bench reports it
                outcome.error = "the compiled plan does not match PyTorch, with or without tuning"
            else:
                for r in outcome.results:
                    if r.status in ("tuned", "cached"):
                        cache.forget(device.description, r.key)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one problem's failure is reported, not fatal
        outcome.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    outcome.seconds = time.perf_counter() - start
    return outcome


def check_plan(plan, model, inputs, device) -> str | None:
    """None when the plan's outputs match the model's on `inputs`, else why not."""
    compiled = CompiledModule(plan, device)
    got = compiled(*inputs, poison=True)
    with torch.no_grad():
        want = model(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for i, (g, w) in enumerate(zip(got, want)):
        w = w.detach().cpu()
        if g.shape != w.shape or not torch.allclose(g.to(w.dtype), w, atol=1e-4, rtol=1e-4,
                                                    equal_nan=True):
            return f"output {i} differs from PyTorch"
    return None


def problem_line(outcome: ProblemOutcome) -> str:
    if outcome.error:
        return f"ERROR {outcome.error}"
    counts: dict[str, int] = {}
    for r in outcome.results:
        counts[r.status] = counts.get(r.status, 0) + 1
    parts = ", ".join(f"{n} {status}" for status, n in counts.items())
    check = f"MISMATCH after tuning ({outcome.mismatch}); its winners were removed" \
        if outcome.mismatch else "checked against PyTorch"
    return f"{len(outcome.results)} kernels ({parts or 'none'}), {check}, {outcome.seconds:.1f} s"


def summary(outcomes: list[ProblemOutcome], device) -> str:
    """The table of tuned kernels and the totals."""
    tuned = [(o.name, r) for o in outcomes for r in o.results if r.status == "tuned"]
    counts = {s: sum(r.status == s for o in outcomes for r in o.results)
              for s in ("tuned", "cached", "skipped", "failed")}
    rejected = sum(len(r.rejected) for _, r in tuned)
    lines = [f"kernelwright tune: {counts['tuned']} kernels tuned, {counts['cached']} already "
             f"cached, {counts['skipped']} skipped (budget), {counts['failed']} failed; "
             f"{rejected} candidates rejected; {len(outcomes)} problems, "
             f"{sum(bool(o.error) for o in outcomes)} with errors"]
    if tuned:
        lines.append("")
        lines.append(f"{'problem':<32} {'kernel':<56} {'default ms':>10} {'winner ms':>10} "
                     f"{'gain':>6}  knobs")
        for name, r in tuned:
            kernel = _clip(short_key(r.key), 56, tail=8)
            knobs = format_knobs(r.knobs) if r.knobs != r.default_knobs else "(default)"
            lines.append(f"{_clip(name, 32):<32} {kernel:<56} {r.default_ms:>10.4g} "
                         f"{r.best_ms:>10.4g} {r.gain:>5.2f}x  {knobs}")
        gains = [r.gain for _, r in tuned if r.gain]
        if gains:
            mean = math.exp(sum(math.log(g) for g in gains) / len(gains))
            lines.append(f"\ngeometric mean gain over {len(gains)} tuned kernels: {mean:.2f}x")
    for o in outcomes:
        if o.error or o.mismatch:
            lines.append(f"{o.name}: {o.error or 'MISMATCH after tuning: ' + o.mismatch}")
    if device.is_software:
        lines.append(f"(timings on a software driver, {device.description}, say nothing about "
                     "speed on a GPU)")
    return "\n".join(lines)


def _clip(text: str, width: int, tail: int = 0) -> str:
    """`text` in `width` characters, its last `tail` ones kept."""
    if len(text) <= width:
        return text
    return text[:width - 3 - tail] + "..." + text[len(text) - tail:]
