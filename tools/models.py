"""Benchmark: compile time and time per call of small whole models, kernelwright
against PyTorch eager in the same run (issue 2's figures; not a test).

    python tools/models.py [--size full|small] [--reps 50] [--out baselines/models.json]

Models come from the bundled suite (level 3): an MLP, a CNN (conv -> batch norm ->
relu -> pool -> linear) and a transformer encoder block. For each it reports:
compile_s (capture + plan + pipeline creation, wall clock, in this process after a
warm-up compile of a tiny module so that one-off imports are not counted),
kernelwright GPU time per call (wgpu timestamps, median), the wall time of a whole
call (upload + kernels + readback), PyTorch eager time (CUDA events when CUDA is
present, fp32 with TF32 off; CPU wall clock otherwise, labelled), and the ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import kernelwright

SUITE = Path(__file__).resolve().parents[1] / "src" / "kernelwright" / "suite" / "level3"
MODELS = ["001_deep_mlp.py", "003_small_cnn.py", "006_transformer_encoder_block.py"]


def load(path: Path, size: str):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    vars(mod).update(mod.SIZES[size])
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).eval()
    return model, mod.get_inputs


def time_torch(model, inputs, reps: int) -> tuple[float, str]:
    with torch.no_grad():
        if torch.cuda.is_available():
            model = model.cuda()
            inputs = [x.cuda() for x in inputs]
            for _ in range(5):
                model(*inputs)
            times = []
            for _ in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                model(*inputs)
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
            return statistics.median(times), f"cuda:{torch.cuda.get_device_name()}"
        for _ in range(2):
            model(*inputs)
        times = []
        for _ in range(max(3, reps // 10)):
            t0 = time.perf_counter()
            model(*inputs)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times), "cpu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="full", choices=["full", "small"])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default="baselines/models.json")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    dev = kernelwright.runtime.default_device()
    # Warm-up: the first torch.export in a process pays for imports (~seconds).
    kernelwright.compile(torch.nn.Linear(3, 3).eval(), [torch.randn(2, 3)])
    rows = []
    for name in MODELS:
        model, get_inputs = load(SUITE / name, args.size)
        inputs = get_inputs()
        t0 = time.perf_counter()
        plan = kernelwright.plan_module(model, inputs)
        t1 = time.perf_counter()
        compiled = kernelwright.CompiledModule(plan, dev)
        t2 = time.perf_counter()
        with torch.no_grad():
            expected = model(*inputs)
        got = compiled(*inputs, poison=True)
        err = (got - expected).abs().max().item()
        ok = torch.allclose(got, expected, atol=1e-4, rtol=1e-4)
        sets = [get_inputs() for _ in range(3)]
        gpu = compiled.gpu_times_ms(sets, args.reps) if dev.has_timestamps else []
        walls = []
        for i in range(max(3, args.reps // 5)):
            w0 = time.perf_counter()
            compiled(*sets[i % 3])
            walls.append((time.perf_counter() - w0) * 1e3)
        ref_ms, ref_on = time_torch(model, inputs, args.reps)
        kw_ms = statistics.median(gpu) if gpu else statistics.median(walls)
        row = dict(model=name[:-3], size=args.size, correct=ok, max_abs_err=err,
                   kernels=len(plan.kernels), capture_plan_s=round(t1 - t0, 3),
                   pipelines_s=round(t2 - t1, 3), compile_s=round(t2 - t0, 3),
                   kernelwright_gpu_ms=round(kw_ms, 4),
                   kernelwright_call_wall_ms=round(statistics.median(walls), 4),
                   torch_eager_ms=round(ref_ms, 4), torch_on=ref_on,
                   speedup_vs_eager=round(ref_ms / kw_ms, 4))
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = dict(device=dev.description, python=platform.python_version(),
                  torch=torch.__version__, precision="strict fp32 (TF32 off)", models=rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
