"""Benchmark: single kernels against PyTorch on the same GPU (issue 5's figures; not a test).

    python tools/kernels.py [--only NAME] [--exclude NAME] [--conv-lowering auto|gemm|direct]
                            [--conv-opt 1|2|4] [--attention auto|fused|decomposed] [--suite]
                            [--shader-checks] [--split-k-target N]
                            [--out baselines/kernels.json]
    python tools/kernels.py --matmul-variants [--settings JSON] [--only NAME]
                            [--out baselines/matmul_variants.json]
    python tools/kernels.py --attention-variants [--out baselines/attention_variants.json]
    python tools/kernels.py --variants [--only NAME] [--out baselines/memory_variants.json]
    python tools/kernels.py --large [--out baselines/kernels_large.json]
    python tools/kernels.py --half [--tiny] [--only NAME] [--out baselines/kernels_half.json]
    python tools/kernels.py --decode [--tiny] [--only NAME] [--out baselines/kernels_decode.json]
    python tools/kernels.py --train [--tiny] [--only NAME] [--out baselines/kernels_train.json]

Each case is a small module compiled by kernelwright; its GPU time comes from wgpu
timestamps, measured as the bench harness does (harness.timing.time_candidate: warm-up
until steady, repetitions for ~0.2 s, median, inputs rotated among 3 sets), PyTorch's
from CUDA events (median of --reps, same inputs; fp32 with TF32 off: strict mode).
Reported per case: kernelwright ms, torch ms, ratio (torch / kernelwright: above 1 is
faster), whether kernelwright's output matched PyTorch's (outputs poisoned first, every
element within 1e-4 x max(1, the reference's largest magnitude), 1e-2 x for the f16
cases; the harness's per-element checks are `kernelwright bench`'s), and the achieved
rate (TFLOP/s for compute-bound cases, TB/s of bytes read + written for memory-bound
ones). Inputs are drawn, and PyTorch's reference computed, on the GPU where PyTorch sees
one (so that a run of every case fits one 10-minute device call). The run also measures
PyTorch's device-to-device copy of 1 GiB (`copy_tbps`, the memory-bound cases' ceiling)
and ends with `targets`: each of issue 5's targets with its goal, its least case (a wrong
case, or an accelerated case that fell back to strict kernels, counts as not met) and
whether it was met.
Cases marked accelerated compile with precision="accelerated" (the f16 matmul, and
SDPA's two products, on the matrix units: Dawn's subgroup matrices when run with
KERNELWRIGHT_RUNTIME=dawn, which the accelerated cases need on NVIDIA; labelled; a
device without a matrix unit falls back to strict kernels, recorded as such) against
PyTorch's f16 matmul (cuBLAS) or f16 SDPA in the same run, their error measured against
the result of the f16-rounded inputs. The JSON records the runtime and the matrix unit
(compiler.device_matrix) the run had.

--suite adds issue 5's suite figures to the same JSON: `kernelwright bench --level 2
--size full --compile-ref --jobs 6` on the bundled suite, run as a subprocess, and its
level-2 geometric-mean speedups and median compile time (the run's own files go to
OUT's folder, suite_level2/).

--half runs its own cases instead (HALF_BASES): a decode-sized linear (batch 1, a 4096 x
4096 weight), an elementwise chain over 2^27, a layernorm 16384 x 8192 and a GEMM 4096^3,
each stored in f32, f16 and bf16 (module and inputs converted; kernelwright stores half
tensors as they are) against PyTorch in the same dtype, checked against the module in
fp32 on the same half values (1e-2 x the output's scale for half, 1e-4 for f32); the
rates count each dtype's bytes. --tiny shrinks them (the code path on a software driver).

--decode runs its own cases instead (decode_cases): the products of one decoding step of
SmolLM2-135M in fp32, batch 1 (one row of activations times a weight: the q/k/v and the
gate/up projections merged as lower/linalg merges them, the output and down projections
with their residual add, the LM head; attention's scores and its product by V over 544
cached positions of 3 KV heads of 3 queries; the whole SDPA of 9 query heads over 3 KV
heads at 544 and 2048 cached positions, a suffix of them masked: sdpa_decode), each
against PyTorch (cuBLAS; its SDPA), rated by the bytes they read and write (TB/s).
--tiny shrinks them 8-fold.

--train runs its own cases instead (train_cases): a training step's gradient products at
the full training workloads' shapes (suite/training/): convolutions' input and weight
gradients (`aten.convolution_backward` with one output asked for, as the joint graph
holds it: lower/backward.py) of ResNet-18's four stages at batch 32, ResNet-50's 1x1
reduction and its 7x7 stem, the U-Net's top level; and a linear layer's weight gradient
over Whisper's encoder tokens (gy^T x, K = 8 x 1500); SDPA's forward and backward at
Whisper's encoder and SmolLM2's shapes (SdpaGrad). Each against PyTorch on the same GPU
(cuDNN's convolution backward, cuBLAS, its SDPA backward), rated by the multiply-adds. --tiny
shrinks them (a software driver runs them in seconds).

--matmul-variants times, for each GEMM case and the 3x3 convolution's implicit GEMM
(MATMUL_CASES), every setting of the matmul
template's search space for its shape (kernels.matmul_space), each forced through the
knob chooser (compile's `choose`) and checked against PyTorch on the GPU, and writes
every variant's TFLOP/s and ratio to cuBLAS (strict fp32).

--attention-variants does the same for the fused attention kernel on the SDPA cases
(ATTENTION_CASES), the fused path forced.

--variants does the same for the memory-bound cases (MEMORY_CASES): the knobs of their
elementwise, row, reduction, scan and pool kernels (VEC, EPT, TPR, ORDER, OPT:
kernels.elementwise_space, rows_space, reduce_space, scan_space, pool_space, trimmed to
WG 256), and for cases that fuse into a row kernel
also the unfused schedule (schedule.ROW_FUSION_MAX = 0: one kernel per reduction), each
with its TB/s (bytes read + written once) and correctness against PyTorch. Rows longer
than the fusion limit (LONG_ROW_CASES) are measured with the default plan and fused at
the longer limits of ROW_FUSION_VARIANTS instead.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import kernelwright
from kernelwright import compiler, kernels
from kernelwright.check.tolerance import kernel_atol
from kernelwright.harness.timing import keep_gpu_awake, time_candidate
from kernelwright.lower import attention as attention_ops
from kernelwright.lower import conv as conv_ops
from kernelwright.schedule import schedule


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def gemm(m, k, n):
    return dict(module=Fn(torch.mm), inputs=lambda: [torch.randn(m, k), torch.randn(k, n)],
                flops=2 * m * n * k)


def linear_t(m, k, n):  # x @ W^T + b, W stored [N, K] as nn.Linear does
    return dict(module=torch.nn.Linear(k, n), inputs=lambda: [torch.randn(m, k)],
                flops=2 * m * n * k)


def gemm_accelerated(m, k, n):
    return dict(gemm(m, k, n), precision="accelerated", torch_dtype=torch.float16)


def conv_accelerated(module, shape):
    """A convolution case in the accelerated precision (its implicit GEMM on the matrix
    units) against cuDNN in f16, timed in both memory layouts, the faster one kept (the
    row's ``torch_layout`` says which)."""
    return dict(conv(module, shape), precision="accelerated", torch_dtype=torch.float16,
                channels_last=True)


def sdpa_accelerated(b, h, lq, s, e, causal=False):
    """An SDPA case in the accelerated precision (attention_coop: both products on the
    matrix units) against PyTorch's SDPA in f16 (its flash kernel on CUDA)."""
    return dict(sdpa(b, h, lq, s, e, causal), precision="accelerated", torch_dtype=torch.float16)


def conv(module, shape):
    """A convolution case: FLOPs of its real multiply-adds (a transposed convolution's
    zero taps not counted)."""
    out = copy.deepcopy(module).to("meta")(torch.empty(*shape, device="meta")).shape
    w = module.weight
    if isinstance(module, torch.nn.modules.conv._ConvTransposeNd):
        flops = 2 * shape[0] * math.prod(shape[1:]) * w.shape[1] * math.prod(w.shape[2:])
    else:
        flops = 2 * math.prod(out) * math.prod(w.shape[1:])
    return dict(module=module, inputs=lambda: [torch.randn(*shape)], flops=flops)


def bmm_as_conv(m, k, n, nb):
    """The plain product a convolution's implicit GEMM computes (M = output channels,
    K = Cin x taps, N = output pixels per image, the batch in the grid), from stored
    operands: the convolution's figure against it is the cost of loading windows."""
    return dict(module=Fn(torch.matmul),
                inputs=lambda: [torch.randn(m, k), torch.randn(nb, k, n)],
                flops=2 * nb * m * n * k)


def sdpa(b, h, lq, s, e, causal=False):
    """F.scaled_dot_product_attention: FLOPs of the two products (4 B H L S E; a causal
    mask's skipped half counted too, as PyTorch's kernels may not skip it)."""
    return dict(module=Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                         is_causal=causal)),
                inputs=lambda: [torch.randn(b, h, lq, e), torch.randn(b, h, s, e),
                                torch.randn(b, h, s, e)],
                flops=4 * b * h * lq * s * e)


def memory(fn, shape, reads, writes):
    numel = 1
    for s in shape:
        numel *= s
    return dict(module=Fn(fn), inputs=lambda: [torch.randn(*shape)],
                bytes=4 * numel * (reads + writes))


CASES = {
    "gemm_4096": gemm(4096, 4096, 4096),
    "gemm_irregular_3001x4093x2999": gemm(3001, 4093, 2999),
    # the irregular GEMM's aligned twin (the same tiles and grid, 16-byte loads): the
    # cost of the irregular shape's scalar loads
    "gemm_aligned_3004x4096x3000": gemm(3004, 4096, 3000),
    "linear_8192x1024x4096": linear_t(8192, 1024, 4096),
    # the linear's product with its weight stored [K, N] (row-major B, loaded and staged
    # 16 bytes at a time): the cost of reading nn.Linear's weight along K
    "gemm_8192x1024x4096": gemm(8192, 1024, 4096),
    # few columns: 64-column tiles a fifth padding (a classifier's 50 outputs)
    "gemm_narrow_49152x8192x50": gemm(49152, 8192, 50),
    # a LayerNorm computed in the matmul's A loader (a transformer MLP's first layer):
    # the search found DB 1 1.25-1.39x faster on three such kernels (docs/PERF.md)
    "layernorm_linear_gelu_12544x512x2048": dict(
        module=torch.nn.Sequential(torch.nn.LayerNorm(512), torch.nn.Linear(512, 2048),
                                   torch.nn.GELU()),
        inputs=lambda: [torch.randn(12544, 512)], flops=2 * 12544 * 512 * 2048),
    "elementwise_chain_2^27": memory(lambda x: (x * 2 + 1).relu() * 0.5, (1 << 27,), 1, 1),
    "gelu_2^27": memory(F.gelu, (1 << 27,), 1, 1),
    "sum_rows_16384x8192": memory(lambda x: x.sum(1), (16384, 8192), 1, 0),
    "softmax_16384x8192": memory(lambda x: torch.softmax(x, -1), (16384, 8192), 1, 1),
    "layernorm_16384x8192": dict(module=torch.nn.LayerNorm(8192),
                                 inputs=lambda: [torch.randn(16384, 8192)],
                                 bytes=4 * 16384 * 8192 * 2),
    # Convolutions (lower/conv.py: implicit GEMM or the direct kernel; --conv-lowering
    # forces one, to measure the crossover).
    "conv3x3_64ch_128x128_b32": conv(torch.nn.Conv2d(64, 64, 3, padding=1), (32, 64, 128, 128)),
    "conv3x3_64ch_bias_relu_128x128_b32": dict(
        conv(torch.nn.Conv2d(64, 64, 3, padding=1), (32, 64, 128, 128)),
        module=torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU())),
    "conv1x1_256to64_56x56_b32": conv(torch.nn.Conv2d(256, 64, 1), (32, 256, 56, 56)),
    "conv3x3s2_128to256_28x28_b32": conv(torch.nn.Conv2d(128, 256, 3, 2, 1), (32, 128, 28, 28)),
    "conv3x3_128ch_56x56_b64": conv(torch.nn.Conv2d(128, 128, 3, padding=1), (64, 128, 56, 56)),
    # level2/009's convolution: 192 output channels, no multiple of 128
    "conv3x3_128to192_64x64_b32": conv(torch.nn.Conv2d(128, 192, 3, padding=1),
                                       (32, 128, 64, 64)),
    "bmm_as_conv3x3_64ch_128x128_b32": bmm_as_conv(64, 576, 128 * 128, 32),
    "bmm_as_conv3x3_128ch_56x56_b64": bmm_as_conv(128, 1152, 56 * 56, 64),
    "bmm_as_conv3x3_128to192_64x64_b32": bmm_as_conv(192, 1152, 64 * 64, 32),
    "conv3x3_512ch_7x7_b8": conv(torch.nn.Conv2d(512, 512, 3, padding=1), (8, 512, 7, 7)),
    "conv7x7s2_stem_3to64_224x224_b16": conv(torch.nn.Conv2d(3, 64, 7, 2, 3),
                                             (16, 3, 224, 224)),
    "conv1d_k3_256ch_4096_b16": conv(torch.nn.Conv1d(256, 256, 3, padding=1), (16, 256, 4096)),
    "conv3d_3x3x3_32ch_16x64x64_b8": conv(torch.nn.Conv3d(32, 32, 3, padding=1),
                                          (8, 32, 16, 64, 64)),
    # the suite's level1/072 (its lowest convolution against eager, 0.79x in suite call 57)
    "conv3d_3x3x3_32to64ch_32x64x64_b8": conv(torch.nn.Conv3d(32, 64, 3, padding=1),
                                              (8, 32, 32, 64, 64)),
    "conv_grouped32_3x3_256ch_28x28_b32": conv(torch.nn.Conv2d(256, 256, 3, padding=1,
                                                               groups=32), (32, 256, 28, 28)),
    "conv_depthwise3x3_256ch_56x56_b32": conv(torch.nn.Conv2d(256, 256, 3, padding=1,
                                                              groups=256), (32, 256, 56, 56)),
    "conv_transpose4x4s2_128to64_64x64_b16": conv(torch.nn.ConvTranspose2d(128, 64, 4, 2, 1),
                                                  (16, 128, 64, 64)),
    "conv_transpose3d_3s2_64ch_16x32x32_b16": conv(
        torch.nn.ConvTranspose3d(64, 64, 3, 2, 1, output_padding=1, bias=False),
        (16, 64, 16, 32, 32)),
    "conv_transpose1d_4s2_256to128_4096_b64": conv(torch.nn.ConvTranspose1d(256, 128, 4, 2, 1),
                                                   (64, 256, 4096)),
    # Attention (lower/attention.py: the fused kernel or the decomposition; --attention
    # forces one)
    "sdpa_16x16_1024_e64": sdpa(16, 16, 1024, 1024, 64),
    "sdpa_causal_16x16_1024_e64": sdpa(16, 16, 1024, 1024, 64, causal=True),
    # a longer sequence: the fused kernel won causal at 1024 and lost at 2048 in the
    # suite (docs/PERF.md, attention decisions)
    "sdpa_causal_8x12_2048_e64": sdpa(8, 12, 2048, 2048, 64, causal=True),
    "maxpool3x3s2_b32x64x256": memory(lambda x: F.max_pool2d(x, 3, 2, 1), (32, 64, 256, 256), 1,
                                      0.25),
    "rmsnorm_16384x8192": dict(module=Fn(lambda x, w: F.rms_norm(x, (8192,), w, 1e-6)),
                               inputs=lambda: [torch.randn(16384, 8192), torch.randn(8192)],
                               bytes=4 * 16384 * 8192 * 2),
    "log_softmax_16384x8192": memory(lambda x: torch.log_softmax(x, -1), (16384, 8192), 1, 1),
    "softmax_131072x1024": memory(lambda x: torch.softmax(x, -1), (131072, 1024), 1, 1),
    # rows longer than schedule.ROW_FUSION_MAX (the suite's level1/044 and 046 rows)
    "log_softmax_8192x16384": memory(lambda x: torch.log_softmax(x, -1), (8192, 16384), 1, 1),
    "softmax_4096x32768": memory(lambda x: torch.softmax(x, -1), (4096, 32768), 1, 1),
    # a norm over rows too long to hold on chip (65536: the suite's level1/049, 082):
    # its statistics read the input once and its normalization reads it again, so the
    # bytes counted are two reads and a write (the least any plan moves)
    "instancenorm_16x128x256x256": memory(F.instance_norm, (16, 128, 256, 256), 2, 1),
    # a reduction over the leading dim with its max (the suite's level1/040)
    "amax_cols_16384x14336": memory(lambda x: torch.amax(x, 0), (16384, 14336), 1, 0),
    "sum_cols_8192x16384": memory(lambda x: x.sum(0), (8192, 16384), 1, 0),
    "add_bias_rows_16384x8192": dict(module=Fn(lambda x, b: x + b),
                                     inputs=lambda: [torch.randn(16384, 8192), torch.randn(8192)],
                                     bytes=4 * 16384 * 8192 * 2),
    "cumsum_16384x8192": memory(lambda x: torch.cumsum(x, -1), (16384, 8192), 1, 1),
    # a scan along a middle dim (columns of 512 consecutive elements: the suite's
    # level3/024 segment sums)
    "cumsum_cols_512x512x512": memory(lambda x: torch.cumsum(x, 1), (512, 512, 512), 1, 1),
    "permute_nchw_to_nhwc_64x256x128x128": memory(
        lambda x: x.permute(0, 2, 3, 1).contiguous(), (64, 256, 128, 128), 1, 1),
    "gemm_4096_accelerated_f16": gemm_accelerated(4096, 4096, 4096),
    "sdpa_16x16_1024_e64_accelerated_f16": sdpa_accelerated(16, 16, 1024, 1024, 64),
    "sdpa_causal_16x16_1024_e64_accelerated_f16": sdpa_accelerated(16, 16, 1024, 1024, 64,
                                                                   causal=True),
    "conv3x3_64ch_128x128_b32_accelerated_f16": conv_accelerated(
        torch.nn.Conv2d(64, 64, 3, padding=1), (32, 64, 128, 128)),
    "conv3x3_256ch_56x56_b32_accelerated_f16": conv_accelerated(
        torch.nn.Conv2d(256, 256, 3, padding=1), (32, 256, 56, 56)),
    "gemm_8192_accelerated_f16": gemm_accelerated(8192, 8192, 8192),  # the longest: last
}
# Tensors larger than one binding (2 GiB on NVIDIA's Vulkan driver): chunked kernels
# (chunks.py), one family each, at KernelBench's real sizes; `--large` runs these alone
# (one input set each: 4-8 GiB).
LARGE_CASES = {
    "large_elementwise_4096x393216": memory(lambda x: (x * 2 + 1).relu(), (4096, 393216), 1, 1),
    "large_softmax_32768x24576": memory(lambda x: torch.softmax(x, -1), (32768, 24576), 1, 1),
    "large_sum_rows_32768x32768": memory(lambda x: x.sum(1), (32768, 32768), 1, 0),
    "large_sum_all_2^30": memory(lambda x: x.sum(), (1 << 30,), 1, 0),
    "large_cumsum_32768x32768": memory(lambda x: torch.cumsum(x, 1), (32768, 32768), 1, 1),
    "large_mse_32768x32768": dict(module=Fn(F.mse_loss),
                                  inputs=lambda: [torch.randn(32768, 32768),
                                                  torch.randn(32768, 32768)],
                                  bytes=2 * 4 * 32768 * 32768),
    "large_maxpool2x2_b64x64x512x512": memory(lambda x: F.max_pool2d(x, 2),
                                              (64, 64, 512, 512), 1, 0.25),
    "large_gemm_out_32768x1024x32768": gemm(32768, 1024, 32768),
    "large_conv3x3_64ch_256x256_b128": conv(torch.nn.Conv2d(64, 64, 3, padding=1),
                                           (128, 64, 256, 256)),
}
for _case in LARGE_CASES.values():
    _case["sets"] = 1
CASES.update(LARGE_CASES)
MEMORY_CASES = ("elementwise_chain_2^27", "gelu_2^27", "add_bias_rows_16384x8192",
                "sum_rows_16384x8192", "sum_cols_8192x16384", "softmax_16384x8192",
                "softmax_131072x1024", "log_softmax_16384x8192", "layernorm_16384x8192",
                "rmsnorm_16384x8192", "cumsum_16384x8192", "cumsum_cols_512x512x512",
                "permute_nchw_to_nhwc_64x256x128x128", "amax_cols_16384x14336",
                "log_softmax_8192x16384", "softmax_4096x32768", "instancenorm_16x128x256x256",
                # the pool kernel's outputs per invocation (OPT) and vec4 loads (VEC)
                "maxpool3x3s2_b32x64x256")
# Long rows: --variants measures the default plan and the fused row kernel at longer
# fusion limits (schedule.ROW_FUSION_MAX, with kernels.rows.ROW_CACHE elements per
# invocation allowed twice over), not the knob space of its first kernel.
LONG_ROW_CASES = ("log_softmax_8192x16384", "softmax_4096x32768")
ROW_FUSION_VARIANTS = ((16384, 32), (32768, 64))  # (ROW_FUSION_MAX, ROW_CACHE)
VARIANT_KINDS = ("elementwise", "rows", "reduce", "scan", "pool")


MATMUL_CASES = ("gemm_4096", "gemm_irregular_3001x4093x2999", "gemm_aligned_3004x4096x3000",
                "linear_8192x1024x4096",
                "gemm_narrow_49152x8192x50",
                "layernorm_linear_gelu_12544x512x2048",
                # convolutions: their implicit GEMM's settings (64, 128 and 256 output
                # channels: the M of a product batched over the images)
                "conv3x3_64ch_128x128_b32", "conv3x3_128ch_56x56_b64",
                "conv3x3s2_128to256_28x28_b32", "conv3x3_128to192_64x64_b32",
                # the same products from stored operands (the cost of loading windows)
                "bmm_as_conv3x3_64ch_128x128_b32", "bmm_as_conv3x3_128ch_56x56_b64",
                "bmm_as_conv3x3_128to192_64x64_b32",
                # a transposed convolution: one implicit GEMM per output phase (both get
                # each setting), M = 128 output channels, the batch in the grid
                "conv_transpose1d_4s2_256to128_4096_b64",
                # 32 output channels: a 64-row tile computes as many padding rows
                "conv3d_3x3x3_32ch_16x64x64_b8", "conv3d_3x3x3_32to64ch_32x64x64_b8")


ATTENTION_CASES = ("sdpa_16x16_1024_e64", "sdpa_causal_16x16_1024_e64",
                   "sdpa_causal_8x12_2048_e64")


HALF_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def half_bases(tiny: bool = False) -> dict[str, dict]:
    """--half's cases in f32 (`half_cases` stores each in every HALF_DTYPES); `tiny`:
    sizes that a software driver runs in seconds."""
    d, n, rows, cols = (256, 1 << 14, 64, 256) if tiny else (4096, 1 << 27, 16384, 8192)
    return {
        # a decode step's projection: batch 1 against a d x d weight (the weight's read)
        f"half_linear_decode_1x{d}x{d}": dict(module=torch.nn.Linear(d, d),
                                               inputs=lambda: [torch.randn(1, d)],
                                               bytes=4 * (d * d + d + 2 * d)),
        f"half_elementwise_chain_2^{n.bit_length() - 1}": memory(
            lambda x: (x * 2 + 1).relu() * 0.5, (n,), 1, 1),
        f"half_layernorm_{rows}x{cols}": dict(module=torch.nn.LayerNorm(cols),
                                              inputs=lambda: [torch.randn(rows, cols)],
                                              bytes=4 * rows * cols * 2),
        f"half_gemm_{d}": gemm(d, d, d),
    }


def half_cases(tiny: bool = False) -> dict[str, dict]:
    """Each of `half_bases` stored in each of HALF_DTYPES (the case's ``storage``)."""
    return {f"{name}_{label}": dict(case, storage=dtype)
            for name, case in half_bases(tiny).items() for label, dtype in HALF_DTYPES.items()}


def decode_cases(tiny: bool = False) -> dict[str, dict]:
    """--decode's cases: SmolLM2-135M's products at one token (hidden 576, intermediate
    1536, vocabulary 49152, 3 KV heads of 3 queries and 64 dims over 544 cached
    positions); `tiny`: each size an eighth (a software driver runs them in seconds)."""
    s = 8 if tiny else 1
    d, f, vocab, pos, e = 576 // s, 1536 // s, 49152 // s, 544 // s, 64 // s

    def proj(k: int, n: int, residual: bool = False) -> dict:
        lin = torch.nn.Linear(k, n, bias=False)
        module = Fn(lambda x, r: lin(x) + r) if residual else lin
        return dict(module=module, inputs=lambda: [torch.randn(1, k)] + (
            [torch.randn(1, n)] if residual else []),
            bytes=4 * (k * n + k + n * (2 if residual else 1)))

    return {
        f"decode_qkv_1x{d}x{d + 2 * d // 3}": proj(d, d + 2 * d // 3),
        f"decode_o_residual_1x{d}x{d}": proj(d, d, residual=True),
        f"decode_gate_up_1x{d}x{2 * f}": proj(d, 2 * f),
        f"decode_down_residual_1x{f}x{d}": proj(f, d, residual=True),
        f"decode_lm_head_1x{d}x{vocab}": proj(d, vocab),
        # q [3, 3, E] by the cached keys [3, S, E] transposed (read along E), then the
        # probabilities [3, 3, S] by the cached values [3, S, E]
        f"decode_scores_3x3x{e}x{pos}": dict(
            module=Fn(lambda q, k: q @ k.transpose(-1, -2)),
            inputs=lambda: [torch.randn(3, 3, e), torch.randn(3, pos, e)],
            bytes=4 * 3 * (3 * e + pos * e + 3 * pos)),
        f"decode_pv_3x3x{pos}x{e}": dict(
            module=Fn(torch.matmul),
            inputs=lambda: [torch.rand(3, 3, pos), torch.randn(3, pos, e)],
            bytes=4 * 3 * (3 * pos + pos * e + 3 * e)),
        # the whole attention of that step as the model calls it (kernels/attention_decode:
        # one kernel; at 2048 positions the keys split over workgroups, two)
        f"sdpa_decode_9x3_1x{pos}x{e}": sdpa_decode(pos, e),
        f"sdpa_decode_9x3_1x{2048 // s}x{e}": sdpa_decode(2048 // s, e),
    }


def conv_grad(which: str, n: int, cin: int, cout: int, size: int, k: int, stride: int = 1) -> dict:
    """One gradient of a 2-d convolution (padding k // 2): `which` "input" (the
    transposed convolution of the output's gradient) or "weight" (a reduction over the
    batch and the positions), from `aten.convolution_backward` as a training step's
    joint graph calls it; FLOPs those of the forward (its real multiply-adds)."""
    pad, out = k // 2, (size + 2 * (k // 2) - k) // stride + 1
    mask = [which == "input", which == "weight", False]
    pick = 0 if which == "input" else 1

    def fn(gy, x, w):
        return torch.ops.aten.convolution_backward(
            gy, x, w, None, [stride] * 2, [pad] * 2, [1] * 2, False, [0, 0], 1, mask)[pick]

    return dict(module=Fn(fn),
                inputs=lambda: [torch.randn(n, cout, out, out), torch.randn(n, cin, size, size),
                                torch.randn(cout, cin, k, k)],
                flops=2 * n * cout * out * out * cin * k * k)


class SdpaGrad(torch.nn.Module):
    """SDPA's forward and backward from q, k, v and the output's gradient, returning
    dq + dk + dv (one output of every gradient; equal shapes, no grouped heads): on the
    CPU, where kernelwright captures it, the flash op and its backward as a training
    step's joint graph holds them (lower/attention.py: the forward kernel with its
    log-sum-exp, the two attention_grad kernels); on CUDA, PyTorch's SDPA through
    autograd (its fused backward; the forward included, as ours is)."""

    def __init__(self, causal: bool):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v, dout):
        if q.is_cuda:
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                out = F.scaled_dot_product_attention(*leaves, is_causal=self.causal)
                dq, dk, dv = torch.autograd.grad(out, leaves, dout)
            return dq + dk + dv
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, self.causal)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, self.causal)
        return dq + dk + dv


def sdpa_grad(b: int, h: int, s: int, e: int, causal: bool) -> dict:
    """SDPA forward and backward over `s` positions: FLOPs of its products (the
    forward's two, the backward's five, the scores recomputed: 2 B H S S E each, a causal
    mask's skipped half counted too)."""
    return dict(module=SdpaGrad(causal),
                inputs=lambda: [torch.randn(b, h, s, e) for _ in range(4)],
                flops=7 * 2 * b * h * s * s * e)


def train_cases(tiny: bool = False) -> dict[str, dict]:
    """--train's cases: the gradient products of the training workloads at their full
    configs (ResNet-18/50 and the U-Net at batch 32, Whisper's encoder at batch 8 of 1500
    tokens); `tiny`: batch 2 and sizes an eighth (the code path on a software driver)."""
    n, s = (2, 8) if tiny else (32, 1)
    tokens, d = (48, 48) if tiny else (8 * 1500, 384)
    cases = {}
    for which in ("input", "weight"):
        for cin, cout, size, k, stride in ((64, 64, 56, 3, 1), (128, 128, 28, 3, 1),
                                           (256, 256, 14, 3, 1), (512, 512, 7, 3, 1),
                                           (128, 256, 28, 3, 2), (256, 64, 56, 1, 1),
                                           (128, 128, 64, 3, 1)):
            size = max(size // s, k)
            name = f"conv_grad_{which}_{k}x{k}{f's{stride}' if stride > 1 else ''}" \
                f"_{cin}to{cout}_{size}x{size}_b{n}"
            cases[name] = conv_grad(which, n, cin, cout, size, k, stride)
    # the stem's weight gradient only: the image carries no gradient
    cases[f"conv_grad_weight_7x7s2_3to64_{224 // s}x{224 // s}_b{n}"] = conv_grad(
        "weight", n, 3, 64, 224 // s, 7, 2)
    for hidden in (d, 4 * d):
        cases[f"linear_grad_weight_{hidden}x{tokens}x{d}"] = dict(
            module=Fn(lambda gy, x: gy.t() @ x),
            inputs=lambda hidden=hidden: [torch.randn(tokens, hidden), torch.randn(tokens, d)],
            flops=2 * tokens * hidden * d)
    # attention forward and backward: Whisper's encoder (8 x 6 heads over 1500 frames)
    # and SmolLM2's causal self-attention (8 x 9 heads over 512 tokens)
    bw, sw, bs, ss, e = (1, 40, 1, 24, 16) if tiny else (8, 1500, 8, 512, 64)
    cases[f"sdpa_grad_{bw}x6_{sw}_e{e}"] = sdpa_grad(bw, 6, sw, e, False)
    cases[f"sdpa_grad_causal_{bs}x9_{ss}_e{e}"] = sdpa_grad(bs, 9, ss, e, True)
    return cases


def sdpa_decode(pos: int, e: int) -> dict:
    """SDPA of one new query of 9 heads over 3 KV heads (enable_gqa) against `pos`
    cached positions of `e` dims, the last eighth of the cache hidden by a float mask (a
    KV cache's slots past the current position): rated by the cache's, the query's,
    the mask's and the output's bytes."""
    seen = pos - pos // 8

    def inputs() -> list[torch.Tensor]:
        mask = torch.zeros(1, 1, 1, pos)
        mask[..., seen:] = float("-inf")
        return [torch.randn(1, 9, 1, e), torch.randn(1, 3, pos, e), torch.randn(1, 3, pos, e),
                mask]

    return dict(module=Fn(lambda q, k, v, m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m, enable_gqa=True)), inputs=inputs,
        bytes=4 * (2 * 9 * e + 2 * 3 * pos * e + pos))


def draw_sets(case: dict, count: int = 3) -> list[list[torch.Tensor]]:
    """`count` input sets of a case, drawn on the GPU where PyTorch sees one (hundreds of MB
    of normal draws take seconds on the CPU) and handed over on the CPU."""
    if not torch.cuda.is_available():
        return [case["inputs"]() for _ in range(count)]
    with torch.device("cuda"):
        sets = [case["inputs"]() for _ in range(count)]
    return [[x.cpu() for x in s] for s in sets]


def case_reference(name: str, reps: int, low: torch.dtype | None = None,
                   case: dict | None = None):
    """A case's module (back on the CPU), three input sets, PyTorch's result on the first
    (computed on the GPU where PyTorch sees one, fp32 with TF32 off) and PyTorch's median
    GPU ms over `reps` calls (nan without CUDA). With `low` (the f16 cases) PyTorch runs
    in that dtype and the result is the exact product of the `low`-rounded inputs. A case
    with a ``storage`` dtype (--half) has its module and inputs in that dtype (PyTorch
    runs in it) and its result is the module's in fp32 on those values. `case`: the
    case itself where it is not CASES[name]."""
    case = case or CASES[name]
    torch.manual_seed(0)
    module = case["module"].eval()
    sets = draw_sets(case, case.get("sets", 3))
    storage = case.get("storage")
    reference = module
    if storage is not None:
        reference = copy.deepcopy(module).float()
        module = module.to(storage)
        sets = [[x.to(storage) for x in s] for s in sets]
    cuda = torch.cuda.is_available()
    first = [x.to(low).float() for x in sets[0]] if low else [x.float() for x in sets[0]]
    if low and storage is None:  # the exact result of the rounded weights too
        reference = copy.deepcopy(module).to(low).float()
    with torch.no_grad():
        ref = (reference.cuda()(*[x.cuda() for x in first]).cpu() if cuda
               else reference(*first))
        reference.cpu()
    torch_sets = [[x.to(low) for x in s] for s in sets] if low else sets
    timed = copy.deepcopy(module).to(low) if low else module
    ref_ms = float("nan")
    if cuda:
        ref_ms = torch_ms(timed, torch_sets, reps)
        if case.get("channels_last"):  # PyTorch's faster layout (cuDNN f16: often NHWC)
            last = [[x.to(memory_format=torch.channels_last) for x in s] for s in torch_sets]
            ms = torch_ms(timed.to(memory_format=torch.channels_last), last, reps)
            case["torch_layout"] = "channels_last" if ms < ref_ms else "contiguous"
            ref_ms = min(ref_ms, ms)
        timed.cpu()
    return module.cpu(), sets, ref, ref_ms


def template_variants(args, dev, kind: str, cases: tuple[str, ...]) -> None:
    """Every setting of the `kind` template's space (its kernel forced through the knob
    chooser), per case: GPU ms, TFLOP/s, ratio to PyTorch and the error against
    PyTorch's result on the GPU. The JSON is rewritten after each variant, so that a run
    cut short keeps what it measured."""
    out = dict(device=dev.description, torch=torch.__version__,
               shader_checks=kernelwright.runtime.runtime.FORCE_SHADER_CHECKS,
               precision="strict fp32 (TF32 off)", cases=[])
    for name in cases:
        if args.only and not any(o in name for o in args.only.split(",")):
            continue
        case = CASES[name]
        module, sets, ref, ref_ms = case_reference(name, args.reps)
        scale = ref.abs().max().item() or 1.0
        requests = []
        kernelwright.compile(module, sets[0],
                             choose=lambda r, seen=requests: seen.append(r) if r.kind == kind
                                    else None)
        request = requests[0]  # several kernels of the kind (the phases of a transposed
        # convolution) share its space and each gets every setting
        row = dict(case=name, torch_ms=round(ref_ms, 4),
                   torch_tflops=round(case["flops"] / ref_ms / 1e9, 2), key=str(request.key),
                   variants=[])
        out["cases"].append(row)
        space = ([{**request.default.knobs, **k} for k in json.loads(args.settings)]
                 if args.settings else request.space)
        for knobs in space:
            variant = dict(knobs=knobs)
            try:
                compiled = kernelwright.compile(module, sets[0],
                                                choose=lambda r, k=knobs: k
                                                       if r.kind == kind else None)
                used = [k.knobs for k in compiled.plan.kernels if k.key.startswith(kind + " ")]
                if len(used) != len(requests) or any(u != knobs for u in used):
                    raise RuntimeError(f"the compile used {used}")
                got = compiled(*sets[0], poison=True)
                err = (got - ref).abs().max().item()
                ms = time_candidate(compiled, sets).median_ms
                variant.update(ms=round(ms, 4), tflops=round(case["flops"] / ms / 1e9, 2),
                               ratio=round(ref_ms / ms, 4), rel_err=err / scale,
                               correct=matches(err, scale))
                del compiled
            except Exception as exc:  # noqa: BLE001 - record the failure, measure the rest
                variant["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            row["variants"].append(variant)
            print(json.dumps(dict(case=name, **variant)), flush=True)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=1))
        best = min((v for v in row["variants"] if v.get("correct")),
                   key=lambda v: v["ms"], default=None)
        print(f"{name}: best {best}", flush=True)


def memory_variants(args, dev) -> None:
    """Per memory-bound case: the default compile, each knob setting of its main kernel
    (the first elementwise, row or reduction kernel; WG 256 only) and, where the default
    fuses a row kernel, the schedule without row fusion. The JSON is rewritten after
    each variant."""
    out = dict(device=dev.description, torch=torch.__version__,
               shader_checks=kernelwright.runtime.runtime.FORCE_SHADER_CHECKS,
               precision="strict fp32 (TF32 off)", cases=[])
    for name in MEMORY_CASES:
        if args.only and not any(o in name for o in args.only.split(",")):
            continue
        case = CASES[name]
        module, sets, ref, ref_ms = case_reference(name, args.reps)
        scale = ref.abs().max().item() or 1.0
        requests = []
        kernelwright.compile(module, sets[0],
                             choose=lambda r, seen=requests: seen.append(r)
                                    if r.kind in VARIANT_KINDS
                                    else None)
        request = requests[0]
        settings = [("default", None, None)]
        if name in LONG_ROW_CASES:
            settings += [(f"fused (ROW_FUSION_MAX = {f}, ROW_CACHE = {c})", None, (f, c))
                         for f, c in ROW_FUSION_VARIANTS]
        else:
            space = ([{**request.default.knobs, **k} for k in json.loads(args.settings)]
                     if args.settings else request.space)
            settings += [(json.dumps(k, sort_keys=True), k, None) for k in space
                         if k.get("WG", 256) == 256 and k != request.default.knobs]
        if request.kind == "rows":
            settings.append(("unfused (ROW_FUSION_MAX = 0)", None, (0, kernels.rows.ROW_CACHE)))
        row = dict(case=name, torch_ms=round(ref_ms, 4),
                   torch_tbps=round(case["bytes"] / ref_ms / 1e9, 3), key=str(request.key),
                   default_knobs=request.default.knobs, variants=[])
        out["cases"].append(row)
        for label, knobs, fusion in settings:
            variant = dict(variant=label)
            keep = schedule.ROW_FUSION_MAX, kernels.rows.ROW_CACHE
            try:
                if fusion is not None:
                    schedule.ROW_FUSION_MAX, kernels.rows.ROW_CACHE = fusion
                compiled = kernelwright.compile(module, sets[0],
                                                choose=lambda r, k=knobs, key=request.key: k
                                                       if k and r.key == key
                                                       else None)
                got = compiled(*sets[0], poison=True)
                err = (got - ref).abs().max().item()
                ms = time_candidate(compiled, sets).median_ms
                variant.update(kernels=[k.name for k in compiled.plan.kernels],
                               knobs=[k.knobs for k in compiled.plan.kernels],
                               ms=round(ms, 4), tbps=round(case["bytes"] / ms / 1e9, 3),
                               ratio=round(ref_ms / ms, 4), rel_err=err / scale,
                               correct=matches(err, scale))
                del compiled
            except Exception as exc:  # noqa: BLE001 - record the failure, measure the rest
                variant["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            finally:
                schedule.ROW_FUSION_MAX, kernels.rows.ROW_CACHE = keep
            row["variants"].append(variant)
            print(json.dumps(dict(case=name, **variant)), flush=True)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=1))
        best = min((v for v in row["variants"] if v.get("correct")),
                   key=lambda v: v["ms"], default=None)
        print(f"{name}: best {best}", flush=True)


def torch_ms(module, sets, reps):
    with torch.no_grad():
        m = module.cuda()
        cuda_sets = [[x.cuda() for x in s] for s in sets]
        for s in cuda_sets[:2]:
            m(*s)
        times = []
        for i in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s = cuda_sets[i % len(cuda_sets)]
            a.record()
            m(*s)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="cases whose name contains one of these "
                    "comma-separated strings")
    ap.add_argument("--exclude", default="", help="skip cases whose name contains one of "
                    "these comma-separated strings (e.g. 'accelerated': the strict cases)")
    ap.add_argument("--reps", type=int, default=20, help="PyTorch's timed calls per case")
    ap.add_argument("--out", default=None)
    ap.add_argument("--matmul-variants", action="store_true",
                    help="time every setting of the matmul space on the GEMM cases")
    ap.add_argument("--attention-variants", action="store_true",
                    help="time every setting of the fused attention kernel's space on the "
                         "SDPA cases")
    ap.add_argument("--settings", default="",
                    help="with --matmul-variants, --attention-variants or --variants: a "
                         "JSON list of knob settings, each over the kernel's defaults, to "
                         "time instead of the whole space (e.g. '[{}, {\"DB\": 1}]')")
    ap.add_argument("--variants", action="store_true",
                    help="time the knob variants of the memory-bound cases' kernels")
    ap.add_argument("--large", action="store_true",
                    help="only the cases over one binding (LARGE_CASES, 4-8 GiB each)")
    ap.add_argument("--half", action="store_true",
                    help="only the half-storage cases (half_cases): f32, f16 and bf16 "
                         "storage, each against PyTorch in the same dtype")
    ap.add_argument("--decode", action="store_true",
                    help="only the decode-step products (decode_cases): batch 1 against "
                         "SmolLM2-135M's weights, fp32")
    ap.add_argument("--train", action="store_true",
                    help="only the training step's gradient products (train_cases): "
                         "convolution backward and weight gradients, fp32")
    ap.add_argument("--tiny", action="store_true",
                    help="with --half, --decode or --train: small sizes (the code path on a "
                         "software driver)")
    ap.add_argument("--suite", action="store_true",
                    help="also run kernelwright bench on the bundled level 2 (full size, "
                         "--compile-ref, --jobs 6) and add its figures")
    ap.add_argument("--conv-lowering", choices=("auto", "gemm", "direct"), default="auto",
                    help="convolutions through lower/conv.py's choice (auto), or all through "
                         "the implicit GEMM or the direct kernel (where each applies)")
    ap.add_argument("--conv-opt", type=int, choices=(1, 2, 4), default=None,
                    help="the direct convolution kernel's outputs per invocation (OPT knob), "
                         "forced through the knob chooser")
    ap.add_argument("--attention", choices=("auto", "fused", "decomposed"), default="auto",
                    help="attention through lower/attention.py's choice (auto), or all through "
                         "the fused kernel (where its tiles fit) or the decomposition")
    ap.add_argument("--split-k-target", type=int, default=None,
                    help="kernels/cuts.SPLIT_K_TARGET (workgroups split-K aims for) for this "
                         "run, e.g. to split a large product's K in two or three")
    ap.add_argument("--shader-checks", action="store_true",
                    help="compile every kernel with wgpu's runtime checks (index clamps, "
                         "loop counters), as before kernels were trusted (runtime.py)")
    args = ap.parse_args()
    kernelwright.runtime.runtime.FORCE_SHADER_CHECKS = args.shader_checks
    if args.split_k_target is not None:
        kernels.cuts.SPLIT_K_TARGET = args.split_k_target
    if args.conv_lowering != "auto":
        gemm = args.conv_lowering == "gemm"
        conv_ops.GEMM_MIN_COUT = conv_ops.GEMM_MIN_K = 1 if gemm else 1 << 30
    if args.attention != "auto":
        attention_ops.FUSED = args.attention == "fused"

    def conv_opt(request):
        return {**request.default.knobs, "OPT": args.conv_opt} if request.kind == "conv" \
            else None
    run(args, conv_opt if args.conv_opt else None)


def run(args, choose=None) -> None:
    """The cases' figures; `choose`: the compiles' knob chooser (None: compile()'s)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = kernelwright.runtime.default_device()
    keep_gpu_awake()  # Vulkan ran 3x slow on the H200 until a CUDA context was open
    if args.matmul_variants:
        args.out = args.out or "baselines/matmul_variants.json"
        template_variants(args, dev, "matmul", MATMUL_CASES)
        return
    if args.attention_variants:  # the fused kernel's settings (FUSED forces the path)
        args.out = args.out or "baselines/attention_variants.json"
        attention_ops.FUSED = True
        template_variants(args, dev, "attention", ATTENTION_CASES)
        return
    if args.variants:
        args.out = args.out or "baselines/memory_variants.json"
        memory_variants(args, dev)
        return
    args.out = args.out or ("baselines/kernels_decode.json" if args.decode else
                            "baselines/kernels_train.json" if args.train else
                            "baselines/kernels.json")
    rows = []
    out = dict(device=dev.description, torch=torch.__version__,
               shader_checks=kernelwright.runtime.runtime.FORCE_SHADER_CHECKS,
               precision="strict fp32 (TF32 off), except the cases labelled accelerated",
               runtime=dev.runtime, matrix_unit=str(compiler.device_matrix(dev)), cases=rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if torch.cuda.is_available():
        out["copy_tbps"] = copy_tbps(args.reps)  # the memory-bound cases' ceiling
    half, own = args.half, args.decode or args.train  # own: a mode's own cases alone
    cases = half_cases(args.tiny) if half else decode_cases(args.tiny) if args.decode else \
        train_cases(args.tiny) if args.train else CASES
    if half:
        out["precision"] = "half storage: f32, f16 and bf16, PyTorch in the same dtype"
    for name, case in cases.items():
        if args.only and not any(o in name for o in args.only.split(",")):
            continue
        if args.exclude and any(x in name for x in args.exclude.split(",")):
            continue
        if not (half or own) and args.large != (name in LARGE_CASES):
            continue
        low = case.get("torch_dtype")  # PyTorch's side runs in this dtype (f16 cases)
        module, sets, ref, ref_ms = case_reference(name, args.reps, low, case)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # PyTorch's cached blocks back, for wgpu's buffers
        t0 = time.perf_counter()
        compiled = kernelwright.compile(module, sets[0], precision=case.get("precision"),
                                        choose=choose)
        compile_s = time.perf_counter() - t0
        got = compiled(*sets[0], poison=True)
        storage = case.get("storage", torch.float32)
        err = (got.float() - ref).abs().max().item()
        scale = ref.abs().max().item() or 1.0
        kw_ms = time_candidate(compiled, sets).median_ms
        narrow = low is not None or storage != torch.float32
        row = dict(case=name, kernels=len(compiled.plan.kernels),
                   precision=getattr(compiled, "precision", "strict"),
                   storage=str(storage).replace("torch.", ""), output_dtype=str(got.dtype),
                   torch_dtype=str(low or storage).replace("torch.", ""),
                   kernel_names=[k.name for k in compiled.plan.kernels],
                   kernel_knobs=[k.knobs for k in compiled.plan.kernels],
                   compile_s=round(compile_s, 3),
                   max_abs_err=err, rel_err=err / scale,
                   correct=matches(err, scale, 1e-2 if narrow else 1e-4),
                   kernelwright_ms=round(kw_ms, 4),
                   torch_ms=round(ref_ms, 4), ratio=round(ref_ms / kw_ms, 4))
        if "torch_layout" in case:
            row["torch_layout"] = case["torch_layout"]
        if "flops" in case:
            row["kernelwright_tflops"] = round(case["flops"] / kw_ms / 1e9, 2)
            row["torch_tflops"] = round(case["flops"] / ref_ms / 1e9, 2)
        else:  # the bytes of an f32 case, scaled to its storage
            moved = case["bytes"] * storage.itemsize / 4
            row["kernelwright_tbps"] = round(moved / kw_ms / 1e9, 3)
            row["torch_tbps"] = round(moved / ref_ms / 1e9, 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
        Path(args.out).write_text(json.dumps(out, indent=1))  # a run cut short keeps its rows
        del compiled
    if args.suite:
        out["suite"] = suite_figures(Path(args.out).parent / "suite_level2")
        print(json.dumps(out["suite"]), flush=True)
    out["targets"] = target_summary(rows, out.get("copy_tbps"), out.get("suite"))
    print(json.dumps(out["targets"], indent=1), flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


def matches(err: float, scale: float, tol: float = 1e-4) -> bool:
    """Whether a largest absolute error `err` is within `tol` x max(1, the reference's
    largest magnitude `scale`): fp32's 1e-4, the f16 cases' 1e-2 (check.tolerance's
    kernel rule; the harness's tolerances by dtype)."""
    return bool(err <= kernel_atol(scale, tol))


def copy_tbps(reps: int, numel: int = 1 << 28) -> float:
    """PyTorch's device-to-device copy of `numel` floats (1 GiB), bytes read + written per
    second (TB/s, median of `reps` CUDA-event timings): the memory-bound cases' ceiling."""
    x = torch.randn(numel, device="cuda")
    ms = torch_ms(Fn(torch.clone), [[x]], reps)
    del x
    return round(2 * 4 * numel / ms / 1e9, 3)


# Issue 5's targets: (name, goal, the cases it covers, the figure: "ratio" to PyTorch or
# "copy" fraction of the copy bandwidth, taken as the least over the cases).
TARGETS = (
    ("fp32 GEMM vs cuBLAS (TF32 off)", 0.90, ("gemm_4096", "gemm_irregular_3001x4093x2999",
                                              "gemm_narrow_49152x8192x50",
                                              "linear_8192x1024x4096"), "ratio"),
    ("memory-bound kernels vs the copy bandwidth", 0.85, MEMORY_CASES, "copy"),
    ("convolutions vs cuDNN fp32", 0.80,
     tuple(n for n in CASES if n.startswith("conv")
           and CASES[n].get("precision") != "accelerated"), "ratio"),
    ("large tensors, memory-bound, vs the copy bandwidth", 0.85,
     tuple(n for n in LARGE_CASES if "bytes" in LARGE_CASES[n]), "copy"),
    ("large tensors, GEMM and convolution, vs cuBLAS / cuDNN", 0.85,
     tuple(n for n in LARGE_CASES if "flops" in LARGE_CASES[n]), "ratio"),
    ("accelerated f16 GEMM vs cuBLAS f16", 0.50,
     tuple(n for n in CASES if CASES[n].get("precision") == "accelerated"
           and n.startswith("gemm")), "ratio"),
    ("accelerated 3x3 convolutions vs cuDNN f16", 0.50,
     tuple(n for n in CASES if CASES[n].get("precision") == "accelerated"
           and n.startswith("conv")), "ratio"),
)


def target_summary(rows: list[dict], copy: float | None, suite: dict | None) -> list[dict]:
    """Each target of issue 5 with its goal, its least case and every case's figure; the
    suite's level-2 geometric mean and median compile time when the suite ran."""
    by_name = {r["case"]: r for r in rows}
    summary = []
    for title, goal, names, kind in TARGETS:
        figures = {}
        for n in names:
            r = by_name.get(n)
            if r is None:
                continue
            if kind == "copy":
                figures[n] = round(r["kernelwright_tbps"] / copy, 4) if copy else None
            else:
                figures[n] = r["ratio"]
            fell_back = (CASES[n].get("precision") == "accelerated"
                         and r.get("precision", "strict") == "strict")
            if not r.get("correct", False) or fell_back:
                figures[n] = None  # wrong, or the accelerated mode fell back to strict
        known = [f for f in figures.values() if f is not None]
        least = min(known) if len(known) == len(figures) and known else None
        summary.append(dict(target=title, goal=goal, figure=least,
                            met=bool(least is not None and least >= goal), cases=figures))
    if suite and "geomean_speedup_eager" in suite:
        geomean, compile_s = suite["geomean_speedup_eager"], suite["median_compile_s"]
        summary.append(dict(target="level-2 geomean vs eager", goal=1.5, figure=geomean,
                            met=bool(geomean is not None and geomean >= 1.5)))
        summary.append(dict(target="median compile s (level 2, tuning off)", goal=1.0,
                            figure=compile_s, met=bool(compile_s is not None and compile_s < 1.0)))
    return summary


def suite_figures(out_dir: Path, jobs: int = 6) -> dict:
    """Issue 5's level-2 figures from the bench harness: geometric-mean speedups over
    PyTorch eager and torch.compile, fast_p, and the median compile time."""
    command = [sys.executable, "-m", "kernelwright.cli", "bench", "--level", "2",
               "--size", "full", "--compile-ref", "--jobs", str(jobs), "--out", str(out_dir)]
    done = subprocess.run(command, check=False)
    results = out_dir / "results.json"
    if not results.exists():
        return {"error": f"{' '.join(command)} exited {done.returncode} without results"}
    return level_figures(json.loads(results.read_text()), "2", " ".join(command))


def level_figures(document: dict, level: str, command: str) -> dict:
    """The figures of one level from a `kernelwright bench` results.json."""
    summary = document["summary"]["levels"].get(level, {})
    return {"command": command, "device": document.get("device"),
            "level": int(level), "problems": summary.get("problems"),
            "correct": summary.get("correct"),
            "geomean_speedup_eager": summary.get("geomean_speedup_eager"),
            "geomean_speedup_compile": summary.get("geomean_speedup_compile"),
            "fast_eager": summary.get("fast_eager"),
            "median_compile_s": summary.get("median_compile_s")}


if __name__ == "__main__":
    main()
