"""`kernelwright bench --size small` end to end with the real compiler, on whatever
wgpu adapter is here (the software Vulkan driver in CI)."""

from __future__ import annotations

import json
from pathlib import Path

import bench_suite as s
import pytest

import kernelwright
from kernelwright.cli import main as cli

pytestmark = pytest.mark.skipif(not hasattr(kernelwright, "compile"),
                                reason="kernelwright.compile does not exist yet")


@pytest.mark.slow
def test_bench_small_with_the_compiler(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = s.write_suite(tmp_path / "suite", {"level2/1_linear_relu.py": s.LINEAR})
    out = tmp_path / "out"
    code = cli.main(["bench", str(suite), "--size", "small", "--out", str(out),
                     "--trials", "3", "--timeout", "240"])
    assert code == 0
    document = json.loads((out / "results.json").read_text())
    for problem in document["problems"]:
        assert problem["correct"], problem["error"]
        assert problem["compile_s"] > 0 and problem["time_ms"] > 0
        assert problem["speedup_eager"] > 0
        assert problem["time"]["source"] in ("gpu-timestamps", "wall-clock")
        assert problem["alt_shape"] and "not applicable" not in problem["alt_shape"]
    assert not document["device"].startswith(("none", "unknown")), document["device"]
    assert document["summary"]["overall"]["correct"] == 1
    assert (out / "results.sqlite").exists() and (out / "report.html").exists()
    table = capsys.readouterr().out
    assert "overall" in table and "geomean" in table


def test_a_compiled_softmax_over_a_long_row_passes_with_a_scaled_tolerance() -> None:
    """Every probability of a 50000-column softmax of uniform values is ~2e-5, below the
    fp32 atol: the compiled kernel is judged with atol scaled to max |ref| and passes,
    flagged; on the software driver too."""
    import torch

    from kernelwright.harness.verify import verify

    def own(seed: int) -> list:
        torch.manual_seed(seed)
        return [torch.rand(2, 50000)]

    class Softmax(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(x, dim=1)

    verdict = verify(Softmax().eval(), own, lambda m, x: kernelwright.compile(m, x),
                     trials=3, alt_shape=False).verdict
    assert verdict.correct, verdict.error
    assert verdict.degenerate == "tiny"
    assert any(flag.startswith("scaled-tolerance") for flag in verdict.flags)
