"""The staircase behind a device's waves (tune/waves.py), written out: the time of the
first T workgroups of one product of a single tile row, for each T of a range, for
both large-product tile settings, and the slots each step says.

    python tools/wave_probe.py [--k 1024] [--tiles 4:640:4] [--knobs JSON] [--out FILE]

--knobs: a JSON list of matmul knob settings, each over the plain tiles' defaults
(e.g. '[{"BK": 8}, {"DB": 1}]'), probed after the two default settings: how many
workgroups of each setting run at once (its workgroup memory, registers).

kernelwright measures the same staircase once per device (tune.waves.device_waves) to choose
the tiles and K chunks of large products; this script shows it, over a longer K and a
wider range where asked. Run on the GPU machine; on the software driver it only checks
that the script runs (--tiles 4:12:4 --k 32)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import kernelwright
from kernelwright.harness.timing import keep_gpu_awake
from kernelwright.kernels import MATMUL_LARGE_TILES, MATMUL_PLAIN_TILES
from kernelwright.tune import waves


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=waves.PROBE_K, help="K of every product")
    ap.add_argument("--tiles", default=f"{waves.PROBE_STEP}:{waves.PROBE_MAX_TILES}:"
                    f"{waves.PROBE_STEP}", help="FROM:TO:STEP tile counts")
    ap.add_argument("--knobs", default="[]", help="JSON list of plain-tile knob settings")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    try:
        lo, hi, step = (int(x) for x in args.tiles.split(":"))
    except ValueError:
        print("wave_probe: --tiles is FROM:TO:STEP", file=sys.stderr)
        return 2
    if not 1 <= lo <= hi or step < 1 or args.k < 1:
        print("wave_probe: --tiles needs 1 <= FROM <= TO and STEP >= 1, --k at least 1",
              file=sys.stderr)
        return 2
    keep_gpu_awake()
    dev = kernelwright.runtime.default_device()
    waves.PROBE_K, waves.PROBE_MAX_TILES = args.k, hi
    out = {"device": dev.description, "k": args.k, "settings": []}
    settings = [(MATMUL_LARGE_TILES, {}), (MATMUL_PLAIN_TILES, {})]
    settings += [(MATMUL_PLAIN_TILES, k) for k in json.loads(args.knobs)]
    for tiles, knobs in settings:
        time_tiles, most = waves.probe(dev, tiles, knobs)
        counts = list(range(lo, most + 1, step))
        time_tiles(most)  # warm up
        times = [time_tiles(t) for t in counts]
        for t, ms in zip(counts, times):
            print(f"{tiles} {knobs}  {t:5d} tiles  {ms:8.4f} ms", flush=True)
        first = (waves.staircase_first_step(counts, times) if len(counts) >= 8 else None)
        print(f"{tiles} {knobs}: " + (f"steps every {first} workgroups (to the step {step})"
                                      if first else "no clean staircase"), flush=True)
        out["settings"].append({"tiles": list(tiles), "knobs": knobs, "first_step_after": first,
                                "rows": [{"tiles": t, "ms": round(ms, 4)}
                                         for t, ms in zip(counts, times)]})
    print(f"device_waves: {waves.measure_waves(dev)}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
