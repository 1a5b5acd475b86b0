#!/usr/bin/env python3
"""Where the bytes of a compiled training step's plan go, without a GPU.

    python tools/plan_memory.py                        # every bundled workload, full size
    python tools/plan_memory.py whisper mlp --size small
    python tools/plan_memory.py smolvla --top 20       # and its 20 largest temporaries

Each workload of src/kernelwright/suite/training is planned as `kernelwright bench --train`
compiles it (AdamW, gradient clipping) by `train.step.plan_training`, for the binding
limits of NVIDIA's Vulkan driver on an H100 (2 GiB - 4 B per binding, 4 GiB - 2 MiB per
buffer) unless --software gives Mesa's (128 MiB): nothing is allocated, so a plan larger
than this machine's memory is measured too. The plan's buffers (its `plan_bytes`, as bench
reports it) are split by what they hold: the batch, parameters, optimizer state, model
buffers (batch norm's statistics), other constants, the new values of updated state that
cannot be written in place, the outputs, and the temporaries the memory planner shares
among the intermediates. `peak live` is the most bytes of temporary buffers holding a value
still to be read at any one kernel: what the temporaries would take if the planner wasted
nothing between tenants of different sizes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

import torch

from kernelwright.harness.training import (
    DEFAULT_LR,
    MAX_GRAD_NORM,
    bundled_workloads,
    discover,
    load,
    our_optimizer,
)
from kernelwright.options import BindingLimits, CompileOptions
from kernelwright.plan import Plan
from kernelwright.train.step import PlannedStep, plan_training

# NVIDIA's Vulkan driver on an H100 (wgpu-native's limits there)
H100 = BindingLimits(max_bindings=1 << 20, max_bytes=(2 << 30) - 4, align=256,
                     max_buffer=(4 << 30) - (2 << 20))
# Mesa's software driver (lavapipe)
SOFTWARE = BindingLimits(max_bindings=8, max_bytes=128 << 20, align=256,
                         max_buffer=(1 << 31) - 1)
CATEGORIES = ("batch", "parameters", "optimizer state", "model buffers", "other constants",
              "update values", "outputs", "temporaries")


def breakdown(step: PlannedStep) -> dict[str, int]:
    """Bytes of the plan's buffers per category (the module docstring)."""
    plan = step.plan
    state = {name: spec.buffer for name, spec in plan.state}
    role = {state[n]: "parameters" for n in step.params.values()}
    role |= {state[n]: "optimizer state" for n in step.optim_state}
    role |= {state[n]: "model buffers" for n in step.buffers.values()}
    sources = {src for src, dst in plan.updates if src != dst}
    out: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
    for b in plan.buffers:
        if b.id in role:
            kind = role[b.id]
        elif b.kind == "input":
            kind = "batch"
        elif b.kind == "const":
            kind = "other constants"
        elif b.kind == "output":
            kind = "outputs"
        elif b.id in sources:
            kind = "update values"
        else:
            kind = "temporaries"
        out[kind] += b.nbytes
    return out


def tenancies(plan: Plan) -> list[tuple[int, int, int]]:
    """(buffer, first kernel, last kernel) of each stay of a value in a temporary buffer:
    from the kernel that writes it (every chunk of one value counted as one write) to its
    last reader before the next write."""
    temps = {b.id for b in plan.buffers if b.kind == "temp"}
    out: list[tuple[int, int, int]] = []
    open_: dict[int, list[int]] = {}
    last_writer: dict[int, str] = {}
    for i, k in enumerate(plan.kernels):
        *reads, wrote = k.bindings
        for b in reads:
            if b in open_:
                open_[b][1] = i
        if wrote in temps:
            value = k.name.split(" [chunk")[0]
            chunk = " [chunk" in k.name and last_writer.get(wrote) == value
            if wrote in open_ and not chunk:
                out.append((wrote, *open_.pop(wrote)))
            open_.setdefault(wrote, [i, i])[1] = i
            last_writer[wrote] = value
    for b, (first, last) in open_.items():
        out.append((b, first, last))
    return out


def peak_live(plan: Plan) -> tuple[int, int]:
    """The most bytes of temporary buffers holding a value still to be read at one kernel
    (a buffer counted whole), and that kernel's index. A value that is an update's source
    lives to the end."""
    sizes = {b.id: b.nbytes for b in plan.buffers}
    ends = len(plan.kernels)
    sources = {src for src, _ in plan.updates}
    delta: dict[int, int] = defaultdict(int)
    for b, first, last in tenancies(plan):
        delta[first] += sizes[b]
        delta[(ends if b in sources else last) + 1] -= sizes[b]
    live, best, at = 0, 0, 0
    for i in range(ends + 2):
        live += delta.get(i, 0)
        if live > best:
            best, at = live, i
    return best, at


def largest_temporaries(plan: Plan, n: int) -> list[str]:
    """The `n` largest temporary buffers, each with the kernels that write it."""
    writers: dict[int, list[str]] = defaultdict(list)
    for k in plan.kernels:
        name = k.name.split(" [chunk")[0]
        if name not in writers[k.bindings[-1]]:
            writers[k.bindings[-1]].append(name)
    temps = sorted((b for b in plan.buffers if b.kind == "temp"), key=lambda b: -b.nbytes)
    return [f"  b{b.id:<5} {b.nbytes / 2**20:9.1f} MiB  {len(writers[b.id])} tenants: "
            f"{', '.join(writers[b.id][:4])}{' ...' if len(writers[b.id]) > 4 else ''}"
            for b in temps[:n]]


def plan_workload(name: str, size: str, limits: BindingLimits) -> tuple[PlannedStep, int]:
    """The planned step of bundled workload `name` at `size`, as bench --train compiles
    it, and the model's parameter count."""
    [workload] = [w for w in discover(bundled_workloads()) if w.name == name]
    module = load(workload)
    cfg = module.SIZES[size]
    torch.manual_seed(0)
    model = module.build(cfg).train()
    lr = float(getattr(module, "LR", DEFAULT_LR))
    step = plan_training(model, tuple(module.batch(cfg, 0)), module.loss,
                         our_optimizer(lr),
                         CompileOptions("strict", None, limits, None),
                         max_grad_norm=MAX_GRAD_NORM)
    return step, sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="*", help="bundled workload names (default: all)")
    parser.add_argument("--size", default="full")
    parser.add_argument("--software", action="store_true",
                        help="plan for the software driver's limits, not the H100's")
    parser.add_argument("--top", type=int, default=0, help="list the largest temporaries")
    args = parser.parse_args(argv)
    names = args.workloads or [w.name for w in discover(bundled_workloads())]
    limits = SOFTWARE if args.software else H100
    gb = 1e9
    for name in names:
        t0 = time.perf_counter()
        try:
            step, params = plan_workload(name, args.size, limits)
        except Exception as e:  # noqa: BLE001 - report it and go on with the next workload
            print(f"{name}: failed: {type(e).__name__}: {e}", flush=True)
            continue
        plan = step.plan
        parts = breakdown(step)
        total = sum(b.nbytes for b in plan.buffers)
        live, at = peak_live(plan)
        print(f"{name} ({args.size}): {params / 1e6:.1f} M parameters, "
              f"{len(plan.kernels)} kernels, {len(plan.buffers)} buffers, "
              f"planned in {time.perf_counter() - t0:.0f} s")
        print(f"  plan bytes {total / gb:8.3f} GB")
        for kind, n in parts.items():
            print(f"  {kind:<16} {n / gb:8.3f} GB")
        print(f"  temporaries' peak live {live / gb:.3f} GB (at kernel {at} of "
              f"{len(plan.kernels)})")
        for line in largest_temporaries(plan, args.top):
            print(line)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
