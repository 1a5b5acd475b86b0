"""``kernelwright optimize``: search faster kernels for a problem or a suite; report.

``kernelwright optimize PROBLEM|SUITE`` runs optimize.search on every problem chosen
(one after another, one sandbox worker for the run; with ``--jobs N``, N problems at
once, each in a process of its own running this command for one problem), prints a
progress line per attempt to stderr and, at the end, the report to stdout;
OUT/optimize.sqlite holds the state after every attempt (``--resume`` goes on from it)
and OUT/summary.json the reports. ``kernelwright optimize --report [DIR]`` prints the
report of a run again: per problem the module's gain (its GPU time with the compiler's
plan over its time with the winners, timed interleaved in one process) and its speedup
against PyTorch eager before and after (separate runs, labelled as such), and per
searched kernel the generator that won, the measured gain, pass@k and the unified diff
of the WGSL.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..cli.options import add_suite_options, bundled_suite, select
from ..harness import problems
from ..harness.gpulock import ENV as GPU_LOCK_ENV
from ..harness.runner import worker_env
from ..harness.timing import side_by_side_caveat
from ..runtime import runtime
from .generators import make
from .llm import CONFIG_ENV
from .search import Budget, ProblemReport, Search, Settings, Spend, pass_at_k, summary_line
from .store import RunState

DEFAULT_OUT = Path("out/optimize")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "optimize", help="search faster verified kernels for a problem or a suite",
        description="Compile each problem, profile it, search faster versions of its hot "
                    "kernels with the generators (every candidate verified in a sandboxed "
                    "subprocess, the whole module again against PyTorch), store the winners "
                    "in the tuning cache and report the module's gain (its GPU time before "
                    "and after, timed interleaved) and its speedup against PyTorch eager.")
    parser.add_argument("target", nargs="?", type=Path,
                        help="a problem file or a folder of KernelBench-format problems; "
                             "default: the bundled suite")
    parser.add_argument("--generators", default="builtin",
                        help="comma-separated generators run on every kernel, the fastest "
                             "correct candidate kept (ensemble): builtin, openai[:MODEL], "
                             "anthropic[:MODEL] (default: builtin)")
    parser.add_argument("--llm-config", type=Path, metavar="TOML",
                        help="the language models' settings (default: "
                             "$KERNELWRIGHT_LLM_CONFIG or ~/.config/kernelwright/llm.toml)")
    parser.add_argument("--attempts", type=int, default=8,
                        help="candidates per generator and kernel, at most (default: 8)")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="wall time of each problem's search, from its first attempt "
                             "(loading, profiling and the module checks not counted; "
                             "default: no limit)")
    parser.add_argument("--run-budget", type=float, metavar="SECONDS",
                        help="wall time for the whole run (default: no limit)")
    parser.add_argument("--max-tokens", type=int, help="model tokens for the whole run")
    parser.add_argument("--max-cost", type=float, metavar="USD", help="model cost for the run")
    parser.add_argument("--problem-tokens", type=int, help="model tokens per problem")
    parser.add_argument("--problem-cost", type=float, metavar="USD", help="model cost per problem")
    parser.add_argument("--max-kernels", type=int, default=4,
                        help="kernels searched per problem, the slowest first (default: 4)")
    parser.add_argument("--skip-unchanged", action="store_true",
                        help="measure the module before and after only for problems where a "
                             "kernel improved; the others keep the compiler's plan, and the "
                             "run's mean gain counts them as 1 (for runs over a whole suite)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"state, logs and plans (default: {DEFAULT_OUT})")
    parser.add_argument("--resume", action="store_true",
                        help="go on from OUT/optimize.sqlite: finished problems are skipped, "
                             "a kernel's earlier attempts and best kernel are kept")
    parser.add_argument("--redo", metavar="PATTERN", action="append",
                        help="with --resume, search the problems whose name matches this "
                             "glob, or contains it, again from the start, their earlier "
                             "state dropped (repeatable)")
    add_suite_options(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and inputs")
    parser.add_argument("--jobs", type=int, default=1,
                        help="problems searched at once, each in a process of its own; they "
                             "share the GPU through the bench harness's lock: verification "
                             "side by side, every timing alone (default: 1)")
    parser.add_argument("--problem-name", help=argparse.SUPPRESS)  # a --jobs child's problem
    parser.add_argument("--report", nargs="?", const="", metavar="DIR",
                        help="print the report of the run in DIR (default: OUT) and exit")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.report is not None:
        out = Path(args.report) if args.report else args.out
        if not (out / "optimize.sqlite").exists():
            print(f"kernelwright optimize: no run in {out}", file=sys.stderr)
            return 2
        print(render(finished_reports(out), diffs=True))
        return 0

    target = args.target or bundled_suite()
    if args.llm_config is not None:  # read by optimize/llm.py when a model is made

        os.environ[CONFIG_ENV] = str(args.llm_config.expanduser().resolve())
    try:
        chosen = select(problems.discover(target), args.only, args.level)
        if args.problem_name:
            chosen = [p for p in chosen if p.name == args.problem_name]
        generators = [make(name.strip()) for name in args.generators.split(",") if name.strip()]
    except (FileNotFoundError, ValueError) as exc:
        print(f"kernelwright optimize: {exc}", file=sys.stderr)
        return 2
    if not chosen:
        print(f"kernelwright optimize: no problems in {target} match", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("kernelwright optimize: --jobs must be at least 1", file=sys.stderr)
        return 2
    device = runtime.default_device()
    size = args.size or ("small" if device.is_software else "full")
    budget = Budget(args.budget, args.run_budget, args.problem_tokens, args.max_tokens,
                    args.problem_cost, args.max_cost)
    settings = Settings(max_kernels=args.max_kernels, size=size, seed=args.seed,
                        check_unchanged=not args.skip_unchanged)
    redo = {p.name for p in select(chosen, args.redo, None)} if args.redo else set()

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if not args.problem_name:
        print(f"kernelwright optimize: {len(chosen)} problems from {target}, size {size}, "
              f"device {device.description}, generators "
              f"{', '.join(g.name for g in generators)}, {args.attempts} attempts each per "
              f"kernel, {args.jobs} at once, out {args.out}", file=sys.stderr)
    if args.jobs > 1 and len(chosen) > 1:
        caveat = side_by_side_caveat()
        if caveat:
            progress(f"kernelwright optimize: warning: with --jobs {args.jobs} the speedups "
                     f"are not trustworthy here: {caveat} (run with --jobs 1 for figures)")
        reports, interrupted = run_parallel(args, target, chosen, size, budget, progress, redo)
        return finish(args, device.description, size, [g.name for g in generators], reports,
                      interrupted, caveat and f"--jobs {args.jobs}: {caveat}")
    reports: list[ProblemReport] = []
    interrupted = False
    with Search(generators, args.attempts, args.out, budget, settings, args.resume,
                progress=progress, redo=redo) as search:
        try:
            for i, problem in enumerate(chosen, 1):
                stop = search.spent()
                if stop:
                    progress(f"budget spent ({stop}): {len(chosen) - i + 1} problems not run")
                    break
                if not args.problem_name:
                    progress(f"[{i}/{len(chosen)}] {problem.name}")
                reports.append(search.run_problem(problem))
        except KeyboardInterrupt:
            interrupted = True
    if args.problem_name:  # a --jobs child: its parent reports
        return 130 if interrupted else 0
    return finish(args, device.description, size, [g.name for g in generators], reports,
                  interrupted)


def finish(args, device: str, size: str, generators: list[str], reports, interrupted: bool,
           caveat: str | None = None) -> int:
    """OUT/summary.json and the report on stdout. The report is this run's problems; the
    summary is every problem finished in OUT, by this run or by the earlier runs that it
    resumed (as `--report` shows them), so that a run spread over several calls has one
    figure; `this_run` names the problems this run finished."""
    everything = finished_reports(args.out) or reports
    (args.out / "summary.json").write_text(json.dumps(
        {"device": device, "size": size, "generators": generators,
         "attempts": args.attempts, **({"timing_caveat": caveat} if caveat else {}),
         **totals(everything), "this_run": [r.name for r in reports],
         "problems": [r.to_dict() for r in everything]},
        indent=1, default=str))
    print(render(reports, diffs=False))
    if interrupted:
        print("interrupted; what was found is kept: run again with --resume", file=sys.stderr)
        return 130
    return 0


def run_parallel(args, target: Path, chosen, size: str, budget, progress, redo: set[str]):
    """Run `chosen` with `args.jobs` problems at once, each in a child process running
    this command for one problem (`--problem-name`) with the same settings and OUT.
    The children share OUT/optimize.sqlite and the tuning cache, and the GPU through the
    harness's lock (KERNELWRIGHT_GPU_LOCK, inherited by their sandboxes and module
    checks). Each child's progress lines are shown prefixed with its problem. The run's
    budgets are checked before each problem starts: its wall time, and its tokens and
    cost as the state records them for the problems started. Returns the reports of the
    problems that finished, in order, and whether the run was interrupted. With --resume,
    problems that OUT's state has finished (and that `redo` does not name) start no child."""
    args.out.mkdir(parents=True, exist_ok=True)
    env = worker_env()
    env.setdefault(GPU_LOCK_ENV, str((args.out / "gpu.lock").resolve()))
    base = [sys.executable, "-m", "kernelwright.cli", "optimize", str(target),
            "--out", str(args.out), "--size", size, "--seed", str(args.seed),
            "--generators", args.generators, "--attempts", str(args.attempts),
            "--max-kernels", str(args.max_kernels)]
    for flag, value in (("--budget", args.budget), ("--problem-tokens", args.problem_tokens),
                        ("--problem-cost", args.problem_cost),
                        ("--llm-config", args.llm_config)):
        if value is not None:
            base += [flag, str(value)]
    if args.resume:
        base.append("--resume")
    for pattern in args.redo or ():
        base += ["--redo", pattern]
    if args.skip_unchanged:
        base.append("--skip-unchanged")
    queue = list(chosen)
    if args.resume:  # finished problems are skipped here, not in a child that imports torch
        state = RunState(args.out)
        done = {p.name for p in queue if p.name not in redo and state.report(p.name)}
        state.close()
        queue = [p for p in queue if p.name not in done]
        if done:
            progress(f"{len(done)} problems done in an earlier run")
    started, launched = time.monotonic(), []
    running: dict[subprocess.Popen, threading.Thread] = {}
    failed: list[str] = []
    interrupted = False

    def forward(proc: subprocess.Popen, name: str) -> None:
        for line in proc.stderr:
            progress(f"[{name}] {line.rstrip()}")

    def run_spent() -> str | None:
        if budget.run_s is not None and time.monotonic() - started >= budget.run_s:
            return "time per run"
        if budget.run_tokens is None and budget.run_cost_usd is None:
            return None
        tokens, cost = run_usage(args.out, [p.name for p in launched])
        if budget.run_tokens is not None and tokens >= budget.run_tokens:
            return "tokens per run"
        if budget.run_cost_usd is not None and cost >= budget.run_cost_usd:
            return "cost per run"
        return None

    try:
        while queue or running:
            for proc, reader in list(running.items()):
                if proc.poll() is not None:
                    reader.join()
                    del running[proc]
                    if proc.returncode not in (0, 130):
                        failed.append(proc.args[-1])
                        progress(f"[{proc.args[-1]}] the worker exited with code "
                                 f"{proc.returncode}")
            while queue and len(running) < args.jobs:
                stop = run_spent()
                if stop:
                    progress(f"budget spent ({stop}): {len(queue)} problems not run")
                    queue.clear()
                    break
                problem = queue.pop(0)
                launched.append(problem)
                progress(f"[{len(launched)}/{len(queue) + len(launched)}] {problem.name}")
                # a session of its own: a Ctrl-C reaches the children once, from here
                proc = subprocess.Popen(base + ["--problem-name", problem.name], env=env,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True,
                                        start_new_session=True)
                reader = threading.Thread(target=forward, args=(proc, problem.name),
                                          daemon=True)
                reader.start()
                running[proc] = reader
            time.sleep(0.2)
    except KeyboardInterrupt:
        interrupted = True
        for proc in running:  # each child writes its state and stops
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc, reader in running.items():
            proc.wait()
            reader.join()
    state = RunState(args.out)
    reports = [ProblemReport.from_dict(r) for r in map(state.report, (p.name for p in launched))
               if r is not None]
    state.close()
    return reports, interrupted


def run_usage(out: Path, problems: list[str]) -> tuple[int, float]:
    """Tokens and cost of every attempt the state holds for `problems`."""
    state, spend = RunState(out), Spend()
    for name in problems:
        for row in state.db.execute("SELECT usage FROM attempts WHERE problem = ?", (name,)):
            spend.add(json.loads(row["usage"] or "{}"))
    state.close()
    return spend.tokens, spend.cost_usd


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def finished_reports(out: Path) -> list:
    """The reports of every problem finished in OUT's state, in the order they started."""
    state = RunState(out)
    try:
        return [ProblemReport.from_dict(r) for r in state.reports() if "kernels" in r]
    finally:
        state.close()


def totals(reports) -> dict:
    """Geometric-mean speedups against eager over problems correct before and after, and
    the geometric-mean module gain (`ProblemReport.gain`)."""
    both = [r for r in reports if r.speedup_before and r.speedup_after]
    gains = [r.gain for r in reports if r.gain]
    kernels = [k for r in reports for k in r.kernels]
    k_max = max((n for k in kernels for n in k.tries.values()), default=0)
    return {
        "problems": len(reports),
        "compared": len(both),
        "geomean_before": geomean([r.speedup_before for r in both]),
        "geomean_after": geomean([r.speedup_after for r in both]),
        # the module's GPU time before / after, timed interleaved, over every problem
        # without an error: measured where a winner was swapped in, 1 for a problem that
        # kept the compiler's plan
        "gain_problems": len(gains),
        "unchanged_not_measured": sum(r.unmeasured for r in reports),
        "geomean_gain": geomean(gains),
        "kernels_searched": len(kernels),
        "kernels_improved": sum(k.status == "improved" for k in kernels),
        "pass_at_1": pass_at_k(kernels, 1),
        f"pass_at_{k_max}": pass_at_k(kernels, k_max) if k_max else None,
    }


def render(reports, diffs: bool) -> str:
    """The report: per problem its figures and searched kernels, then the totals."""
    lines = []
    for r in reports:
        lines.append(f"{r.name}: {summary_line(r)}")
        for k in r.kernels:
            passes = ", ".join(f"{g}: pass@{r_ if r_ else '-'} of {k.tries.get(g, 0)}"
                               for g, r_ in k.pass_at.items())
            statuses = ", ".join(f"{n} {s}" for s, n in k.statuses.items())
            head = f"  {k.name} ({k.kind}, {k.share:.0%} of GPU time): {k.status}"
            if k.gain:
                head += (f" by {k.generator}, {k.baseline_ms:.4g} -> {k.best_ms:.4g} ms "
                         f"({k.gain:.2f}x)")
                if k.knobs:  # a rewrite's knobs name it: rewrite=implicit_gemm ...
                    head += " with " + " ".join(f"{n}={v}" for n, v in k.knobs.items())
            lines.append(head)
            lines.append(f"    {k.attempts} attempts ({statuses or 'none'}); {passes or '-'}"
                         + (f"; {k.note}" if k.note else ""))
            if diffs and k.source:
                lines.extend("    " + d for d in k.diff().splitlines())
    t = totals(reports)
    lines.append("")
    gb, ga = t["geomean_before"], t["geomean_after"]
    lines.append(f"{t['problems']} problems; {t['kernels_improved']} of {t['kernels_searched']} "
                 f"searched kernels improved; geometric-mean speedup against PyTorch eager "
                 f"over {t['compared']} problems: "
                 + (f"{gb:.3g}x before, {ga:.3g}x after" if gb and ga else "-"))
    if t["geomean_gain"]:
        lines.append(f"geometric-mean module gain (GPU time before / after, timed "
                     f"interleaved) over {t['gain_problems']} problems: "
                     f"{t['geomean_gain']:.4g}x ({t['unchanged_not_measured']} kept the "
                     "compiler's plan and were not measured again: 1 each)")
    return "\n".join(lines)
