"""The loader: discovery, levels, SIZES, and every broken file reported with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import bench_suite as s
import pytest

from kernelwright.harness import problems, worker


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    return s.write_suite(tmp_path / "suite", {
        "level1/1_good.py": s.RELU,
        "level1/2_import_error.py": s.IMPORT_ERROR,
        "level1/10_missing_get_inputs.py": s.MISSING_GET_INPUTS,
        "level1/__init__.py": "",
        "level2/1_reference_raises.py": s.REFERENCE_RAISES,
        "level2/2_init_raises.py": s.INIT_RAISES,
        "level2/__pycache__/junk.py": "raise SystemExit",
        "tools/helper.py": "raise SystemExit('not a problem')",
    })


def test_discover_by_level_in_natural_order(suite: Path) -> None:
    found = problems.discover(suite)
    assert [(p.name, p.level) for p in found] == [
        ("level1/1_good", 1), ("level1/2_import_error", 1),
        ("level1/10_missing_get_inputs", 1),
        ("level2/1_reference_raises", 2), ("level2/2_init_raises", 2),
    ]


def test_flat_suite_is_level_zero(tmp_path: Path) -> None:
    s.write_suite(tmp_path, {"a.py": s.RELU, "sub/b.py": s.SOFTMAX})
    assert [(p.name, p.level) for p in problems.discover(tmp_path)] == [("a", 0), ("sub/b", 0)]
    single = problems.discover(tmp_path / "a.py")
    assert [p.name for p in single] == ["a"]


def test_kernelbench_checkout_layout(tmp_path: Path) -> None:
    """A checkout: problems under KernelBench/levelN, code elsewhere that is not a problem."""
    s.write_suite(tmp_path, {
        "KernelBench/level1/1_Square_matrix_multiplication_.py": s.RELU,
        "KernelBench/level3/5_AlexNet.py": s.RELU,
        "src/eval.py": "raise SystemExit",
        "tools/run_and_check.py": "raise SystemExit",
    })
    assert [(p.name, p.level) for p in problems.discover(tmp_path)] == [
        ("KernelBench/level1/1_Square_matrix_multiplication_", 1),
        ("KernelBench/level3/5_AlexNet", 3),
    ]


def test_missing_suite_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        problems.discover(tmp_path / "nowhere")


def test_sizes_are_applied(suite: Path) -> None:
    good = problems.discover(suite)[0]
    small = problems.load(good, "small")
    assert small.size == "small" and small.inputs(0)[0].shape == (8, 32)
    full = problems.load(good, "full")
    assert full.inputs(0)[0].shape == (64, 32)
    as_is = problems.load(good, None)
    assert as_is.size is None and as_is.inputs(0)[0].shape == (64, 32)
    assert problems.load(good, "small").inputs(3)[0].equal(small.inputs(3)[0])
    # the bench draws on the reference's device: that device is the default meanwhile
    assert small.inputs(3, "meta")[0].device.type == "meta"


def test_file_without_sizes_is_used_as_it_is(tmp_path: Path) -> None:
    s.write_suite(tmp_path, {"softmax.py": s.SOFTMAX})
    loaded = problems.load(problems.discover(tmp_path)[0], "small")
    assert loaded.size is None and loaded.inputs(0)[0].shape == (8, 64)


def test_broken_files_raise_problem_errors_with_reasons(suite: Path) -> None:
    by_name = {p.name: p for p in problems.discover(suite)}
    with pytest.raises(problems.ProblemError, match="import failed: ModuleNotFoundError"):
        problems.load(by_name["level1/2_import_error"])
    with pytest.raises(problems.ProblemError, match="missing get_inputs"):
        problems.load(by_name["level1/10_missing_get_inputs"])


def evaluate(problem: problems.Problem, tmp_path: Path) -> dict:
    cfg = worker.WorkerConfig(path=str(problem.path), name=problem.name, level=problem.level,
                              size="small", trials=2, candidate=s.CANDIDATES)
    result = worker.new_result(cfg)
    path = tmp_path / "result.json"
    worker.evaluate(cfg, result, path)
    assert json.loads(path.read_text())["name"] == problem.name  # partial results written
    return result


def test_each_broken_problem_is_reported_and_the_good_one_runs(suite: Path,
                                                               tmp_path: Path) -> None:
    results = {p.name: evaluate(p, tmp_path) for p in problems.discover(suite)}
    good = results["level1/1_good"]
    assert good["loaded"] and good["correct"], good["error"]
    assert good["time_ms"] > 0 and good["ref_eager_ms"] > 0 and good["speedup_eager"] > 0
    expected = {
        "level1/2_import_error": ("load", "kernelwright_no_such_module"),
        "level1/10_missing_get_inputs": ("load", "missing get_inputs"),
        "level2/1_reference_raises": ("reference", "the reference is broken"),
        "level2/2_init_raises": ("reference", "TypeError"),
    }
    for name, (reason, words) in expected.items():
        result = results[name]
        assert not result["loaded"] and not result["correct"]
        assert result["reason"] == reason, result
        assert words in result["error"]
