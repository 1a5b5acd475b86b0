"""How many workgroups of a matmul setting a GPU runs at once: the slots whose waves a
grid fills. WebGPU does not say how many SMs (compute units) a device has, and the
large products' wide tiles (templates.MATMUL_LARGE_TILES) lose where their grid ends
in a partial wave (docs/PERF.md, 2026-12-02d), so a tile choice by waves needs this
figure measured.

    python bench/wave_probe.py [--knobs JSON] [--k 4096] [--tiles 8:640:8] [--out FILE]

Times one product of a single tile row (M = BM, N = BN x T, K fixed; split-K off, the
knobs forced) for each tile count T of the range: with S slots the time stays flat
while T <= S and steps up by one wave's time at every multiple of S. Prints each time
and the counts after which it jumps by more than half the first count's time (one
wave's, where the first count fits in one wave); the first such T estimates S. Run on
the GPU machine; on the software driver it only checks that the script runs
(--tiles 1:4:1 --k 64)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

import kernelwright
from kernelwright import templates, tune
from kernelwright.bench.timing import keep_gpu_awake
from kernelwright.ops import linalg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels import Fn  # noqa: E402


def wide_knobs() -> dict:
    """The large products' default setting where matmul_wide allows it."""
    return templates.matmul_knobs(4096, 4096)


def time_tiles(knobs: dict, k: int, tiles: int, reps: int) -> float:
    """Median GPU ms of the product of one tile row and `tiles` tile columns."""
    a = torch.randn(knobs["BM"], k)
    b = torch.randn(k, knobs["BN"] * tiles)
    with tune.choosing(lambda r: {**r.default.knobs, **knobs} if r.kind == "matmul"
                       else None):
        compiled = kernelwright.compile(Fn(torch.matmul), [a, b])
    (kern,) = [x for x in compiled.plan.kernels if "matmul" in x.name]
    if kern.grid[0] * kern.grid[1] * kern.grid[2] != tiles or any(
            kern.knobs[name] != value for name, value in knobs.items()):
        raise RuntimeError(f"expected {tiles} workgroups of {knobs}, planned {kern.grid} "
                           f"of {kern.knobs}")
    compiled.gpu_times_ms([[a, b]], 3)
    return statistics.median(compiled.gpu_times_ms([[a, b]], reps))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--knobs", default=None,
                    help="matmul knobs as JSON (default: the wide tiles' setting)")
    ap.add_argument("--k", type=int, default=4096, help="K of every product")
    ap.add_argument("--tiles", default="8:640:8", help="FROM:TO:STEP tile counts")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    knobs = {**wide_knobs(), **(json.loads(args.knobs) if args.knobs else {})}
    try:
        lo, hi, step = (int(x) for x in args.tiles.split(":"))
    except ValueError:
        print("wave_probe: --tiles is FROM:TO:STEP", file=sys.stderr)
        return 2
    if not 1 <= lo <= hi or step < 1:
        print("wave_probe: --tiles needs 1 <= FROM <= TO and STEP >= 1", file=sys.stderr)
        return 2
    keep_gpu_awake()
    linalg.SPLIT_K_MAX_TILES = 0  # one workgroup per tile, whatever the grid
    dev = kernelwright.runtime.default_device()
    rows = []
    for t in range(lo, hi + 1, step):
        ms = time_tiles(knobs, args.k, t, args.reps)
        rows.append({"tiles": t, "ms": round(ms, 4)})
        print(f"{t:5d} tiles  {ms:8.4f} ms", flush=True)
    one = rows[0]["ms"]  # one wave's time while lo fits in one wave
    jumps = [prev["tiles"] for prev, cur in zip(rows, rows[1:])
             if cur["ms"] - prev["ms"] > 0.5 * one]
    print(f"jumps after {jumps}" + (f": about {jumps[0]} slots" if jumps else ""))
    if args.out:
        Path(args.out).write_text(json.dumps(
            {"device": dev.description, "knobs": knobs, "k": args.k, "rows": rows,
             "jumps_after": jumps}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
