"""fast_p, geometric means and the summary table."""

from __future__ import annotations

import math

import pytest

from kernelwright.harness import metrics


def result(name: str, level: int, correct: bool, eager: float | None = None,
           compiled: float | None = None, compile_s: float | None = 0.5) -> dict:
    return {"name": name, "level": level, "loaded": True, "compiled": compile_s is not None,
            "correct": correct, "speedup_eager": eager, "speedup_compile": compiled,
            "compile_s": compile_s, "reason": None if correct else "mismatch"}


RESULTS = [
    result("a", 1, True, 0.5, 0.4, 0.2),
    result("b", 1, True, 2.0, 1.2, 0.4),
    result("c", 1, False, compile_s=1.0),
    result("d", 2, True, 4.0, 3.0, 2.0),
    result("e", 2, True, 12.0, 11.0, 3.0),
    {"name": "f", "level": 2, "loaded": False, "compiled": False, "correct": False,
     "reason": "load"},
]


def test_geomean() -> None:
    assert metrics.geomean([1, 4]) == pytest.approx(2.0)
    assert metrics.geomean([2, None, 8]) == pytest.approx(4.0)
    assert metrics.geomean([]) is None


def test_fast_p_counts_all_problems_in_the_denominator() -> None:
    level1 = RESULTS[:3]
    assert metrics.fast_p(level1, 0) == pytest.approx(2 / 3)
    assert metrics.fast_p(level1, 1) == pytest.approx(1 / 3)
    assert metrics.fast_p(level1, 2) == 0  # "more than p times faster": 2.0 is not > 2
    assert metrics.fast_p(RESULTS, 1.5, "compile") == pytest.approx(2 / 6)
    assert metrics.fast_p([], 1) == 0


def test_summary_per_level_and_overall() -> None:
    summary = metrics.summarize(RESULTS)
    level1, level2, overall = summary["levels"]["1"], summary["levels"]["2"], summary["overall"]
    assert (level1["problems"], level1["loaded"], level1["compiled"], level1["correct"]) == (
        3, 3, 3, 2)
    assert (level2["problems"], level2["loaded"], level2["correct"]) == (3, 2, 2)
    assert level1["geomean_speedup_eager"] == pytest.approx(1.0)
    assert overall["geomean_speedup_eager"] == pytest.approx(math.prod([0.5, 2, 4, 12]) ** 0.25)
    assert overall["fast_eager"]["1.0"] == pytest.approx(3 / 6)
    assert overall["fast_compile"]["2.0"] == pytest.approx(2 / 6)
    assert overall["median_compile_s"] == pytest.approx(1.0)
    assert overall["reasons"] == {"mismatch": 1, "load": 1}
    assert summary["flagged_for_review"] == [
        {"name": "e", "against": "eager", "speedup": 12.0},
        {"name": "e", "against": "compile", "speedup": 11.0},
    ]


def test_table_has_a_row_per_level_and_overall() -> None:
    table = metrics.format_table(metrics.summarize(RESULTS))
    lines = table.splitlines()
    assert lines[0].split()[:5] == ["level", "problems", "loaded", "compiled", "correct"]
    assert "fast_1.5(c)" in lines[0]
    assert lines[2].split()[:2] == ["level", "1"] and lines[4].startswith("overall")
    assert "flagged for review" in table and "e 12.0x vs eager" in table


def test_without_compile_reference_the_table_has_no_compile_columns() -> None:
    plain = [dict(r, speedup_compile=None) for r in RESULTS]
    summary = metrics.summarize(plain)
    assert summary["overall"]["fast_compile"] is None
    assert "(c)" not in metrics.format_table(summary)
