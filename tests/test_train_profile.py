"""tools/train_profile.py: a training step's kernel times grouped by name and family, the
sums consistent with the step's wall time, the grouping helpers and PyTorch's side."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kernelwright
from kernelwright.plan import Kernel

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("train_profile",
                                               ROOT / "tools" / "train_profile.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def _consistent(row: dict, top: int) -> None:
    """The groups cover every kernel once and add up to the sum of kernel times."""
    n, total = row["kernels"], row["sum_of_kernels_ms"]
    assert [k["index"] for k in row["per_kernel"]] == list(range(n))
    assert math.isclose(sum(k["ms"] for k in row["per_kernel"]), total, abs_tol=1e-3)
    for key in ("by_name", "by_family"):
        assert sum(g["count"] for g in row[key]) == n, key
        assert math.isclose(sum(g["ms"] for g in row[key]), total, abs_tol=1e-3), key
        assert math.isclose(sum(g["share"] for g in row[key]), 1.0, abs_tol=1e-3), key
        assert [g["ms"] for g in row[key]] == sorted((g["ms"] for g in row[key]), reverse=True)
    assert math.isclose(row["gap_ms"], row["step_ms"] - total, abs_tol=1e-3)
    assert math.isclose(row["outside_gpu_ms"], row["step_ms"] - row["gpu_pass_ms"],
                        abs_tol=1e-3)
    assert total > 0 and row["step_ms"] > 0 and row["gpu_pass_ms"] > 0
    assert len(row["top"]) == min(top, n)
    assert [k["ms"] for k in row["top"]] == sorted((k["ms"] for k in row["top"]), reverse=True)
    for k in row["top"]:
        assert k["knobs"] and k["workgroups"] == math.prod(k["grid"]) > 0
        assert k["operand_bytes"] > 0
        assert (k["flops"] is not None) == k["template"].startswith("matmul")


@pytest.mark.slow
def test_profile_of_the_mlp_and_cnn_workloads(tmp_path):
    out = tmp_path / "profile.json"
    assert tool.main(["--size", "small", "--only", "mlp,cnn", "--out", str(out),
                      "--top", "4", "--runs", "2", "--steps", "2"]) == 0
    result = json.loads(out.read_text())
    assert set(result["workloads"]) == {"mlp", "cnn"}
    for name, row in result["workloads"].items():
        assert "error" not in row, (name, row["error"] if "error" in row else None)
        _consistent(row, 4)
        assert row["phase"] is None and row["phase_note"]
        assert "step_ms" in row["torch"] or row["torch"]["note"]
    families = {g["family"] for g in result["workloads"]["cnn"]["by_family"]}
    assert "matmul (window)" in families  # the convolutions' windowed matmuls


def test_groups_cover_every_kernel_of_the_plan():
    nn_model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))
    batches = [(torch.randn(8, 6), torch.randint(0, 3, (8,)))
               for _ in range(2)]
    step = kernelwright.compile_training(nn_model, batches[0], F.cross_entropy,
                                         optimizer=kernelwright.optim.AdamW(lr=1e-3),
                                         max_grad_norm=1.0)
    row = tool.profile_step(step, batches, runs=2, top=3)
    kernels = step.plan.kernels
    assert row["kernels"] == len(kernels)
    assert [k["name"] for k in row["per_kernel"]] == [k.name for k in kernels]
    assert [k["family"] for k in row["per_kernel"]] == [tool.family(k) for k in kernels]
    assert step.steps == 2 + 2 + 2 + 2  # warm-up, wall, per-kernel and one-pass steps
    _consistent(row, 3)


def _kernel(name: str, key: str, **knobs) -> Kernel:
    return Kernel(name=name, source="", bindings=[], grid=(2, 3, 1), key=key, knobs=knobs)


def test_families_shapes_bytes_and_flops():
    conv = _kernel("window+matmul+add", "matmul f32[2,8,16] f32[2,16,4] -> f32[2,8,4] #ab")
    assert tool.family(conv) == "matmul (window)" and tool.template(conv) == "matmul"
    assert tool.flops(conv) == 2 * 2 * 8 * 16 * 4
    assert tool.operand_bytes(conv) == (2 * 8 * 16 + 2 * 16 * 4 + 2 * 8 * 4) * 4
    plain = _kernel("matmul", "matmul_coop f32[1,4,4] f32[1,4,4] -> f32[4,4] #cd")
    assert tool.family(plain) == "matmul_coop" and tool.flops(plain) == 2 * 4 * 4 * 4
    assert tool.family(_kernel("copy", "elementwise f32[4,8] -> f32[8,4] #1", TILE=1)) \
        == "transpose"
    copy = _kernel("copy", "elementwise f32[5] -> f32[5] #2", TILE=0)
    assert tool.family(copy) == "copy" and tool.flops(copy) is None
    assert tool.operand_bytes(copy) == 40
    half = _kernel("add+relu", "elementwise f16[6] i32[] -> f16[6] #3", TILE=0)
    assert tool.family(half) == "elementwise" and tool.operand_bytes(half) == 12 + 4 + 12
    bare = _kernel("add", "")
    assert tool.family(bare) == "unknown" and tool.operand_bytes(bare) is None


def test_torch_kernel_groups():
    got = tool.torch_groups([("gemm", 100.0), ("relu", 50.0), ("gemm", 25.0)], top=1)
    assert got["kernels"] == 3 and got["kernel_ms"] == pytest.approx(0.175)
    assert got["by_name"] == [{"name": "gemm", "count": 2, "ms": 0.125, "share": 0.7143}]
