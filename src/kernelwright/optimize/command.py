"""``kernelwright optimize``: search faster kernels for a problem or a suite; report.

``kernelwright optimize PROBLEM|SUITE`` runs optimize.search on every problem chosen
(one after another, one sandbox worker for the run), prints a progress line per
attempt to stderr and, at the end, the report to stdout; OUT/optimize.sqlite holds the
state after every attempt (``--resume`` goes on from it) and OUT/summary.json the
reports. ``kernelwright optimize --report [DIR]`` prints the report of a run again:
per problem the module's speedup against PyTorch eager before and after, and per
searched kernel the generator that won, the measured gain, pass@k and the unified diff
of the WGSL.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

DEFAULT_OUT = Path("out/optimize")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "optimize", help="search faster verified kernels for a problem or a suite",
        description="Compile each problem, profile it, search faster versions of its hot "
                    "kernels with the generators (every candidate verified in a sandboxed "
                    "subprocess, the whole module again against PyTorch), store the winners "
                    "in the tuning cache and report the speedup against PyTorch eager before "
                    "and after.")
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
                        help="wall time per problem (default: no limit)")
    parser.add_argument("--run-budget", type=float, metavar="SECONDS",
                        help="wall time for the whole run (default: no limit)")
    parser.add_argument("--max-tokens", type=int, help="model tokens for the whole run")
    parser.add_argument("--max-cost", type=float, metavar="USD", help="model cost for the run")
    parser.add_argument("--problem-tokens", type=int, help="model tokens per problem")
    parser.add_argument("--problem-cost", type=float, metavar="USD", help="model cost per problem")
    parser.add_argument("--max-kernels", type=int, default=4,
                        help="kernels searched per problem, the slowest first (default: 4)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"state, logs and plans (default: {DEFAULT_OUT})")
    parser.add_argument("--resume", action="store_true",
                        help="go on from OUT/optimize.sqlite: finished problems are skipped, "
                             "a kernel's earlier attempts and best kernel are kept")
    parser.add_argument("--size", choices=("small", "full"),
                        help="problem sizes for files that define SIZES; default: small on a "
                             "software GPU driver, else full")
    parser.add_argument("--only", metavar="PATTERN", action="append",
                        help="only problems whose name matches this glob, or contains it "
                        "(repeatable: any of them)")
    parser.add_argument("--level", type=int, action="append", help="only this level (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and inputs")
    parser.add_argument("--report", nargs="?", const="", metavar="DIR",
                        help="print the report of the run in DIR (default: OUT) and exit")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from .. import runtime
    from ..bench import problems
    from ..bench.command import bundled_suite, select
    from .generator import make
    from .search import Budget, ProblemReport, Search, Settings

    if args.report is not None:
        out = Path(args.report) if args.report else args.out
        if not (out / "optimize.sqlite").exists():
            print(f"kernelwright optimize: no run in {out}", file=sys.stderr)
            return 2
        from .store import RunState

        state = RunState(out)
        reports = [ProblemReport.from_dict(r) for r in state.reports() if "kernels" in r]
        state.close()
        print(render(reports, diffs=True))
        return 0

    target = args.target or bundled_suite()
    if args.llm_config is not None:  # read by optimize/llm.py when a model is made
        from .llm import CONFIG_ENV

        os.environ[CONFIG_ENV] = str(args.llm_config.expanduser().resolve())
    try:
        chosen = select(problems.discover(target), args.only, args.level)
        generators = [make(name.strip()) for name in args.generators.split(",") if name.strip()]
    except (FileNotFoundError, ValueError) as exc:
        print(f"kernelwright optimize: {exc}", file=sys.stderr)
        return 2
    if not chosen:
        print(f"kernelwright optimize: no problems in {target} match", file=sys.stderr)
        return 2
    device = runtime.default_device()
    size = args.size or ("small" if device.is_software else "full")
    budget = Budget(args.budget, args.run_budget, args.problem_tokens, args.max_tokens,
                    args.problem_cost, args.max_cost)
    settings = Settings(max_kernels=args.max_kernels, size=size, seed=args.seed)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    print(f"kernelwright optimize: {len(chosen)} problems from {target}, size {size}, device "
          f"{device.description}, generators {', '.join(g.name for g in generators)}, "
          f"{args.attempts} attempts each per kernel, out {args.out}", file=sys.stderr)
    reports: list[ProblemReport] = []
    interrupted = False
    with Search(generators, args.attempts, args.out, budget, settings, args.resume,
                progress=progress) as search:
        try:
            for i, problem in enumerate(chosen, 1):
                stop = search.spent()
                if stop:
                    progress(f"budget spent ({stop}): {len(chosen) - i + 1} problems not run")
                    break
                progress(f"[{i}/{len(chosen)}] {problem.name}")
                reports.append(search.run_problem(problem))
        except KeyboardInterrupt:
            interrupted = True
    (args.out / "summary.json").write_text(json.dumps(
        {"device": device.description, "size": size, "generators": [g.name for g in generators],
         "attempts": args.attempts, **totals(reports),
         "problems": [r.to_dict() for r in reports]}, indent=1, default=str))
    print(render(reports, diffs=False))
    if interrupted:
        print("interrupted; what was found is kept: run again with --resume", file=sys.stderr)
        return 130
    return 0


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def totals(reports) -> dict:
    """Geometric-mean speedups against eager over problems correct before and after."""
    from .search import pass_at_k

    both = [r for r in reports if r.speedup_before and r.speedup_after]
    kernels = [k for r in reports for k in r.kernels]
    k_max = max((n for k in kernels for n in k.tries.values()), default=0)
    return {
        "problems": len(reports),
        "compared": len(both),
        "geomean_before": geomean([r.speedup_before for r in both]),
        "geomean_after": geomean([r.speedup_after for r in both]),
        "kernels_searched": len(kernels),
        "kernels_improved": sum(k.status == "improved" for k in kernels),
        "pass_at_1": pass_at_k(kernels, 1),
        f"pass_at_{k_max}": pass_at_k(kernels, k_max) if k_max else None,
    }


def render(reports, diffs: bool) -> str:
    """The report: per problem its figures and searched kernels, then the totals."""
    from .search import summary_line

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
    return "\n".join(lines)
