"""Where a compiled training step's GPU time goes, per bundled training workload
(src/kernelwright/suite/training/, the optimizer and clipping of ``bench --train``).

    python tools/train_profile.py [--size small|full] [--only mlp,cnn] [--out FILE.json]
        [--top N] [--runs R] [--steps S]

Per workload: compile the step, run S warm-up steps, then the step's wall time (mean of S
steps, each ending with its loss read back: uploads, submission and read-back included)
and R timed steps (TrainingStep.kernel_times_ms: timestamps around each kernel, one
compute pass per kernel; the median of the R per kernel), then R steps timed as one
compute pass (TrainingStep.gpu_time_ms, the median). The gap between the wall time and
the sum of kernel times is what a step spends outside kernels (launch and submission,
the batch's upload, the loss's read-back, the passes' boundaries); `outside_gpu_ms`, the
wall time less the one pass's GPU time, is that gap without the per-kernel passes'
boundaries (on the software driver both can be negative: its timestamps are not the
GPU's, and other processes share its cores). Kernel
times are grouped by kernel name (the fused op chain, e.g. ``window+matmul+add``) and by
template family (the template of the kernel's key; ``matmul (window)`` for a convolution
lowered to a windowed matmul, ``transpose`` for the tiled elementwise copy, ``copy`` for a
plain one). The top N kernels come with their knobs, grid, operand shapes, the bytes of
their template's operands and output at those shapes (epilogue inputs not counted) and,
for matmuls, their FLOPs. Kernels are not split by phase (forward, backward, optimizer):
a plan kernel records the source lines it came from, not the node it computes, and the
optimizer's kernels carry the lines of the gradients they fuse.

Where PyTorch sees CUDA, the same workload's eager step (AdamW, clipping) beside it: its
wall time and torch.profiler's CUDA kernel time of one step, total and grouped by kernel
name. Run on the GPU machine (tools/h200_session.sh trainprofile).
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import math
import re
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import torch  # noqa: E402

import kernelwright  # noqa: E402
from kernelwright.dtypes import DEVICE_DTYPES  # noqa: E402
from kernelwright.harness import training  # noqa: E402
from kernelwright.harness.timing import keep_gpu_awake  # noqa: E402
from kernelwright.plan import Kernel  # noqa: E402
from kernelwright.runtime.runtime import default_device  # noqa: E402

_OPERAND = re.compile(r"(\w+)\[([\d,]*)\]")
MATMUL_TEMPLATES = ("matmul", "matmul_coop")


def template(kernel: Kernel) -> str:
    """The template that generated `kernel` (its key's first word; "unknown" without a
    key)."""
    return kernel.key.split(" ", 1)[0] if kernel.key else "unknown"


def family(kernel: Kernel) -> str:
    """The kernel's template family: its template, a convolution's windowed matmul told
    apart from a plain one, the tiled elementwise kernel (a transpose) and a lone copy
    from other elementwise chains."""
    kind, ops = template(kernel), kernel.name.split("+")
    if kind in MATMUL_TEMPLATES and "window" in ops:
        return f"{kind} (window)"
    if kind == "elementwise":
        if kernel.knobs.get("TILE"):
            return "transpose"
        if ops == ["copy"]:
            return "copy"
    return kind


def operands(kernel: Kernel) -> tuple[list[tuple[str, tuple[int, ...]]],
                                      tuple[str, tuple[int, ...]] | None]:
    """(dtype, shape) of the template's operands and of its output, from the kernel's key
    (its bucket: "f32[1,16,12] f32[1,12,32] -> f32[16,32]")."""
    parts = kernel.key.split(" ", 1)[1].rsplit(" #", 1)[0] if " " in kernel.key else ""
    ins, _, out = parts.partition("->")

    def parse(text: str) -> list[tuple[str, tuple[int, ...]]]:
        return [(dt, tuple(int(d) for d in dims.split(",") if d))
                for dt, dims in _OPERAND.findall(text)]

    outs = parse(out)
    return parse(ins), (outs[0] if outs else None)


def operand_bytes(kernel: Kernel) -> int | None:
    """Bytes of the template's operands and output at their shapes (None: no key)."""
    ins, out = operands(kernel)
    if out is None:
        return None
    return sum(math.prod(shape) * DEVICE_DTYPES[dt].itemsize if dt in DEVICE_DTYPES
               else math.prod(shape) * 4 for dt, shape in [*ins, out])


def flops(kernel: Kernel) -> int | None:
    """A matmul's FLOPs (2 B M N K from its operands [B, M, K] and [B, K, N]); None for
    other templates."""
    ins, _ = operands(kernel)
    if template(kernel) not in MATMUL_TEMPLATES or len(ins) != 2:
        return None
    (_, a), (_, b) = ins
    if len(a) != 3 or len(b) != 3:
        return None
    return 2 * a[0] * a[1] * a[2] * b[2]


def grouped(rows: list[dict], key: str) -> list[dict]:
    """Rows (each with "ms") summed by `key`: count, ms and share of the total, the
    costliest first."""
    sums: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        sums[r[key]][0] += 1
        sums[r[key]][1] += r["ms"]
    total = sum(r["ms"] for r in rows) or 1.0
    return [{key: k, "count": c, "ms": round(t, 4), "share": round(t / total, 4)}
            for k, (c, t) in sorted(sums.items(), key=lambda kv: -kv[1][1])]


def kernel_rows(kernels: list[Kernel], runs: list[list[tuple[str, float]]]) -> list[dict]:
    """One row per plan kernel: its index, name, template, family and median time."""
    rows = []
    for i, k in enumerate(kernels):
        ms = statistics.median(run[i][1] for run in runs)
        rows.append({"index": i, "name": k.name, "template": template(k), "family": family(k),
                     "ms": ms})
    return rows


def top_kernels(kernels: list[Kernel], rows: list[dict], n: int) -> list[dict]:
    """The `n` costliest kernels with what the plan tells of them: knobs, grid, operand
    shapes, bytes, FLOPs and the rates they imply."""
    out = []
    for r in sorted(rows, key=lambda r: -r["ms"])[:n]:
        k = kernels[r["index"]]
        nbytes, nflops = operand_bytes(k), flops(k)
        seconds = r["ms"] / 1e3
        out.append({**r, "ms": round(r["ms"], 4), "knobs": k.knobs, "grid": list(k.grid),
                    "workgroups": math.prod(k.grid),
                    "operands": k.key.split(" ", 1)[1].rsplit(" #", 1)[0] if k.key else "",
                    "operand_bytes": nbytes, "flops": nflops,
                    "gb_per_s": round(nbytes / seconds / 1e9, 2) if nbytes and seconds else None,
                    "tflop_per_s": round(nflops / seconds / 1e12, 3)
                    if nflops and seconds else None})
    return out


def profile_step(step, batches: list[tuple], runs: int, top: int) -> dict:
    """Profile a compiled TrainingStep on `batches` (one warm-up step each, then the mean
    wall time of a step over them, then `runs` steps timed per kernel and `runs` timed as
    one compute pass): the step's wall time, the sum of its kernel times and the gap, the
    GPU time of the step's one pass and the wall time outside it, kernel times grouped by
    name and by family, every kernel's row and the `top` costliest in detail."""
    for b in batches:
        step(*b)
    t0 = time.perf_counter()
    for b in batches:
        step(*b)
    wall = (time.perf_counter() - t0) * 1e3 / len(batches)
    timed = [step.kernel_times_ms(*batches[i % len(batches)]) for i in range(runs)]
    one_pass = statistics.median(step.gpu_time_ms(*batches[i % len(batches)])
                                 for i in range(runs))
    kernels = step.plan.kernels
    rows = kernel_rows(kernels, timed)
    total = sum(r["ms"] for r in rows)
    return {"kernels": len(kernels), "step_ms": round(wall, 4),
            "sum_of_kernels_ms": round(total, 4), "gap_ms": round(wall - total, 4),
            "gpu_pass_ms": round(one_pass, 4), "outside_gpu_ms": round(wall - one_pass, 4),
            "kernel_runs": runs, "by_name": grouped(rows, "name"),
            "by_family": grouped(rows, "family"),
            "phase": None, "phase_note": "not recorded: a plan kernel keeps its source lines, "
                                         "not the node it computes",
            "top": top_kernels(kernels, rows, top),
            "per_kernel": [{**r, "ms": round(r["ms"], 5)} for r in rows]}


def torch_groups(events: list[tuple[str, float]], top: int) -> dict:
    """(kernel name, microseconds) of the device's events of one step: their total and
    the `top` names by time (count, ms, share)."""
    rows = [{"name": name, "ms": us / 1e3} for name, us in events]
    return {"kernels": len(rows), "kernel_ms": round(sum(r["ms"] for r in rows), 4),
            "by_name": grouped(rows, "name")[:top]}


def torch_profile(model: torch.nn.Module, module, batches: list[tuple], lr: float,
                  top: int) -> dict:
    """PyTorch eager's step on CUDA (AdamW and clipping as bench --train): its wall time
    (training._time_eager) and torch.profiler's CUDA kernels of one step."""
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = model.to(dev)
    opt = training._eager_setup(model, lr)
    dev_batches = [training._to(b, dev) for b in batches]
    wall = training._time_eager(model, opt, module.loss, dev_batches, dev)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        training._eager_step(model, opt, module.loss, dev_batches[0])
        torch.cuda.synchronize()
    events = [(e.name, e.time_range.elapsed_us()) for e in prof.events()
              if e.device_type == torch.autograd.DeviceType.CUDA]
    out = {"device": torch.cuda.get_device_name(), "step_ms": round(wall, 4),
           **torch_groups(events, top)}
    out["gap_ms"] = round(wall - out["kernel_ms"], 4)
    model.cpu()
    return out


def profile_workload(workload: training.Workload, size: str, runs: int, steps: int,
                     top: int, cuda: bool) -> dict:
    """Compile one workload's step at `size` and profile it (and PyTorch's, with CUDA)."""
    module = training.load(workload)
    cfg = module.SIZES[size]
    lr = float(getattr(module, "LR", training.DEFAULT_LR))
    torch.manual_seed(0)
    model = module.build(cfg).train()
    eager = copy.deepcopy(model) if cuda else None
    batches = [tuple(module.batch(cfg, i)) for i in range(steps)]
    t0 = time.perf_counter()
    step = kernelwright.compile_training(model, batches[0], module.loss,
                                         optimizer=training.our_optimizer(lr),
                                         max_grad_norm=training.MAX_GRAD_NORM)
    row = {"size": size, "parameters": sum(p.numel() for p in model.parameters()),
           "compile_s": round(time.perf_counter() - t0, 2),
           **profile_step(step, batches, runs, top)}
    del step
    if eager is not None:
        row["torch"] = torch_profile(eager, module, batches, lr, top)
    else:
        row["torch"] = {"note": "PyTorch's step profile needs CUDA"}
    return row


def summary(name: str, row: dict) -> str:
    """One line of a workload's profile."""
    if "error" in row:
        return f"{name}: {row['error']}"
    fam = ", ".join(f"{f['family']} {f['ms']:.2f}" for f in row["by_family"][:4])
    line = (f"{name}: step {row['step_ms']:.2f} ms, kernels {row['sum_of_kernels_ms']:.2f} ms "
            f"({row['kernels']}), gap {row['gap_ms']:.2f} ms, one pass {row['gpu_pass_ms']:.2f} "
            f"ms; {fam}")
    if "step_ms" in row["torch"]:
        line += (f"; torch step {row['torch']['step_ms']:.2f} ms, kernels "
                 f"{row['torch']['kernel_ms']:.2f} ms")
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="full", choices=("small", "full"))
    ap.add_argument("--only", default=None, help="comma-separated workload names")
    ap.add_argument("--out", default=None, help="the JSON file (written after each workload)")
    ap.add_argument("--top", type=int, default=15, help="kernels detailed per workload")
    ap.add_argument("--runs", type=int, default=3, help="steps timed per kernel (median)")
    ap.add_argument("--steps", type=int, default=3, help="batches: warm-up and wall-time steps")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    found = {w.name: w for w in training.discover(training.bundled_workloads())}
    names = args.only.split(",") if args.only else list(found)
    unknown = [n for n in names if n not in found]
    if unknown:
        raise SystemExit(f"no training workload {', '.join(unknown)} (have {', '.join(found)})")
    cuda = torch.cuda.is_available()
    keep_gpu_awake()
    out = {"device": default_device().description, "torch": torch.__version__,
           "size": args.size, "optimizer": f"AdamW (weight decay {training.WEIGHT_DECAY}), "
           f"gradients clipped to norm {training.MAX_GRAD_NORM}", "workloads": {}}
    for name in names:
        try:
            row = profile_workload(found[name], args.size, args.runs, args.steps, args.top,
                                   cuda)
        except Exception as e:  # noqa: BLE001 - a workload that fails is reported, not fatal
            row = {"error": f"{type(e).__name__}: {e}"[:1000]}
        out["workloads"][name] = row
        print(summary(name, row), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
