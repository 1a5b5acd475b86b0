"""Benchmark: text generation with kernelwright.generate against transformers' own
`generate` with a static cache, eager and through torch.compile, in one run on one GPU
(issue 41's figures; not a test).

    python tools/generate_bench.py [--dtype float32|bfloat16] [--contexts 512,2048]
                                   [--new-tokens 32] [--reps 3]
                                   [--torch-compile-mode default|reduce-overhead|none]
                                   [--out baselines/generate.json]
    python tools/generate_bench.py --tiny --torch-compile-mode none   # a small config

The model is SmolLM2-135M's configuration (transformers' LlamaConfig, random weights
from a fixed seed; `--tiny`: a two-layer one), batch 1, greedy. For each context C a
prompt of C random tokens is continued by `--new-tokens` N tokens (end tokens ignored),
the static cache holding C + N positions on every side. Each side is timed by the wall
clock of whole generate calls (median of `--reps`, after a warm-up that compiles):
`prefill_ms` is a call making one token (the prompt's forward and its logits), and
`decode_tokens_per_s` is (N - 1) / (time of N tokens - time of one), the decode steps
alone (null where N tokens took no longer than one: a tiny model's noise); kernelwright's
`decode_step` says where a decode step's time goes (`decode_profile`). kernelwright
runs on the default wgpu device, PyTorch on CUDA (on the CPU, and labelled so, where
PyTorch sees no GPU); fp32 runs with TF32 off on both. torch.compile
compiles the model's forward (`--torch-compile-mode`, default by default:
reduce-overhead, transformers' recipe for a static cache with CUDA graphs, failed on an
H100 with torch 2.11 and transformers 5.25, "accessing tensor output of CUDAGraphs that
has been overwritten by a subsequent run", from the cache's in-place
`cumulative_length.add_`; a failing side is recorded with its error). Reported per
context and side:
those times, compile times (kernelwright: its prefill and decode plans, from their
compile; PyTorch's: the warm-up calls' wall time), the memory (kernelwright: the bytes
its plans allocate on the device, `kernelwright.generate.device_bytes`; PyTorch:
torch.cuda.max_memory_allocated over its calls), and whether kernelwright's and
torch.compile's tokens equal eager's. `--dtype bfloat16` converts the model before
anything runs; the JSON records the dtype each side's weights were held in.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path

# this folder's kernels.py would stand for the `kernels` package that transformers
# imports when it finds one: the script's folder off the path before transformers loads
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import kernelwright  # noqa: E402
from kernelwright.harness.timing import keep_gpu_awake  # noqa: E402
from kernelwright.runtime import default_device  # noqa: E402

generation = importlib.import_module("kernelwright.generate")  # the module, not the function

SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                    max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
                    tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, max_position_embeddings=256,
            tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)


def make_model(tiny: bool, dtype: torch.dtype) -> torch.nn.Module:
    """The benchmark's model, the same weights at every call (seeded)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**(TINY if tiny else SMOLLM2_135M))
    return transformers.LlamaForCausalLM(config).eval().to(dtype)


def median_time(fn, reps: int, sync) -> float:
    """Median wall seconds of `reps` calls of `fn`, `sync` waiting for the device."""
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def figures(generate, reps: int, new: int, sync) -> tuple[dict, torch.Tensor, float]:
    """Prefill ms and decode tokens/s of `generate(n)` (a call making n tokens), its
    tokens at N, and the wall seconds of the warm-up calls (compiles included)."""
    t0 = time.perf_counter()
    tokens = generate(new)
    generate(1)
    sync()
    warm_s = time.perf_counter() - t0
    one = median_time(lambda: generate(1), reps, sync)
    many = median_time(lambda: generate(new), reps, sync)
    # N tokens no slower than one (a tiny model, timer noise): no decode figure, not a
    # rate from a difference of almost nothing
    rate = (new - 1) / (many - one) if many > one else None
    return ({"prefill_ms": one * 1e3, "decode_tokens_per_s": rate,
             "generate_ms": many * 1e3}, tokens.cpu(), warm_s)


def ours(tiny: bool, dtype: torch.dtype, ids: torch.Tensor, new: int, reps: int) -> tuple:
    """kernelwright.generate's figures on a fresh copy of the model (its plans alone)."""
    model = make_model(tiny, dtype)
    length = ids.shape[1] + new

    def run(n: int) -> torch.Tensor:
        return kernelwright.generate(model, ids, max_new_tokens=n, max_length=length,
                                     eos_token_id=[], progress=None)

    row, tokens, _ = figures(run, reps, new, lambda: None)
    plans = generation._PLANS[model][(ids.shape[0], length)].plans
    row["compile_s"] = {"prefill": plans[generation._bucket(ids.shape[1], length)]
                        .compile_seconds, "decode": plans[1].compile_seconds}
    row["device_bytes"] = kernelwright.generate.device_bytes(model)
    row["plans"] = kernelwright.generate.compiled_plans(model)
    row["weights_held_as"] = sorted({str(a.dtype) for p in plans.values()
                                     for a in p.plan.constants.values()
                                     if a.dtype.kind == "f" or a.dtype.str == "<u2"})
    row["decode_step"] = decode_profile(plans[1], length - 1, reps)
    return row, tokens


def decode_profile(decode, position: int, reps: int) -> dict:
    """Where a decode step's time goes: the GPU time of its kernels in one compute pass
    (timestamps around the pass, median of 5 * reps), their number, and each kernel's
    own time (one pass per kernel, median of `reps` runs) summed by kernel name. The
    gap between a token's wall time and `gpu_pass_ms` is the host's and the read-back's
    share; between `gpu_pass_ms` and `sum_of_kernels_ms`, the barriers between kernels."""
    args = generation.CacheModule.example(1, 1)
    args[1] = torch.tensor([position])
    passes = decode.gpu_times_ms([args], 5 * reps)
    runs = [decode.kernel_times_ms(*args) for _ in range(reps)]
    by_name: dict[str, list] = {}
    for i, (name, _) in enumerate(runs[0]):
        entry = by_name.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += statistics.median(r[i][1] for r in runs)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    return {"kernels": len(runs[0]), "gpu_pass_ms": statistics.median(passes),
            "sum_of_kernels_ms": sum(t for _, (_, t) in top),
            "by_name": [{"name": k, "count": c, "ms": round(t, 4)} for k, (c, t) in top[:15]]}


def theirs(tiny: bool, dtype: torch.dtype, ids: torch.Tensor, new: int, reps: int,
           device: str, compile_mode: str | None) -> tuple:
    """transformers' generate with a static cache, eager or its forward compiled."""
    model = make_model(tiny, dtype).to(device)
    model.generation_config.eos_token_id = None  # the same N tokens on every side
    model.generation_config.pad_token_id = 0
    if compile_mode is not None:
        model.forward = torch.compile(model.forward, mode=compile_mode, fullgraph=True)
    ids = ids.to(device)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        gc.collect()  # the side before's model (torch.compile's wrapper holds a cycle)
        torch.cuda.empty_cache()  # and its blocks back
        torch.cuda.reset_peak_memory_stats()

    def run(n: int) -> torch.Tensor:
        with torch.no_grad():
            return model.generate(ids, max_new_tokens=n, do_sample=False,
                                  cache_implementation="static")

    row, tokens, warm_s = figures(run, reps, new, sync)
    row["compile_s"] = warm_s if compile_mode is not None else None
    row["peak_bytes"] = torch.cuda.max_memory_allocated() if cuda else None
    row["weights_held_as"] = [str(next(model.parameters()).dtype).replace("torch.", "")]
    return row, tokens


def first_difference(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """The first position where two token sequences differ (None: equal)."""
    if a.shape == b.shape and torch.equal(a, b):
        return None
    n = min(a.shape[1], b.shape[1])
    diff = (a[:, :n] != b[:, :n]).any(0).nonzero()
    return int(diff[0]) if len(diff) else n


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--contexts", default=None,
                    help="prompt lengths, comma separated (default 512,2048; --tiny 16,40)")
    ap.add_argument("--new-tokens", type=int, default=None, help="default 32; --tiny 6")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--torch-compile-mode", default="default",
                    help="torch.compile's mode for the model's forward; none: skip it")
    ap.add_argument("--tiny", action="store_true", help="a two-layer config (the test's)")
    ap.add_argument("--out", default="baselines/generate.json")
    args = ap.parse_args(argv)
    contexts = [int(c) for c in (args.contexts or ("16,40" if args.tiny else "512,2048"))
                .split(",")]
    new = args.new_tokens or (6 if args.tiny else 32)
    dtype = getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    keep_gpu_awake()  # Vulkan ran 3x slow on the H200 until a CUDA context was open
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    mode = None if args.torch_compile_mode == "none" else args.torch_compile_mode
    config = TINY if args.tiny else SMOLLM2_135M
    out = {"model": "tiny llama" if args.tiny else "SmolLM2-135M config (random weights)",
           "config": config, "dtype": args.dtype, "batch": 1, "new_tokens": new,
           "reps": args.reps, "kernelwright_device": default_device().description,
           "torch_device": torch.cuda.get_device_name() if cuda else "cpu (wall clock)",
           "torch_compile_mode": mode, "torch": torch.__version__,
           "transformers": transformers.__version__, "host": platform.node(),
           "contexts": {}}
    for context in contexts:
        ids = torch.randint(3, config["vocab_size"], (1, context),
                            generator=torch.Generator().manual_seed(context))
        row: dict = {}
        out["contexts"][str(context)] = row

        def save() -> None:  # after each side: a run cut short keeps what it measured
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=1, default=_plain))

        row["kernelwright"], got = ours(args.tiny, dtype, ids, new, args.reps)
        save()
        row["eager"], want = theirs(args.tiny, dtype, ids, new, args.reps, device, None)
        mine = row["kernelwright"]
        mine["tokens_equal_eager"] = first_difference(got, want) is None
        mine["first_token_differing"] = first_difference(got, want)
        save()
        if mode is not None:
            try:
                row["torch_compile"], theirs_got = theirs(args.tiny, dtype, ids, new,
                                                          args.reps, device, mode)
                row["torch_compile"]["tokens_equal_eager"] = (
                    first_difference(theirs_got, want) is None)
            except Exception as exc:  # the baseline's failure is a finding, not a crash
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                row["torch_compile"] = {"mode": mode,
                                        "error": f"{type(exc).__name__}: {first}"[:300]}
        for side in ("eager", "torch_compile"):
            if side in row and "prefill_ms" in row[side]:
                rates = mine["decode_tokens_per_s"], row[side]["decode_tokens_per_s"]
                mine[f"decode_vs_{side}"] = (rates[0] / rates[1] if None not in rates
                                             else None)
                mine[f"prefill_vs_{side}"] = row[side]["prefill_ms"] / mine["prefill_ms"]
        print(json.dumps({"context": context, **row}, default=_plain), flush=True)
        save()
    return out


def _plain(x):
    """JSON for numpy numbers."""
    return x.item() if isinstance(x, np.generic) else str(x)


if __name__ == "__main__":
    main()
