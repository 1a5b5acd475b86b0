#!/usr/bin/env python3
"""Time each compile stage of recurrent layers (capture, lowering, fusion, kernel
generation, memory planning, pipelines) at growing sequence lengths and depths, on
the CPU. A stage that grows faster than the step count is quadratic somewhere.

    python scripts/compile_time.py [--kinds GRU,LSTM] [--seqs 32,64] [--layers 1,6]
        [--hidden 256] [--input 128] [--batch 10] [--pipelines] [--decomposed]
        [--profile OUT.prof]

`--pipelines` also builds the plan's pipelines on the default device (lavapipe here).
"""

from __future__ import annotations

import argparse
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


def stages(module: nn.Module, x: torch.Tensor, pipelines: bool,
           keep_recurrent: bool) -> dict[str, float]:
    """Seconds per stage of planning `module` for `x` (build_plan's steps done here one
    by one, as build_plan does them)."""
    from kernelwright import templates
    from kernelwright.capture import (
        decomposition_table,
        fx_to_ir,
        lstm_state_shapes,
        recurrent_shapes,
    )
    from kernelwright.ir import read_only_in_band
    from kernelwright.schedule import build_plan, fuse, live_nodes, readers
    from kernelwright.templates import generate

    t: dict[str, float] = {}
    t0 = time.perf_counter()
    with lstm_state_shapes(), recurrent_shapes(keep_recurrent):
        ep = torch.export.export(module, (x,), strict=False)
        t["export"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ep = ep.run_decompositions(decomposition_table(keep_recurrent))
    t["decompose"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sig = ep.graph_signature
    constants = {}
    for spec in sig.input_specs:
        if spec.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            v = ep.state_dict.get(spec.target)
            constants[spec.arg.name] = ep.constants[spec.target] if v is None else v
    user = [i for i, s in enumerate(sig.output_specs) if s.kind.name == "USER_OUTPUT"]
    builder, dtypes = fx_to_ir(ep.graph_module, constants, user)
    t["fx_to_ir"] = time.perf_counter() - t0
    graph = builder.graph
    with templates.precision("strict"):
        t0 = time.perf_counter()
        nodes = live_nodes(graph)
        users, outputs = readers(nodes), set(graph.outputs)
        groups = fuse(graph, nodes)
        t["fuse"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        materialized = {g.root for g in groups}
        for g in groups:
            generate(g.root, g.template, materialized, lambda v: id(v), None,
                     [(p.template, p.root) for p in g.phases],
                     read_only_in_band(g.root, users, outputs))
        t["generate"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        plan = build_plan(graph, "tuple", dtypes)
        t["build_plan"] = time.perf_counter() - t0
    t["kernels"] = len(plan.kernels)
    t["sources"] = len({k.source for k in plan.kernels})
    if pipelines:
        from kernelwright.runtime import default_device
        dev = default_device()
        t0 = time.perf_counter()
        dev.pipelines([(k.source, k.trusted) for k in plan.kernels])
        t["pipelines"] = time.perf_counter() - t0
    return t


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
    ap.add_argument("--decomposed", action="store_true",
                    help="let torch.export decompose the recurrent ops (the slow path)")
    ap.add_argument("--profile", default=None, help="cProfile the last case into this file")
    args = ap.parse_args()
    os.environ.setdefault("KERNELWRIGHT_TUNE", "off")
    warnings.filterwarnings("ignore")
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
        t = stages(Flat(rnn).eval(), x, args.pipelines, not args.decomposed)
        if prof:
            prof.disable()
            prof.dump_stats(args.profile)
        times = " ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in t.items())
        print(f"{kind} seq {seq} layers {layers}: {times}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
