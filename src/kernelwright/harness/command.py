"""``kernelwright bench``: run a suite, verify and time every problem, write the results.

It discovers the suite's problems (problems.py), runs each in a worker process
(runner.py), prints the summary table (metrics.py) and writes, under ``--out``:
``results.json`` (every problem, the summary, the device, precision mode and dtype),
``results.sqlite`` (filled as the run goes, used by ``--resume``), and
``report.html`` (report.py). cli/main.py registers this module's `add_parser`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..cli.options import add_suite_options, bundled_suite, select
from ..tune.waves import device_waves
from . import gpu, metrics, problems, report, runner, timing, training
from .problems import DTYPES, parse_override
from .timing import reference_label
from .worker import precision_label

DEFAULT_OUT = Path("out/bench")

# The bundled suite's quick sample, run by default where there is no hardware GPU (the
# whole suite takes about an hour on the software driver): one problem of each family at
# level 1, two fused ones at level 2, two models at level 3; a few minutes. `--all` runs
# every problem.
QUICK = (
    # matmul, elementwise, row softmax, convolution, pooling, movement (a permute), scan,
    # loss, attention, recurrent
    "level1/001_matmul_square", "level1/015_gelu", "level1/044_softmax_last_dim",
    "level1/051_conv2d_3x3", "level1/062_maxpool2d_3x3_stride2",
    "level1/065_permute_nchw_to_nhwc", "level1/086_cumsum", "level1/093_cross_entropy_loss",
    "level1/104_sdpa", "level1/107_gru_two_layer",
    # a convolution with batch norm and pooling fused; a gated feed-forward
    "level2/002_conv_bn_relu_maxpool", "level2/008_swiglu_ffn",
    # a small CNN; a GPT block (layer norm, causal attention, MLP)
    "level3/003_small_cnn", "level3/021_mingpt_block",
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench", help="verify and time a suite of KernelBench-format problems",
        description="Compile every problem of SUITE, verify it against PyTorch, time both, "
                    "and write a table, results.json, results.sqlite and report.html.")
    parser.add_argument("suite", nargs="?", type=Path,
                        help="folder (or file) of KernelBench-format problems, e.g. a KernelBench "
                             "checkout; default: the bundled suite")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"output folder (default: {DEFAULT_OUT})")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials (default: 5)")
    parser.add_argument("--compile-ref", action="store_true",
                        help="also time the reference under torch.compile")
    parser.add_argument("--loose", action="store_true",
                        help="fp32 tolerance 1e-2 instead of 1e-4, labelled loose(1e-2), for "
                             "comparison with older published numbers")
    parser.add_argument("--accelerated", action="store_true",
                        help="compile with precision='accelerated' (matmuls on the "
                             "matrix units: Dawn's subgroup matrices with "
                             "KERNELWRIGHT_RUNTIME=dawn; f16 operands) and verify with the "
                             "fp16 tolerance 1e-2, labelled accelerated-f16")
    parser.add_argument("--dtype", choices=list(DTYPES),
                        help="run every problem in this dtype: the reference model cast with "
                             ".to(dtype) and every floating-point input too (integer inputs "
                             "as they are), the candidate compiled from them, verified with "
                             "that dtype's tolerance (1e-2 for float16 and bfloat16) and timed "
                             "against PyTorch in the same dtype (default: the problem's own)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        type=override, metavar="NAME=VALUE",
                        help="set the problem module's global NAME to the Python literal "
                             "VALUE after SIZES is applied, e.g. --set batch_size=1 "
                             "(repeatable; a problem without that global fails to load)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse results in OUT/results.sqlite made with the same settings "
                             "(problems, or training workloads with --train)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds allowed per problem, or per training workload with "
                             "--train (default: 300)")
    parser.add_argument("--max-rss-gb", type=float, default=None,
                        help="resident memory allowed per problem or training workload "
                             "(default: 80%% of RAM)")
    parser.add_argument("--all", dest="sample", action="store_const", const="all",
                        help="every problem of the suite (the default with a hardware GPU, or "
                             "with a SUITE, --only or --level)")
    parser.add_argument("--quick", dest="sample", action="store_const", const="quick",
                        help=f"the bundled suite's quick sample of {len(QUICK)} problems, each "
                             "family at each level (the default on a software GPU driver or "
                             "without a GPU)")
    add_suite_options(parser)
    parser.add_argument("--candidate", default="kernelwright",
                        help="candidate factory: 'kernelwright' (default), 'module:function' or "
                             "'file.py:function', called as make(model, example_inputs)")
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="problems evaluated at once (default: 1); their compiles and "
                             "correctness trials overlap, their timed calls never do (a lock "
                             "shared by the workers keeps the GPU to one timer at a time)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (default: 0)")
    parser.add_argument("--no-alt-shape", action="store_true",
                        help="skip the trial at another leading dimension")
    parser.add_argument("--train", action="store_true",
                        help="judge training instead: each training workload (SUITE: a folder "
                             "of them; default: the bundled suite/training) compiled with "
                             "compile_training against PyTorch eager from the same weights and "
                             "data (harness/training.py), each in a worker process of its own; "
                             "--size, --only, --out, --seed, --timeout, --max-rss-gb, "
                             "--resume apply")
    parser.add_argument("--steps", type=int, default=None,
                        help="with --train: training steps compared (default: 20 on a software "
                             "driver, 200 on a hardware GPU)")
    parser.add_argument("--train-control", action=argparse.BooleanOptionalAction, default=True,
                        help="with --train: also train PyTorch's model in float64 over the same "
                             "steps and judge whether ours is as close to it as PyTorch fp32 "
                             "is, beside the 1e-3 gate (default: on; its wall time is recorded)")
    parser.set_defaults(handler=run)


def override(text: str) -> tuple[str, str]:
    """An argparse type: ``NAME=VALUE`` (problems.parse_override)."""
    try:
        return parse_override(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def default_sample(args: argparse.Namespace) -> tuple[str, str]:
    """"all" or "quick", and why: as asked; every problem where the run names its problems
    (a SUITE, --only, --level) or has a hardware GPU; else the quick sample."""
    if args.sample:
        return args.sample, "asked"
    if args.suite or args.only or args.level:
        return "all", "problems named"
    why = gpu.no_hardware_gpu()
    return ("quick", f"{why}; --all for every problem") if why else ("all", "hardware GPU")


def quick_sample(problems: list) -> list:
    """The problems of QUICK, in the suite's order."""
    names = set(QUICK)
    return [p for p in problems if p.name in names]


def run_info(args: argparse.Namespace, suite: Path, size: str, size_why: str,
             results: list[dict[str, Any]]) -> dict[str, Any]:
    devices = [r["device"] for r in results if r.get("device")]
    references = [r["reference"] for r in results if r.get("reference")]
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "suite": str(suite),
        "size": f"{size} ({size_why})",
        "device": devices[0] if devices else "unknown (no problem reached the device)",
        "precision": precision_label(args.loose, args.accelerated),
        "dtype": args.dtype or "the problems' own",
        "overrides": " ".join(f"{name}={value}" for name, value in args.overrides) or "none",
        "reference": references[0] if references else reference_label(),
        "reference_compile": "torch.compile timed" if args.compile_ref else "not timed",
        "candidate": args.candidate,
        "trials": args.trials,
        "seed": args.seed,
    }


def run(args: argparse.Namespace) -> int:
    if args.train:
        if args.dtype or args.overrides:
            print("kernelwright bench: --dtype and --set are for problems, not --train",
                  file=sys.stderr)
            return 2
        return training.run(args)
    suite = args.suite or bundled_suite()
    try:
        found = problems.discover(suite)
    except FileNotFoundError as exc:
        print(f"kernelwright bench: {exc}", file=sys.stderr)
        return 2
    sample, sample_why = default_sample(args)
    chosen = select(quick_sample(found) if sample == "quick" else found, args.only, args.level)
    if not chosen:
        print(f"kernelwright bench: no problems in {suite}"
              + (" match the filters" if found else ""), file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("kernelwright bench: --jobs must be at least 1", file=sys.stderr)
        return 2
    if args.size:
        size, size_why = args.size, "asked"
    else:
        size, size_why = gpu.default_size()
    settings = runner.BenchSettings(
        size=size, trials=args.trials, loose=args.loose, accelerated=args.accelerated,
        compile_ref=args.compile_ref,
        candidate=args.candidate, seed=args.seed, alt_shape=not args.no_alt_shape,
        timeout_s=args.timeout,
        max_rss_gb=args.max_rss_gb or runner.default_rss_limit_gb(),
        dtype=args.dtype, overrides=dict(args.overrides))
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    print(f"kernelwright bench: {len(chosen)} problems from {suite} ({sample}: {sample_why}), "
          f"size {size} ({size_why}), "
          f"{precision_label(args.loose, args.accelerated)} precision, "
          f"dtype {args.dtype or 'own'}"
          + "".join(f", {name}={value}" for name, value in args.overrides) + f", out {out}",
          file=sys.stderr)
    caveat = timing.side_by_side_caveat() if args.jobs > 1 else None
    if caveat:
        print(f"kernelwright bench: warning: with --jobs {args.jobs} the speedups are not "
              f"trustworthy here: {caveat} (run with --jobs 1 for figures)", file=sys.stderr)

    waves = None
    if args.candidate == "kernelwright":  # measured here once, not by workers side by side

        waves = device_waves()
        print("kernelwright bench: waves: " + (
            f"{waves.wide} workgroups of the wide tiles, {waves.plain} of the plain ones run "
            "at once" if waves else "unknown (large products keep their fixed tiles)"),
            file=sys.stderr)

    interrupted = False
    previous_handler = signal.signal(signal.SIGTERM, stop)
    try:
        results = runner.run_suite(chosen, settings, out, resume=args.resume,
                                   jobs=args.jobs)
    except KeyboardInterrupt:  # the worker was killed; what finished is in SQLite
        interrupted = True
        store = runner.ResultStore(out / "results.sqlite")
        done = {r["name"]: r for r in store.all(settings.key())}
        store.close()
        results = [done[p.name] for p in chosen if p.name in done]
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    summary = metrics.summarize(results)
    info = run_info(args, Path(suite), size, size_why, results)
    info["sample"] = f"{sample} ({sample_why})"
    if caveat:
        info["timing_caveat"] = f"--jobs {args.jobs}: {caveat}"
    info["waves"] = dataclasses.asdict(waves) if waves else None
    document = {**info, "settings": vars(settings), "summary": summary, "problems": results}
    (out / "results.json").write_text(json.dumps(document, indent=1, default=str))
    report.write_report(out / "report.html", info, summary, results)

    print()
    print(f"device: {info['device']}   precision: {info['precision']}   "
          f"dtype: {info['dtype']}   reference: {info['reference']}")
    if caveat:
        print(f"not trustworthy: {info['timing_caveat']}")
    print(metrics.format_table(summary))
    print(f"\nwrote {out / 'results.json'}, {out / 'results.sqlite'}, {out / 'report.html'}")
    if interrupted:
        print(f"interrupted after {len(results)} of {len(chosen)} problems; run again with "
              "--resume to go on", file=sys.stderr)
        return 130
    return 0


def stop(signum: int, frame: object) -> None:
    """SIGTERM: stop like Ctrl-C, so that the running worker is killed too."""
    raise KeyboardInterrupt
