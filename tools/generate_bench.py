"""Benchmark: text generation with kernelwright.generate against transformers' own
`generate` with a static cache (Mamba: its default), eager and through torch.compile, in
one run on one GPU (issue 41's figures; not a test).

    python tools/generate_bench.py [--model smollm2|olmoe|whisper-tiny|mamba|llava]
                                   [--num-beams K]
                                   [--dtype float32|bfloat16] [--contexts 512,2048]
                                   [--new-tokens 32] [--reps 3]
                                   [--torch-compile-mode default|reduce-overhead|none]
                                   [--out baselines/generate.json]
    python tools/generate_bench.py --tiny --torch-compile-mode none   # a small config

The workload (`--model`, WORKLOADS) is a real model's transformers configuration with
random weights from a fixed seed (no download; `--tiny`: a two-layer one of the same
family), batch 1:
  smollm2       SmolLM2-135M (LlamaConfig); a prompt of C random tokens (the default)
  olmoe         OLMoE-1B-7B-0924 (OlmoeConfig: 16 layers of 64 experts, 8 a token; 6.9B
                parameters, 27.7 GB in fp32: the full config fits an 80 GB GPU with one
                copy each side at a time, where Qwen3-MoE's smallest, 30B-A3B, would
                not); a prompt of C random tokens
  whisper-tiny  Whisper tiny (WhisperConfig, no suppressed tokens: both sides take the
                plain argmax); C frames of random input features (30 s of audio: 3000,
                the encoder's whole window), the decoder continuing its 4 task tokens
                (start, English, transcribe, no timestamps); transformers 5.25 runs
                Whisper's generate on a static cache too (an EncoderDecoderCache of
                StaticCaches, greedy and beam search)
  mamba         Mamba-130M (MambaConfig of state-spaces/mamba-130m-hf: 24 layers, hidden
                768, state 16, expand 2, conv 4, vocab 50280); a prompt of C random
                tokens (default 64,512: kernelwright's prompt plan runs transformers'
                scan loop as one recurrence kernel a layer, GraphBuilder.
                linear_recurrences; the loop is still traced and lowered a token at a
                time, about 3 minutes of planning at 512 tokens on a 2-core host).
                transformers' reference takes its default cache (a DynamicCache
                of LinearAttentionLayers: per layer the convolution and SSM states, the
                layers "static" would give too) and its eager forward runs its own
                PyTorch scan unless causal_conv1d and mamba_ssm are installed (the JSON's
                `torch_fast_path`)
  llava         LLaVA-style (LlavaConfig): openai/clip-vit-base-patch16's vision tower
                (ViT-B/16 at 224 px: 196 image features, the second-last layer's, CLS
                dropped), LLaVA-1.5's two-layer GELU projector, SmolLM2-135M's Llama
                (its vocabulary and an image token, padded to a multiple of 64 as LLaVA
                adds its image token: 49216); one random image and C prompt tokens, 4
                text tokens, the image's 196 placeholders, C - 200 text tokens
For each context C the prompt is continued by `--new-tokens` N tokens (end tokens
ignored), greedily or, with `--num-beams` K > 1, by beam search (transformers' with its
default length penalty and early stopping, the best beam returned; a step runs K rows),
a static cache holding the prompt and N positions on every side (Mamba's: its states;
transformers' per side in `cache`, the class its generate gave the model's forward).
The model is built once (its weights drawn on PyTorch's device), converted to `--dtype`
and held on the host before anything runs; kernelwright runs every context first (its
plans dropped after each), then the model moves to PyTorch's device for eager, then torch.compile (a
fresh compile per context). Each side is timed by the wall clock of whole generate
calls (median of `--reps`, after a warm-up that compiles):
`prefill_ms` is a call making one token (the prompt's forward, the encoder's with it,
and its logits), and `decode_tokens_per_s` is (N - 1) / (time of N tokens - time of
one), the decode steps alone, tokens of each sequence (null where N tokens took no
longer than one: a tiny model's noise); kernelwright's `decode_step` says where a decode
step's time goes (`decode_profile`). kernelwright runs on the default wgpu device,
PyTorch on CUDA (on the CPU, and labelled so, where PyTorch sees no GPU); fp32 runs with
TF32 off on both. torch.compile compiles the model's forward (`--torch-compile-mode`,
default by default: reduce-overhead, transformers' recipe for a static cache with CUDA
graphs, failed on an H100 with torch 2.11 and transformers 5.25, "accessing tensor
output of CUDAGraphs that has been overwritten by a subsequent run", from the cache's
in-place `cumulative_length.add_`; a failing side is recorded with its error). Reported
per context and side: those times, compile times (kernelwright: its prefill, decode and
beam reorder plans, from their compile; PyTorch's: the warm-up calls' wall time), the
memory (kernelwright: the bytes its plans allocate on the device,
`kernelwright.generate.device_bytes`; PyTorch: torch.cuda.max_memory_allocated over its
calls), and whether kernelwright's and torch.compile's tokens equal eager's. The JSON
names the workload, the model, the generation mode and the dtype each side's weights
were held in.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
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


def random_prompt(config, context: int, dtype: torch.dtype, generator, task_ids) -> tuple:
    """A decoder-only model's prompt: `context` random token ids (not its first three)."""
    return random_ids(config, context, generator), {}


def random_ids(config, n: int, generator) -> torch.Tensor:
    """[1, n] random token ids of the (text) model's vocabulary, not its first three nor
    an image placeholder token."""
    vocab = config.get_text_config().vocab_size
    image = getattr(config, "image_token_id", None)
    ids = torch.randint(3, vocab - (image is not None), (1, n), generator=generator)
    return ids + (ids >= image).long() if image is not None else ids


IMAGE_AFTER = 4  # a LLaVA prompt's text tokens before its image (as "<s>USER: <image>...")


def image_prompt(config, context: int, dtype: torch.dtype, generator, task_ids) -> tuple:
    """A LLaVA-style model's: one random image (pixel_values in the model's dtype) and
    `context` prompt tokens, IMAGE_AFTER random text tokens, the image's placeholders (as
    many as its features, as LlavaProcessor expands its image token), random text tokens
    after them."""
    vision = config.vision_config
    features = ((vision.image_size // vision.patch_size) ** 2
                + (config.vision_feature_select_strategy == "full"))  # CLIP's class token
    if context <= IMAGE_AFTER + features:
        raise ValueError(f"a prompt of {context} tokens has no text after its image's "
                         f"{features} placeholder tokens and {IMAGE_AFTER} before them: "
                         f"--contexts {IMAGE_AFTER + features + 1} or more")
    text = random_ids(config, context - features, generator)
    ids = torch.cat([text[:, :IMAGE_AFTER], torch.full((1, features), config.image_token_id),
                     text[:, IMAGE_AFTER:]], dim=1)
    pixels = torch.randn(1, vision.num_channels, vision.image_size, vision.image_size,
                         generator=generator).to(dtype)
    return ids, {"pixel_values": pixels}


def audio_prompt(config, context: int, dtype: torch.dtype, generator, task_ids) -> tuple:
    """Whisper's: `context` frames of random input features in the model's dtype (the
    encoder takes its whole window, 2 * max_source_positions frames, and no other), the
    decoder continuing its start token and `task_ids`."""
    window = 2 * config.max_source_positions
    if context != window:
        raise ValueError(f"Whisper's encoder takes {window} frames of input features (its "
                         f"30-second window), not {context}: --contexts {window}")
    features = torch.randn(1, config.num_mel_bins, context, generator=generator).to(dtype)
    start = [config.decoder_start_token_id, *task_ids]
    return features, {"decoder_input_ids": torch.tensor([start])}


@dataclass(frozen=True)
class Workload:
    """A benchmark workload: transformers' `config` class and `model` class (names in
    transformers) with the keyword arguments of the real configuration (`full`) and of
    a small one of the same family (`tiny`), the default contexts of each and what a
    context counts, and `prompt(config, context, dtype, generator, task_ids)`: the input
    both sides' generate take first and the keyword arguments they take with it
    (`task_ids`: the full config's or the tiny one's, ids the decoder's prompt holds).
    `cache` is the cache_implementation that transformers' generate takes on the PyTorch
    sides (None: its default), `fast_path` the packages whose kernels its eager forward
    takes in place of its own PyTorch code where they are installed."""

    model: str  # what the JSON's "model" calls it
    config: str
    model_class: str
    full: dict
    tiny: dict
    contexts: tuple[str, str]  # --contexts' default: full, --tiny
    context_unit: str
    prompt: Callable = random_prompt
    task_ids: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    cache: str | None = "static"
    fast_path: tuple[str, ...] = ()


WORKLOADS = {
    "smollm2": Workload(
        "SmolLM2-135M config (random weights)", "LlamaConfig", "LlamaForCausalLM",
        full=dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                  num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                  max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
                  tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
        tiny=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                  max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=1,
                  eos_token_id=2),
        contexts=("512,2048", "16,40"), context_unit="prompt tokens"),
    "olmoe": Workload(
        "OLMoE-1B-7B-0924 config (random weights)", "OlmoeConfig", "OlmoeForCausalLM",
        full=dict(hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
                  num_attention_heads=16, num_key_value_heads=16, num_experts=64,
                  num_experts_per_tok=8, vocab_size=50304, max_position_embeddings=4096,
                  rope_theta=10000.0, rms_norm_eps=1e-5, clip_qkv=None,
                  norm_topk_prob=False, tie_word_embeddings=False, pad_token_id=1,
                  bos_token_id=None, eos_token_id=50279),
        tiny=dict(hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, num_experts=4,
                  num_experts_per_tok=2, vocab_size=128, max_position_embeddings=256,
                  tie_word_embeddings=False, pad_token_id=1, bos_token_id=None,
                  eos_token_id=127),
        contexts=("512,2048", "16,40"), context_unit="prompt tokens"),
    "whisper-tiny": Workload(
        "Whisper tiny config (random weights)", "WhisperConfig",
        "WhisperForConditionalGeneration",
        full=dict(vocab_size=51865, num_mel_bins=80, encoder_layers=4, decoder_layers=4,
                  encoder_attention_heads=6, decoder_attention_heads=6, d_model=384,
                  encoder_ffn_dim=1536, decoder_ffn_dim=1536, max_source_positions=1500,
                  max_target_positions=448, decoder_start_token_id=50258, pad_token_id=50257,
                  bos_token_id=50257, eos_token_id=50257, begin_suppress_tokens=None,
                  suppress_tokens=None),
        tiny=dict(vocab_size=160, num_mel_bins=80, encoder_layers=2, decoder_layers=2,
                  encoder_attention_heads=4, decoder_attention_heads=4, d_model=64,
                  encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=16,
                  max_target_positions=64, decoder_start_token_id=150, pad_token_id=151,
                  bos_token_id=151, eos_token_id=152, begin_suppress_tokens=None,
                  suppress_tokens=None),
        contexts=("3000", "32"), context_unit="audio frames (input features)",
        prompt=audio_prompt, task_ids=((50259, 50359, 50363), (153, 154, 155))),
    "mamba": Workload(
        "Mamba-130M config (state-spaces/mamba-130m-hf, random weights)", "MambaConfig",
        "MambaForCausalLM",
        full=dict(hidden_size=768, intermediate_size=1536, num_hidden_layers=24,
                  state_size=16, expand=2, conv_kernel=4, time_step_rank=48,
                  vocab_size=50280, layer_norm_epsilon=1e-5, use_bias=False,
                  use_conv_bias=True, residual_in_fp32=True, tie_word_embeddings=True,
                  initializer_range=0.1, bos_token_id=0, eos_token_id=0, pad_token_id=0),
        tiny=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, state_size=8,
                  expand=2, conv_kernel=4, vocab_size=128, initializer_range=1.0,
                  bos_token_id=0, eos_token_id=0, pad_token_id=0),
        contexts=("64,512", "16,40"), context_unit="prompt tokens", cache=None,
        fast_path=("causal_conv1d", "mamba_ssm")),
    "llava": Workload(
        "LLaVA-style: CLIP ViT-B/16 at 224 px (openai/clip-vit-base-patch16's vision "
        "tower) and SmolLM2-135M's Llama (random weights)", "LlavaConfig",
        "LlavaForConditionalGeneration",
        full=dict(vision_config=dict(model_type="clip_vision_model", hidden_size=768,
                                     intermediate_size=3072, num_hidden_layers=12,
                                     num_attention_heads=12, image_size=224, patch_size=16,
                                     projection_dim=512, hidden_act="quick_gelu",
                                     layer_norm_eps=1e-5),
                  text_config=dict(model_type="llama", hidden_size=576,
                                   intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3,
                                   vocab_size=49216, max_position_embeddings=8192,
                                   rope_theta=100000.0, rms_norm_eps=1e-5,
                                   tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
                  image_token_index=49152, vision_feature_layer=-2,
                  vision_feature_select_strategy="default", projector_hidden_act="gelu",
                  image_seq_length=196, tie_word_embeddings=True),
        tiny=dict(vision_config=dict(model_type="clip_vision_model", hidden_size=32,
                                     intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, image_size=32, patch_size=8,
                                     projection_dim=32),
                  text_config=dict(model_type="llama", hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=128,
                                   max_position_embeddings=256, initializer_range=0.2,
                                   bos_token_id=1, eos_token_id=2),
                  image_token_index=120, image_seq_length=16),
        contexts=("256,1024", "24,40"),
        context_unit="prompt tokens (an image's placeholders among them: 196, --tiny 16)",
        prompt=image_prompt),
}


def make_model(tiny: bool, dtype: torch.dtype, workload: str = "smollm2",
               device: str = "cpu") -> torch.nn.Module:
    """The workload's model on the host, the same weights at every call on one kind of
    device (seeded): its random weights drawn on `device`, then moved to the host (the
    host's generator is one thread: about 140M values a second on the CI machine, a
    minute for OLMoE's 6.9B, where a GPU takes moments)."""
    spec = WORKLOADS[workload]
    torch.manual_seed(0)
    config = getattr(transformers, spec.config)(**(spec.tiny if tiny else spec.full))
    with torch.device(device):
        model = getattr(transformers, spec.model_class)(config).eval().to(dtype).cpu()
    if device == "cuda":
        torch.cuda.empty_cache()  # its blocks back, for kernelwright's device memory
    return model


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


def continued(inputs: torch.Tensor, kwargs: dict) -> int:
    """The length of the ids generation continues: the decoder's prompt, else the input's."""
    return kwargs.get("decoder_input_ids", inputs).shape[1]


def ours(model: torch.nn.Module, inputs: torch.Tensor, kwargs: dict, new: int,
         reps: int, beams: int) -> tuple:
    """kernelwright.generate's figures, from plans compiled for this prompt alone
    (dropped after: the next context's memory is its own)."""
    generation._PLANS.pop(model, None)
    length = continued(inputs, kwargs) + new

    def run(n: int) -> torch.Tensor:
        return kernelwright.generate(model, inputs, max_new_tokens=n, max_length=length,
                                     eos_token_id=[], progress=None, num_beams=beams,
                                     **kwargs)

    try:
        row, tokens, _ = figures(run, reps, new, lambda: None)
        plans = {key: plan for cache in generation._PLANS[model].values()
                 for key, plan in cache.plans.items()}
        kinds = {1: "decode", "reorder": "reorder"}
        row["compile_s"] = {}
        for key, plan in plans.items():  # every prompt bucket's plan counts as prefill
            kind = kinds.get(key, "prefill")
            row["compile_s"][kind] = row["compile_s"].get(kind, 0.0) + plan.compile_seconds
        row["device_bytes"] = kernelwright.generate.device_bytes(model)
        row["plans"] = kernelwright.generate.compiled_plans(model)
        row["weights_held_as"] = sorted({str(a.dtype) for p in plans.values()
                                         for a in p.plan.constants.values()
                                         if a.dtype.kind == "f" or a.dtype.str == "<u2"})
        row["decode_step"] = decode_profile(plans[1], length - 1, reps)
    finally:
        generation._PLANS.pop(model, None)
        gc.collect()
    return row, tokens


def decode_profile(decode, position: int, reps: int) -> dict:
    """Where a decode step's time goes: the GPU time of its kernels in one compute pass
    (timestamps around the pass, median of 5 * reps), their number, and each kernel's
    own time (one pass per kernel, median of `reps` runs) summed by kernel name. The
    gap between a token's wall time and `gpu_pass_ms` is the host's and the read-back's
    share; between `gpu_pass_ms` and `sum_of_kernels_ms`, the barriers between kernels.
    The step's inputs are zeros of its compiled shapes, the cache slot (its second
    input, on both paths) at `position`."""
    args = [torch.zeros(spec.shape, dtype=getattr(torch, spec.torch_dtype))
            for spec in decode.plan.inputs]
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


def theirs(model: torch.nn.Module, inputs: torch.Tensor, kwargs: dict, new: int, reps: int,
           beams: int, device: str, compile_mode: str | None, cache: str | None) -> tuple:
    """transformers' generate with the `cache` implementation (None: its default) on the
    model (moved to `device`), eager or its forward compiled (afresh: no shapes of another
    context's compile kept); the row names the cache that generate gave the model's
    forward (what it returns may be another: Whisper's rebuilds its cache dynamic)."""
    if compile_mode is not None:
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward, mode=compile_mode, fullgraph=True)
    inputs = inputs.to(device)
    kwargs = {k: v.to(device) for k, v in kwargs.items()}
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        gc.collect()  # the side before's compiled forward (torch.compile's wrapper holds a
        torch.cuda.empty_cache()  # cycle) and its blocks back
        torch.cuda.reset_peak_memory_stats()

    def run(n: int) -> torch.Tensor:
        with torch.no_grad():
            return model.generate(inputs, max_new_tokens=n, do_sample=False, num_beams=beams,
                                  cache_implementation=cache, return_dict_in_generate=True,
                                  **kwargs).sequences

    given = []  # the cache of the forward's last call (its layers made by then)

    def look(module, args, kw) -> None:
        given[:] = [kw.get("cache", kw.get("past_key_values"))]

    hook = model.register_forward_pre_hook(look, with_kwargs=True)

    try:
        row, tokens, warm_s = figures(run, reps, new, sync)
    finally:
        model.__dict__.pop("forward", None)  # the class's forward again
        hook.remove()
    row["compile_s"] = warm_s if compile_mode is not None else None
    row["cache"] = cache_kind(given[0]) if given else None
    row["peak_bytes"] = torch.cuda.max_memory_allocated() if cuda else None
    row["weights_held_as"] = [str(next(model.parameters()).dtype).replace("torch.", "")]
    return row, tokens


def cache_kind(cache) -> str | None:
    """What transformers' generate held its cache in: the class, and its layers' classes
    (an encoder-decoder cache's: those of its two caches)."""
    if cache is None:
        return None
    inner = [cache_kind(getattr(cache, part)) for part in
             ("self_attention_cache", "cross_attention_cache") if hasattr(cache, part)]
    inner = inner or sorted({type(layer).__name__ for layer in getattr(cache, "layers", ())})
    return f"{type(cache).__name__}({', '.join(inner)})" if inner else type(cache).__name__


def first_difference(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """The first position where two token sequences differ (None: equal)."""
    if a.shape == b.shape and torch.equal(a, b):
        return None
    n = min(a.shape[1], b.shape[1])
    diff = (a[:, :n] != b[:, :n]).any(0).nonzero()
    return int(diff[0]) if len(diff) else n


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(WORKLOADS), default="smollm2",
                    help="the workload (module docstring); default smollm2")
    ap.add_argument("--num-beams", type=int, default=1,
                    help="beam search with this many beams on both sides; 1: greedy")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--contexts", default=None,
                    help="prompt lengths (Whisper: input frames), comma separated (default "
                    "512,2048, Whisper 3000, Mamba 64,512, LLaVA 256,1024; --tiny 16,40, "
                    "Whisper 32, "
                    "LLaVA 24,40)")
    ap.add_argument("--new-tokens", type=int, default=None, help="default 32; --tiny 6")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--torch-compile-mode", default="default",
                    help="torch.compile's mode for the model's forward; none: skip it")
    ap.add_argument("--tiny", action="store_true", help="a two-layer config (the test's)")
    ap.add_argument("--out", default="baselines/generate.json")
    args = ap.parse_args(argv)
    if args.num_beams < 1:
        ap.error(f"--num-beams must be at least 1, got {args.num_beams}")
    spec = WORKLOADS[args.model]
    contexts = [int(c) for c in (args.contexts or spec.contexts[args.tiny]).split(",")]
    new = args.new_tokens or (6 if args.tiny else 32)
    dtype = getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    keep_gpu_awake()  # Vulkan ran 3x slow on the H200 until a CUDA context was open
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    mode = None if args.torch_compile_mode == "none" else args.torch_compile_mode
    t0 = time.perf_counter()
    model = make_model(args.tiny, dtype, args.model, device)
    prompts = {c: spec.prompt(model.config, c, dtype, torch.Generator().manual_seed(c),
                              spec.task_ids[args.tiny])
               for c in contexts}  # each checked before anything is timed
    out = {"workload": args.model,
           "model": f"tiny {args.model}" if args.tiny else spec.model,
           "mode": "greedy" if args.num_beams == 1 else f"beam search, {args.num_beams} beams",
           "num_beams": args.num_beams, "config": spec.tiny if args.tiny else spec.full,
           "parameters": sum(p.numel() for p in model.parameters()),
           "model_build_s": time.perf_counter() - t0, "dtype": args.dtype, "batch": 1,
           "new_tokens": new, "context_unit": spec.context_unit, "reps": args.reps,
           "kernelwright_device": default_device().description,
           "torch_device": torch.cuda.get_device_name() if cuda else "cpu (wall clock)",
           "torch_compile_mode": mode, "torch_cache_implementation": spec.cache,
           "torch_fast_path": {name: importlib.util.find_spec(name) is not None
                               for name in spec.fast_path},
           "torch": torch.__version__,
           "transformers": transformers.__version__, "host": platform.node(),
           "contexts": {str(c): {} for c in contexts}}
    rows = out["contexts"]

    def save() -> None:  # after each side: a run cut short keeps what it measured
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1, default=_plain))

    def report(side: str, context: int) -> None:
        print(json.dumps({"context": context, side: rows[str(context)][side]},
                         default=_plain), flush=True)
        save()

    got, want = {}, {}
    for context in contexts:  # the model's weights on the host while kernelwright runs
        rows[str(context)]["kernelwright"], got[context] = ours(
            model, *prompts[context], new, args.reps, args.num_beams)
        report("kernelwright", context)
    model.generation_config.eos_token_id = None  # the same N tokens on every side
    model.generation_config.pad_token_id = 0
    model.to(device)
    for context in contexts:
        row = rows[str(context)]
        row["eager"], want[context] = theirs(model, *prompts[context], new, args.reps,
                                             args.num_beams, device, None, spec.cache)
        mine = row["kernelwright"]
        mine["first_token_differing"] = first_difference(got[context], want[context])
        mine["tokens_equal_eager"] = mine["first_token_differing"] is None
        compare(row, "eager")
        report("eager", context)
    for context in contexts if mode is not None else ():
        row = rows[str(context)]
        try:
            row["torch_compile"], theirs_got = theirs(model, *prompts[context], new,
                                                      args.reps, args.num_beams, device, mode,
                                                      spec.cache)
            row["torch_compile"]["tokens_equal_eager"] = (
                first_difference(theirs_got, want[context]) is None)
            compare(row, "torch_compile")
        except Exception as exc:  # the baseline's failure is a finding, not a crash
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            row["torch_compile"] = {"mode": mode,
                                    "error": f"{type(exc).__name__}: {first}"[:300]}
        report("torch_compile", context)
    return out


def compare(row: dict, side: str) -> None:
    """kernelwright's decode rate and prefill speed over `side`'s (above 1: faster)."""
    mine = row["kernelwright"]
    rates = mine["decode_tokens_per_s"], row[side]["decode_tokens_per_s"]
    mine[f"decode_vs_{side}"] = rates[0] / rates[1] if None not in rates else None
    mine[f"prefill_vs_{side}"] = row[side]["prefill_ms"] / mine["prefill_ms"]


def _plain(x):
    """JSON for numpy numbers."""
    return x.item() if isinstance(x, np.generic) else str(x)


if __name__ == "__main__":
    main()
