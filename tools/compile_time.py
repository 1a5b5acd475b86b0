#!/usr/bin/env python3
"""Time each compile stage of recurrent layers (capture, lowering, fusion, kernel
generation, memory planning, pipelines) at growing sequence lengths and depths, or of
the bundled training workloads' steps, on the CPU. A stage that grows faster than the
step count is quadratic somewhere.

    python tools/compile_time.py [--kinds GRU,LSTM] [--seqs 32,64] [--layers 1,6]
        [--hidden 256] [--input 128] [--batch 10] [--total] [--pipelines] [--decomposed]
        [--profile OUT.prof]
    python tools/compile_time.py --train smollm,whisper,resnet50 [--size full]
        [--pipelines] [--profile OUT.prof]
    python tools/compile_time.py --generate float32 [--context 512] [--new-tokens 32]
        [--tiny] [--pipelines] [--profile OUT.prof]

Prints each stage's wall seconds and, in parentheses, its CPU seconds. Run it with
PYTHONPATH=an older checkout's src for that compiler's numbers.

`--train` plans each workload's step as `kernelwright bench --train` compiles it
(train.step.plan_training's stages, for the binding limits of NVIDIA's Vulkan driver on
an H100, tools/plan_memory.py's): `capture` (the joint forward-backward export),
`to_ir` (lowering and the optimizer's update), `fuse` and `generate` (as build_plan
runs them), `build_plan` (both again, and memory planning).

`--generate DTYPE` plans kernelwright.generate's prompt plan (the context's bucket) and
decode plan for tools/generate_bench.py's model (SmolLM2-135M's config, random weights;
`--tiny` its two-layer one) in DTYPE, as generate compiles them (compiler._plan's stages,
for the default device's limits and waves): `capture` (`--capture trace`, compile's:
capture.trace_graph, `traced 0` where it fell back to export; `export`: export_graph,
torch.export and its decompositions, compile's fallback and its capture before),
`to_ir`, `fuse`, `generate`, `build_plan`; with `--pipelines` then
the device's work as compile does it, the prompt plan first and the decode plan sharing
its state: `pipelines` (those not built yet: `new` of the plan's `sources`), `buffers`
(the Executable less its constants' upload and pipelines: buffers and bind groups) and
`constants` (uploading those the plan does not share; timed as a second upload).

`--pipelines` also builds the plan's pipelines on the default device (lavapipe here).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import sys
import time
import warnings

import torch
from torch import nn


class Flat(nn.Module):
    """The layer's output and final states as one flat tuple."""

    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        out, h = self.rnn(x)
        return (out, *h) if isinstance(h, tuple) else (out, h)


def _now() -> complex:
    """Wall and CPU seconds (real and imaginary parts): on a shared machine the CPU
    time is the steadier of the two."""
    return complex(time.perf_counter(), time.process_time())


def _plan_stages(graph, tree: str, dtypes, options, t: dict, plan_options=None):
    """Fuse and generate `graph`'s kernels as build_plan does them, then build_plan itself
    (both again, and memory planning; `plan_options`, else `options`), each stage's
    seconds into `t`; returns the plan."""
    from kernelwright.ir.ir import read_only_in_band
    from kernelwright.kernels import generate
    from kernelwright.schedule.schedule import build_plan, fuse, live_nodes, readers

    t0 = _now()
    nodes = live_nodes(graph)
    users, outputs = readers(nodes), set(graph.roots())
    groups = fuse(graph, nodes)
    t["fuse"] = _now() - t0
    t0 = _now()
    materialized = {g.root for g in groups}
    for g in groups:
        generate(g.root, g.template, materialized, lambda v: id(v), options,
                 [(p.template, p.root) for p in g.phases],
                 read_only_in_band(g.root, users, outputs))
    t["generate"] = _now() - t0
    t0 = _now()
    plan = build_plan(graph, tree, dtypes, plan_options or options)
    t["build_plan"] = _now() - t0
    return plan


def stages(module: nn.Module, x: torch.Tensor, pipelines: bool, keep_recurrent: bool,
           total: bool) -> dict[str, complex | int]:
    """Seconds per stage (wall + 1j * CPU) of planning `module` for `x`: fuse and
    generate as build_plan does them, then build_plan itself (both again, and memory
    planning); with `total`, compiler.plan_module end to end (the garbage collector
    paused: what compile runs)."""
    from kernelwright.frontend import capture
    from kernelwright.frontend.capture import fx_to_ir, lstm_state_shapes
    from kernelwright.options import CompileOptions
    from kernelwright.tune import choose_knobs

    t: dict[str, float] = {}
    t0 = _now()
    # (a compiler from before capture.recurrent_shapes: its path, for a baseline)
    shapes = getattr(capture, "recurrent_shapes", lambda keep: contextlib.nullcontext())
    table = (capture.decomposition_table(keep_recurrent) if hasattr(capture, "RECURRENT")
             else capture.decomposition_table())
    with lstm_state_shapes(), shapes(keep_recurrent):
        ep = torch.export.export(module, (x,), strict=False)
        t["export"] = _now() - t0
        t0 = _now()
        ep = ep.run_decompositions(table)
    t["decompose"] = _now() - t0
    t0 = _now()
    sig = ep.graph_signature
    constants = {}
    for spec in sig.input_specs:
        if spec.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            v = ep.state_dict.get(spec.target)
            constants[spec.arg.name] = ep.constants[spec.target] if v is None else v
    user = [i for i, s in enumerate(sig.output_specs) if s.kind.name == "USER_OUTPUT"]
    builder, dtypes = fx_to_ir(ep.graph_module, constants, user)
    t["fx_to_ir"] = _now() - t0
    plan = _plan_stages(builder.graph, "tuple", dtypes, CompileOptions(), t,
                        CompileOptions(choose=choose_knobs))
    t["kernels"] = len(plan.kernels)
    t["sources"] = len({k.source for k in plan.kernels})
    if total:
        from kernelwright.compiler import plan_module
        t0 = _now()
        plan_module(module, [x])
        t["plan_module"] = _now() - t0
    if pipelines:
        from kernelwright.runtime.runtime import default_device
        dev = default_device()
        t0 = _now()
        dev.pipelines([(k.source, k.trusted) for k in plan.kernels])
        t["pipelines"] = _now() - t0
    return t


def train_stages(name: str, size: str, pipelines: bool) -> dict[str, complex | int]:
    """Seconds per stage (wall + 1j * CPU) of planning bundled training workload `name`
    at `size` (the module docstring), the garbage collector paused as compile pauses it."""
    from kernelwright.compiler import _collector_paused
    from kernelwright.harness.training import (
        DEFAULT_LR,
        MAX_GRAD_NORM,
        bundled_workloads,
        discover,
        load,
        our_optimizer,
    )
    from kernelwright.options import CompileOptions
    from kernelwright.train import step
    from kernelwright.train.optim import ParamGroups

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from plan_memory import H100

    [workload] = [w for w in discover(bundled_workloads()) if w.name == name]
    module = load(workload)
    cfg = module.SIZES[size]
    torch.manual_seed(0)
    model = module.build(cfg).train()
    batch = tuple(module.batch(cfg, 0))
    optimizer = our_optimizer(float(getattr(module, "LR", DEFAULT_LR)))
    options = CompileOptions("strict", None, H100, None)
    t: dict[str, complex | int] = {}
    with _collector_paused():
        t0 = _now()
        joint = step.capture_joint(model, batch, module.loss)
        t["capture"] = _now() - t0
        t0 = _now()
        (builder, dtypes), _ = step._joint_graph(joint, ParamGroups.single(optimizer),
                                                 MAX_GRAD_NORM, 1, options)
        t["to_ir"] = _now() - t0
        plan = _plan_stages(builder.graph, "tuple", dtypes, options, t)
    t["nodes"] = len(joint.graph.nodes)
    t["kernels"] = len(plan.kernels)
    t["sources"] = len({k.source for k in plan.kernels})
    if pipelines:
        from kernelwright.runtime.runtime import default_device
        dev = default_device()
        t0 = _now()
        dev.pipelines([(k.source, k.trusted) for k in plan.kernels])
        t["pipelines"] = _now() - t0
    return t


def generate_stages(dtype: str, context: int, new: int, tiny: bool, pipelines: bool,
                    capture: str) -> list[tuple[str, dict[str, complex | int]]]:
    """Seconds per stage (wall + 1j * CPU) of the prompt and decode plans
    kernelwright.generate compiles for tools/generate_bench.py's model (module docstring)."""
    from kernelwright.compiler import _collector_paused
    from kernelwright.frontend.capture import export_graph, from_exported, fx_to_ir, trace_graph
    from kernelwright.generate import CacheModule, _bucket
    from kernelwright.options import CompileOptions
    from kernelwright.runtime.runtime import Executable, default_device
    from kernelwright.tune import choose_knobs
    from kernelwright.tune.waves import device_waves

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from generate_bench import make_model

    model = make_model(tiny, getattr(torch, dtype))
    length = context + new
    dev = default_device()
    options = CompileOptions("strict", device_waves(dev), dev.binding_limits, choose_knobs)
    out, first, made = [], None, {}  # (the plans share what lowering made: compile's share_state)
    for name, tokens in (("prefill", _bucket(context, length)), ("decode", 1)):
        example = CacheModule.example(1, tokens)
        t: dict[str, complex | int] = {}
        with _collector_paused():
            t0 = _now()
            module = CacheModule(model, 1, length)
            captured = trace_graph(module, example) if capture == "trace" else None
            traced = captured is not None  # else exported: this torch has no such trace
            captured = captured or from_exported(export_graph(module, example))
            t["capture"] = _now() - t0
            t0 = _now()
            builder, dtypes = fx_to_ir(captured.graph_module, captured.constants,
                                       captured.user_outputs, captured.mutations,
                                       options=options, made=made)
            t["to_ir"] = _now() - t0
            plan = _plan_stages(builder.graph, "single", dtypes, options, t)
        t["traced"] = int(traced)
        t["nodes"] = len(captured.graph_module.graph.nodes)
        t["kernels"] = len(plan.kernels)
        t["sources"] = len({k.source for k in plan.kernels})
        if pipelines:
            sources = [(k.source, k.trusted) for k in plan.kernels]
            built = len(dev._pipelines)
            t0 = _now()
            dev.pipelines(sources)
            t["pipelines"] = _now() - t0
            t["new"] = len(dev._pipelines) - built
            t0 = _now()
            exe = Executable(plan, dev, first, share_constants=True)
            whole = _now() - t0
            theirs = {id(s) for s in first.segments} if first else set()
            own = [b for b in plan.constants if id(exe.segments[b]) not in theirs]
            t0 = _now()
            for b in own:
                exe.write(b, plan.constants[b])
            t["constants"] = _now() - t0
            t["buffers"] = whole - t["constants"]
            t["uploaded"] = len(own)
            first = first or exe
        out.append((name, t))
    return out


def _show(t: dict[str, complex | int]) -> str:
    return " ".join(f"{k} {v.real:.2f} ({v.imag:.2f})" if isinstance(v, complex)
                    else f"{k} {v}" for k, v in t.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="GRU,LSTM")
    ap.add_argument("--seqs", default="32,64,128")
    ap.add_argument("--layers", default="1,2")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--input", type=int, default=128)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--unidirectional", action="store_true")
    ap.add_argument("--pipelines", action="store_true")
    ap.add_argument("--total", action="store_true", help="also time plan_module")
    ap.add_argument("--decomposed", action="store_true",
                    help="let torch.export decompose the recurrent ops (the slow path)")
    ap.add_argument("--profile", default=None, help="cProfile the last case into this file")
    ap.add_argument("--train", default=None,
                    help="bundled training workloads to time instead (comma-separated)")
    ap.add_argument("--size", default="full", help="the training workloads' size")
    ap.add_argument("--generate", default=None, metavar="DTYPE",
                    help="time generate's prompt and decode plans in this dtype instead")
    ap.add_argument("--context", type=int, default=512, help="--generate's prompt length")
    ap.add_argument("--new-tokens", type=int, default=32, help="--generate's new tokens")
    ap.add_argument("--tiny", action="store_true", help="--generate's two-layer model")
    ap.add_argument("--capture", default="trace", choices=["trace", "export"],
                    help="--generate's capture: compile's (trace) or its fallback (export)")
    args = ap.parse_args()
    os.environ.setdefault("KERNELWRIGHT_TUNE", "off")
    warnings.filterwarnings("ignore")
    if args.generate:
        prof = cProfile.Profile() if args.profile else None
        if prof:
            prof.enable()
        plans = generate_stages(args.generate, args.context, args.new_tokens, args.tiny,
                                args.pipelines, args.capture)
        if prof:
            prof.disable()
            prof.dump_stats(args.profile)
        for name, t in plans:
            print(f"{name} ({args.generate}): {_show(t)}", flush=True)
        return 0
    if args.train:
        names = args.train.split(",")
        for i, name in enumerate(names):
            prof = cProfile.Profile() if args.profile and i == len(names) - 1 else None
            if prof:
                prof.enable()
            t = train_stages(name, args.size, args.pipelines)
            if prof:
                prof.disable()
                prof.dump_stats(args.profile)
            print(f"{name} ({args.size}): {_show(t)}", flush=True)
        return 0
    from kernelwright import compiler
    # the stages as plan_module runs them (a compiler from before it paused the
    # garbage collector: with it running)
    paused = getattr(compiler, "_collector_paused", contextlib.nullcontext)
    cases = [(k, int(s), int(n)) for k in args.kinds.split(",") for n in args.layers.split(",")
             for s in args.seqs.split(",")]
    for i, (kind, seq, layers) in enumerate(cases):
        torch.manual_seed(0)
        rnn = getattr(nn, kind)(args.input, args.hidden, num_layers=layers,
                                bidirectional=not args.unidirectional)
        x = torch.zeros(seq, args.batch, args.input)
        prof = cProfile.Profile() if args.profile and i == len(cases) - 1 else None
        if prof:
            prof.enable()
        with paused():
            t = stages(Flat(rnn).eval(), x, args.pipelines, not args.decomposed, args.total)
        if prof:
            prof.disable()
            prof.dump_stats(args.profile)
        print(f"{kind} seq {seq} layers {layers}: {_show(t)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
