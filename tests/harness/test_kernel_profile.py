"""tools/kernel_profile.py: each kernel's time of a suite problem, under compiler settings."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_profile_of_a_problem_under_two_settings(tmp_path):
    out = tmp_path / "profile.json"
    variants = {"default": {}, "split": {"kernels.cuts.SPLIT_K_MIN": 16,
                                         "kernels.cuts.SPLIT_K_CHUNK": 8}}
    run = profile(variants, out)
    assert run.returncode == 0, run.stderr[-2000:]
    row = json.loads(out.read_text())["problems"]["level2/001_linear_gelu_scale_residual"]
    assert row["eager_ms"] > 0
    for name in ("default", "split"):
        r = row[name]
        assert r["total_ms"] > 0 and r["kernels"] == sum(k["count"] for k in r["by_name"])
    assert row["split"]["kernels"] > row["default"]["kernels"]  # the split-K sum's kernel


def test_a_misspelt_setting_is_refused_before_any_work(tmp_path):
    run = profile({"bad": {"lower.linalg.NO_SUCH_CONSTANT": 1}}, tmp_path / "p.json")
    assert run.returncode != 0 and "has no constant NO_SUCH_CONSTANT" in run.stderr
    assert not (tmp_path / "p.json").exists()


def profile(variants: dict, out: Path):
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "kernel_profile.py"), "--only", "level2/001",
         "--size", "small", "--variants", json.dumps(variants), "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": ""})
