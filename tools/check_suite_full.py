#!/usr/bin/env python3
"""Time the bundled suite's problems in PyTorch eager mode, to check their sizes.

    python tools/check_suite_full.py --device cuda                 # every problem, full size
    python tools/check_suite_full.py --device cuda --only 'level2/*'
    python tools/check_suite_full.py --device cpu --size small --only level1/001

For each problem file: load it by path, apply SIZES[size] to its module constants, build
the model and its inputs directly on the device (eval mode, fixed seed), run --warmup calls,
then time --iters calls (CUDA events on a GPU, perf_counter on the CPU) and report the
median in milliseconds. Problems faster than --min-ms are flagged. Before timing, one extra
call counts matmul/conv FLOPs and finds the largest float tensor (inputs, weights, intermediates,
outputs); tensors over --max-gb are flagged too.

Full sizes are meant for a large GPU: on a CPU use --size small or a narrow --only.
By default TF32 is off, so times are true fp32; --allow-tf32 turns it on for matmul and
cuDNN convolutions (PyTorch's own default enables it for cuDNN only).
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import importlib.util
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

DEFAULT_SUITE = Path(__file__).resolve().parents[1] / "src" / "kernelwright" / "suite"


class LargestTensor(TorchDispatchMode):
    """Records the byte size of the largest floating-point tensor any operation produces.

    Integer tensors are left out: they are PyTorch's own bookkeeping (max pooling's
    indices, say), not part of the model's computation.
    """

    def __init__(self):
        super().__init__()
        self.nbytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
                self.nbytes = max(self.nbytes, leaf.numel() * leaf.element_size())
        return out


def problem_name(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def find_problems(suite: Path, patterns: list[str]) -> list[Path]:
    paths = sorted(suite.glob("level*/*.py"))
    if not patterns:
        return paths
    return [
        p
        for p in paths
        if any(fnmatch.fnmatch(problem_name(p), pat) or pat in problem_name(p) for pat in patterns)
    ]


def load_problem(path: Path):
    name = f"kernelwright_suite_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(model, inputs, device: torch.device, warmup: int, iters: int) -> list[float]:
    for _ in range(warmup):
        model(*inputs)
    synchronize(device)
    times = []
    if device.type == "cuda":
        for _ in range(iters):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            model(*inputs)
            synchronize(device)
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def check_problem(path: Path, args, device: torch.device) -> dict:
    module = load_problem(path)
    vars(module).update(module.SIZES[args.size])
    torch.manual_seed(0)
    with torch.device(device):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
    model = model.to(device).eval()
    inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
    result = {"name": problem_name(path)}
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    tensors += list(model.parameters()) + list(model.buffers())
    largest = max((t.numel() * t.element_size() for t in tensors), default=0)
    with torch.no_grad():
        if args.count:
            flops = FlopCounterMode(display=False)
            biggest = LargestTensor()
            with flops, biggest:
                out = model(*inputs)
            result["gflop"] = flops.get_total_flops() / 1e9
            largest = max(largest, biggest.nbytes)
            del out
        result["max_gb"] = largest / 1e9
        times = time_calls(model, inputs, device, args.warmup, args.iters)
    result["ms"] = statistics.median(times)
    result["min_ms"] = min(times)
    return result


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", default=default_device, help="cuda, cuda:N or cpu")
    parser.add_argument("--size", choices=["full", "small"], default="full")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="glob or substring on 'levelN/NNN_name'; repeatable",
    )
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE, help="suite folder")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--min-ms", type=float, default=1.0, help="flag problems faster")
    parser.add_argument("--max-gb", type=float, default=2.0, help="flag larger tensors")
    parser.add_argument("--allow-tf32", action="store_true", help="let matmul/conv use TF32")
    parser.add_argument(
        "--no-count",
        dest="count",
        action="store_false",
        help="skip the FLOP / largest-tensor counting call",
    )
    parser.add_argument("--csv", type=Path, help="also write the results here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.allow_tf32
    torch.backends.cudnn.allow_tf32 = args.allow_tf32
    torch.backends.cudnn.benchmark = False
    problems = find_problems(args.suite, args.only)
    if not problems:
        print(f"no problems match {args.only} under {args.suite}", file=sys.stderr)
        return 2
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"# torch {torch.__version__} on {where}; size={args.size}; "
        f"tf32={'on' if args.allow_tf32 else 'off'}; warmup={args.warmup}; "
        f"median of {args.iters}"
    )
    header = f"{'problem':<52} {'ms':>9} {'min ms':>9} {'GFLOP':>9} {'max GB':>7}  flag"
    print(header)
    print("-" * len(header))
    rows, slow, errors, big = [], [], [], []
    for path in problems:
        name = problem_name(path)
        try:
            r = check_problem(path, args, device)
        except Exception as exc:  # noqa: BLE001 - report it and go on to the next problem
            errors.append(name)
            print(f"{name:<52} ERROR {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            if not isinstance(exc, torch.OutOfMemoryError):
                traceback.print_exc(limit=3)
            r = None
        finally:
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if r is None:
            continue
        flags = []
        if r["ms"] < args.min_ms:
            flags.append(f"< {args.min_ms:g} ms")
            slow.append(name)
        if r["max_gb"] > args.max_gb:
            flags.append(f"tensor > {args.max_gb:g} GB")
            big.append(name)
        gflop = f"{r['gflop']:9.1f}" if "gflop" in r else f"{'-':>9}"
        print(
            f"{name:<52} {r['ms']:9.3f} {r['min_ms']:9.3f} {gflop} {r['max_gb']:7.2f}  "
            + ", ".join(flags),
            flush=True,
        )
        rows.append(r)
    print()
    print(
        f"# {len(rows)} timed, {len(slow)} under {args.min_ms:g} ms, "
        f"{len(big)} with a tensor over {args.max_gb:g} GB, {len(errors)} errors"
    )
    for label, names in (("under", slow), ("big", big), ("error", errors)):
        if names:
            print(f"# {label}: " + " ".join(names))
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("problem,ms,min_ms,gflop,max_gb\n")
            for r in rows:
                gflop = f"{r['gflop']:.3f}" if "gflop" in r else ""
                f.write(f"{r['name']},{r['ms']:.4f},{r['min_ms']:.4f},{gflop},{r['max_gb']:.4f}\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
