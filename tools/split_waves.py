"""Large GEMMs with their plans forced (K chunks, a tail of rows, aligned copies) and their
tiles: the measurements behind the choice by waves (lower/linalg.product_plan).

    python tools/split_waves.py OUT.json CASE[,CASE...] [--chunks 1,2,3,4] [--tails 256]
                                [--align] [--tiles wide,plain]

A CASE not in tools/kernels.py named gemm_MxKxN is the product of an M x K and a K x N
matrix (any shape, e.g. gemm_24576x8192x100).

For each case of tools/kernels.py and each of the wide (kernels.matmul.MATMUL_LARGE_TILES)
and the plain (MATMUL_PLAIN_TILES) tiles, every chunk count and every tail: the plan
lower.linalg.product_plan returns forced to WavePlan(chunks=c) or WavePlan(tail=r) (chunks
1: the compiler's own rule), with aligned copies of the operands where --align; waves
off (the tiles forced through MATMUL_LARGE_TILES); GPU ms of the whole call and of each
kernel, PyTorch's in the same run, the error against PyTorch's result. The JSON is
rewritten after each setting. Run on the GPU machine."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

os.environ["KERNELWRIGHT_WAVES"] = "off"  # the settings forced below, not chosen
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import CASES, case_reference, gemm  # noqa: E402

import kernelwright  # noqa: E402
from kernelwright import kernels  # noqa: E402
from kernelwright.harness.timing import keep_gpu_awake, time_candidate  # noqa: E402
from kernelwright.lower import linalg  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("cases", help="comma-separated tools/kernels.py cases")
    ap.add_argument("--chunks", default="1,2,3,4")
    ap.add_argument("--tails", default="", help="rows of the tail, comma-separated")
    ap.add_argument("--align", action="store_true", help="copy the operands aligned")
    ap.add_argument("--tiles", default="wide,plain", help="the tile settings to force")
    args = ap.parse_args()
    names = args.cases.split(",")
    for name in names:
        shape = re.fullmatch(r"gemm_(\d+)x(\d+)x(\d+)", name)
        if name not in CASES and shape:
            CASES[name] = gemm(*(int(d) for d in shape.groups()))
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"split_waves: no case {unknown} in tools/kernels.py", file=sys.stderr)
        return 2
    keep_gpu_awake()
    rule, wide_tiles = linalg.product_plan, kernels.matmul.MATMUL_LARGE_TILES
    plans = [linalg.WavePlan(chunks=int(c), align=args.align) for c in args.chunks.split(",")]
    plans += [linalg.WavePlan(tail=int(r), align=args.align) for r in args.tails.split(",") if r]
    out = []
    try:
        for name in names:
            module, sets, ref, ref_ms = case_reference(name, 20)
            scale = ref.abs().max().item() or 1.0
            for tiles in args.tiles.split(","):
                for plan in plans:
                    kernels.matmul.MATMUL_LARGE_TILES = (wide_tiles if tiles == "wide"
                                                    else kernels.matmul.MATMUL_PLAIN_TILES)
                    forced = plan != linalg.WavePlan()
                    linalg.product_plan = _forced(rule, plan) if forced else rule
                    row = dict(case=name, tiles=tiles, chunks=plan.chunks, tail=plan.tail,
                               align=plan.align)
                    try:
                        compiled = kernelwright.compile(module, sets[0])
                        err = (compiled(*sets[0]) - ref).abs().max().item() / scale
                        ms = time_candidate(compiled, sets).median_ms
                        row.update(ms=round(ms, 4), torch_ms=round(ref_ms, 4),
                                   ratio=round(ref_ms / ms, 4), err=err,
                                   kernels=[(k.name, k.grid, k.knobs.get("BN"))
                                            for k in compiled.plan.kernels],
                                   per_kernel=[(n, round(t, 4)) for n, t
                                               in compiled.kernel_times_ms(*sets[0])])
                    except Exception as exc:  # noqa: BLE001 - recorded, the rest measured
                        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                    print(json.dumps(row), flush=True)
                    out.append(row)
                    Path(args.out).write_text(json.dumps(out, indent=1))
    finally:
        linalg.product_plan, kernels.matmul.MATMUL_LARGE_TILES = rule, wide_tiles
    return 0


def _forced(rule, plan):
    """product_plan with `plan` for the case's product (the first asked) and the rule's
    own plans for the products it makes (a tail's rows)."""
    asked = []

    def forced(*a, **k):
        asked.append(a)
        return plan if len(asked) == 1 else rule(*a, **k)
    return forced


if __name__ == "__main__":
    raise SystemExit(main())
