"""tools/kernels.py: every case checked against PyTorch, and issue 5's targets summarised."""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def load_kernels_bench():
    spec = importlib.util.spec_from_file_location("bench_kernels", ROOT / "tools" / "kernels.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_kernels"] = module
    spec.loader.exec_module(module)
    return module


def test_small_cases_are_checked_and_summarised(tmp_path, monkeypatch):
    kb = load_kernels_bench()
    cases = {"gemm_4096": kb.gemm(20, 12, 8),  # the GEMM target's name, a small shape
             "softmax_16384x8192": kb.memory(lambda x: torch.softmax(x, -1), (6, 40), 1, 1),
             "conv3x3_small": kb.conv(torch.nn.Conv2d(3, 4, 3, padding=1), (2, 3, 9, 9))}
    monkeypatch.setattr(kb, "CASES", cases)
    out = tmp_path / "kernels.json"
    args = argparse.Namespace(only="", reps=3, out=str(out), suite=False, large=False,
                              matmul_variants=False, attention_variants=False, variants=False,
                              half=False, decode=False, train=False, tiny=False, exclude="")
    kb.run(args)
    document = json.loads(out.read_text())
    rows = {r["case"]: r for r in document["cases"]}
    assert set(rows) == set(cases)
    assert all(r["correct"] and r["kernelwright_ms"] > 0 for r in rows.values())
    targets = {t["target"]: t for t in document["targets"]}
    gemm = targets["fp32 GEMM vs cuBLAS (TF32 off)"]
    assert set(gemm["cases"]) == {"gemm_4096"}  # only the cases that ran
    if not torch.cuda.is_available():  # no PyTorch GPU time: no ratio, no target met
        assert not gemm["met"] and "copy_tbps" not in document


def test_half_cases_store_each_dtype(tmp_path):
    """--half --tiny: each base case in f16 and bf16 storage (f32 left out by --exclude),
    its output in that dtype, checked against the module in fp32 on the same half values."""
    kb = load_kernels_bench()
    out = tmp_path / "half.json"
    args = argparse.Namespace(only="elementwise,linear", reps=3, out=str(out), suite=False,
                              large=False, matmul_variants=False, attention_variants=False,
                              variants=False, half=True, decode=False, train=False, tiny=True,
                              exclude="_f32")
    kb.run(args)
    rows = {r["case"]: r for r in json.loads(out.read_text())["cases"]}
    assert set(rows) == {f"{base}_{label}" for base in kb.half_bases(tiny=True)
                         if "elementwise" in base or "linear" in base
                         for label in kb.HALF_DTYPES if label != "f32"}
    for name, r in rows.items():
        label = name.rsplit("_", 1)[1]
        assert r["storage"] == str(kb.HALF_DTYPES[label]).replace("torch.", "")
        assert r["output_dtype"] == str(kb.HALF_DTYPES[label])
        assert r["correct"] and r["kernelwright_ms"] > 0, r


def test_a_wrong_or_fallen_back_case_meets_no_target():
    kb = load_kernels_bench()
    good = dict(correct=True, precision="strict", ratio=0.95)
    rows = [dict(good, case="gemm_4096"), dict(good, case="gemm_irregular_3001x4093x2999")]
    met = {t["target"]: t for t in kb.target_summary(rows, None, None)}
    assert met["fp32 GEMM vs cuBLAS (TF32 off)"]["figure"] == 0.95
    assert met["fp32 GEMM vs cuBLAS (TF32 off)"]["met"]

    rows[1] = dict(good, case=rows[1]["case"], correct=False, ratio=2.0)
    gemm = {t["target"]: t for t in kb.target_summary(rows, None, None)}[
        "fp32 GEMM vs cuBLAS (TF32 off)"]
    assert gemm["figure"] is None and not gemm["met"]

    fallback = [dict(good, case="gemm_4096_accelerated_f16", ratio=0.7)]  # strict kernels
    accel = {t["target"]: t for t in kb.target_summary(fallback, None, None)}[
        "accelerated f16 GEMM vs cuBLAS f16"]
    assert accel["cases"] == {"gemm_4096_accelerated_f16": None} and not accel["met"]

    suite = {"geomean_speedup_eager": 1.29, "median_compile_s": 0.6}
    extra = {t["target"]: t for t in kb.target_summary([], 4.0, suite)}
    assert not extra["level-2 geomean vs eager"]["met"]
    assert extra["median compile s (level 2, tuning off)"]["met"]


def test_decode_cases_run_at_their_tiny_sizes(tmp_path):
    """--decode --tiny: a decoding step's products and attention, each one kernel (the
    gemv, the few-query attention), checked against PyTorch."""
    kb = load_kernels_bench()
    out = tmp_path / "decode.json"
    args = argparse.Namespace(only="", reps=2, out=str(out), suite=False, large=False,
                              matmul_variants=False, attention_variants=False, variants=False,
                              half=False, decode=True, train=False, tiny=True,
                              exclude="")
    kb.run(args)
    rows = json.loads(out.read_text())["cases"]
    assert rows and all(r["correct"] and r["kernels"] == 1 for r in rows), rows
    assert any("sdpa_decode" in r["case"] for r in rows)


def test_train_cases_run_at_their_tiny_sizes(tmp_path):
    """--train --tiny: a training step's gradient products (convolutions' input and
    weight gradients, a linear layer's weight gradient, attention's backward), checked
    against PyTorch; a weight gradient is one kernel (a product over the batch and the
    positions), attention's backward the flash kernels."""
    kb = load_kernels_bench()
    out = tmp_path / "train.json"
    args = argparse.Namespace(only="3x3_64to64,1x1,linear,sdpa", reps=2, out=str(out), suite=False,
                              large=False, matmul_variants=False, attention_variants=False,
                              variants=False, half=False, decode=False, train=True, tiny=True,
                              exclude="")
    kb.run(args)
    rows = {r["case"]: r for r in json.loads(out.read_text())["cases"]}
    assert len(rows) == 8 and all(r["correct"] for r in rows.values()), rows
    assert all(r["kernels"] == 1 for name, r in rows.items() if "weight" in name), rows
    assert all(sum(k.startswith("attention_grad") for k in r["kernel_names"]) == 2
               for name, r in rows.items() if "sdpa" in name), rows
