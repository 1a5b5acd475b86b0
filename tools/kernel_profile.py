"""Where a suite problem's time goes: each kernel's GPU time (timestamps around each
kernel, median of 5 calls) summed by kernel name, the whole call's time and PyTorch
eager's (CUDA events), for bundled problems at full size, under compiler variants.

    python tools/kernel_profile.py --only level3/023,level3/015 [--out FILE.json]
        [--variants '{"base": {}, "k1024": {"kernels.cuts.SPLIT_K_MIN": 1024}}']

A variant sets module constants of kernelwright (dotted paths under the package) while
its problem compiles: a way to compare a heuristic's settings on whole problems before
changing the default. Run on the GPU machine (tools/h200_session.sh or directly).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
os.environ.setdefault("KERNELWRIGHT_TUNE", "off")


def eager_ms(model, inputs, cuda: bool) -> float:
    import torch

    dev = "cuda" if cuda else "cpu"
    model = model.to(dev)
    args = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in inputs]
    times = []
    with torch.no_grad():
        for i in range(13):
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                model(*args)
                b.record()
                torch.cuda.synchronize()
                ms = a.elapsed_time(b)
            else:
                t0 = time.perf_counter()
                model(*args)
                ms = (time.perf_counter() - t0) * 1e3
            if i >= 3:
                times.append(ms)
    model.cpu()
    return statistics.median(times)


def profile(compiled, inputs) -> dict:
    total = statistics.median(compiled.gpu_times_ms([inputs], 15))
    runs = [compiled.kernel_times_ms(*inputs) for _ in range(5)]
    per = [statistics.median(r[i][1] for r in runs) for i in range(len(runs[0]))]
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for (name, _), t in zip(runs[0], per):
        by_name[name][0] += 1
        by_name[name][1] += t
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    return {"total_ms": total, "kernels": len(per), "sum_of_kernels_ms": sum(per),
            "by_name": [{"name": k, "count": c, "ms": round(t, 4)} for k, (c, t) in top]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", required=True, help="comma-separated problem name prefixes")
    ap.add_argument("--variants", default='{"default": {}}')
    ap.add_argument("--size", default="full")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import torch

    import kernelwright
    from kernelwright import suite
    from kernelwright.harness import problems
    from kernelwright.harness.timing import keep_gpu_awake

    cuda = torch.cuda.is_available()
    # strict fp32 as the suite's reference (harness.worker): cuDNN's convolutions and RNNs
    # would otherwise use TF32, which PyTorch allows them by default
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    keep_gpu_awake()
    variants = json.loads(args.variants)
    for settings in variants.values():  # a misspelt constant would change nothing
        for path in settings:
            mod, attr = path.rsplit(".", 1)
            if not hasattr(importlib.import_module(f"kernelwright.{mod}"), attr):
                raise SystemExit(f"--variants: kernelwright.{mod} has no constant {attr}")
    found = {p.name: p for p in problems.discover(suite.__path__[0])}
    out = {"device": kernelwright.runtime.default_device().description,
           "torch": torch.__version__, "variants": variants, "problems": {}}
    for prefix in args.only.split(","):
        names = [n for n in found if n.startswith(prefix)]
        if not names:
            raise SystemExit(f"no bundled problem starts with {prefix!r}")
        for name in names:
            loaded = problems.load(found[name], args.size)
            model, inputs = loaded.build_model(0), loaded.inputs(0)
            row = {"eager_ms": eager_ms(model, inputs, cuda)}
            for vname, settings in variants.items():
                saved = []
                for path, value in settings.items():
                    mod, attr = path.rsplit(".", 1)
                    m = importlib.import_module(f"kernelwright.{mod}")
                    saved.append((m, attr, getattr(m, attr)))
                    setattr(m, attr, value)
                try:
                    row[vname] = profile(kernelwright.compile(model, inputs), inputs)
                except Exception as e:  # a variant that fails is reported, not fatal
                    row[vname] = {"error": f"{type(e).__name__}: {e}"[:500]}
                finally:
                    for m, attr, value in saved:
                        setattr(m, attr, value)
                r = row[vname]
                said = r.get("error") or (
                    f"{r['total_ms']:.3f} ms, {r['kernels']} kernels; top: " + ", ".join(
                        f"{k['name']} x{k['count']} {k['ms']:.3f}" for k in r["by_name"][:6]))
                print(f"{name} [{vname}] eager {row['eager_ms']:.3f} ms, kernelwright {said}",
                      flush=True)
            out["problems"][name] = row
            if args.out:
                Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
