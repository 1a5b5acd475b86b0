"""The CUDA kernels PyTorch runs for cases of tools/kernels.py: each kernel's name (which
for cuBLAS and cuDNN names its tile shape and pipeline stages), grid, block, registers
per thread, shared memory and time, from torch.profiler's trace. What the reference
does is what the templates are measured against; this says how it does it.

    python tools/reference_kernels.py [--only CASE,...] [--out FILE]

Needs CUDA. Strict fp32 (TF32 off), as tools/kernels.py."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels import CASES, MATMUL_CASES  # noqa: E402

KEEP = ("grid", "block", "registers per thread", "shared memory",
        "est. achieved occupancy %", "blocks per SM", "warps per SM")


def kernels_of(name: str, calls: int = 3) -> list[dict]:
    """The kernels of `calls` calls of the case's module (after two warm-up calls): name,
    launch shape and mean microseconds per call."""
    case = CASES[name]
    torch.manual_seed(0)
    module = case["module"].eval().cuda()
    inputs = [x.cuda() for x in case["inputs"]()]
    with torch.no_grad():
        for _ in range(2):
            module(*inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                module(*inputs)
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    found: dict[str, dict] = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        k = found.setdefault(e["name"], {"name": e["name"], "us": 0.0, "launches": 0,
                                         **{key: e.get("args", {}).get(key) for key in KEEP}})
        k["us"] += e.get("dur", 0.0) / calls
        k["launches"] += 1
    return sorted(found.values(), key=lambda k: -k["us"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(MATMUL_CASES),
                    help="comma-separated case names of tools/kernels.py")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("reference_kernels: needs CUDA", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    unknown = [n for n in args.only.split(",") if n not in CASES]
    if unknown:
        print(f"reference_kernels: unknown cases {unknown}", file=sys.stderr)
        return 2
    out = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
               sms=torch.cuda.get_device_properties(0).multi_processor_count,
               precision="strict fp32 (TF32 off)", cases={})
    for name in args.only.split(","):
        out["cases"][name] = kernels_of(name)
        for k in out["cases"][name]:
            print(f"{name}: {k['us']:9.1f} us  grid {k['grid']} block {k['block']} "
                  f"regs {k['registers per thread']} smem {k['shared memory']}  {k['name']}",
                  flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
