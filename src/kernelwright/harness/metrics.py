"""Metrics: the table users judge a kernel generator by.

Per level and overall: problems, loaded (file imported and reference ran),
compiled, correct; ``fast_p`` for p in {0, 1, 1.5, 2} against eager PyTorch and,
when measured, against torch.compile (KernelBench's definition: the fraction of
*all* problems that are correct and more than p times faster; fast_0 is the
fraction correct); the geometric-mean speedup over correct problems; the median
compile time; and the problems whose speedup is over 10x, flagged for review.

`summarize` hands a plain dict to the CLI (text table), results.json and the report.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

FAST_P = (0.0, 1.0, 1.5, 2.0)
REVIEW_SPEEDUP = 10.0


def geomean(values: Iterable[float]) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else None


def fast_p(results: list[dict[str, Any]], p: float, against: str = "eager") -> float:
    """Fraction of all `results` that are correct and more than `p` times faster."""
    if not results:
        return 0.0
    key = f"speedup_{against}"
    hits = 0
    for r in results:
        if not r.get("correct"):
            continue
        value = r.get(key)
        if p == 0 or (value is not None and value > p):
            hits += 1
    return hits / len(results)


def group_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    correct = [r for r in results if r.get("correct")]
    compile_times = [r["compile_s"] for r in results
                     if r.get("compiled") and r.get("compile_s") is not None]
    has_compile = any(r.get("speedup_compile") is not None for r in results)
    return {
        "problems": len(results),
        "loaded": sum(bool(r.get("loaded")) for r in results),
        "compiled": sum(bool(r.get("compiled")) for r in results),
        "correct": len(correct),
        "fast_eager": {str(p): fast_p(results, p, "eager") for p in FAST_P},
        "fast_compile": ({str(p): fast_p(results, p, "compile") for p in FAST_P}
                         if has_compile else None),
        "geomean_speedup_eager": geomean(r.get("speedup_eager") for r in correct),
        "geomean_speedup_compile": geomean(r.get("speedup_compile") for r in correct),
        "median_compile_s": statistics.median(compile_times) if compile_times else None,
        "reasons": dict(Counter(r.get("reason") for r in results if not r.get("correct"))),
    }


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    levels = sorted({int(r.get("level") or 0) for r in results})
    flagged = []
    for r in results:
        for against in ("eager", "compile"):
            value = r.get(f"speedup_{against}")
            if r.get("correct") and value is not None and value > REVIEW_SPEEDUP:
                flagged.append({"name": r["name"], "against": against, "speedup": value})
    return {
        "levels": {str(level): group_summary([r for r in results
                                              if int(r.get("level") or 0) == level])
                   for level in levels},
        "overall": group_summary(results),
        "flagged_for_review": flagged,
    }


def fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def format_table(summary: dict[str, Any]) -> str:
    """The summary as a fixed-width text table (one row per level, then overall)."""
    with_compile = summary["overall"]["fast_compile"] is not None
    header = ["level", "problems", "loaded", "compiled", "correct"]
    header += [f"fast_{p:g}" for p in FAST_P]
    if with_compile:
        header += [f"fast_{p:g}(c)" for p in FAST_P]
    header += ["geomean", "geomean(c)"] if with_compile else ["geomean"]
    header += ["compile_s"]
    rows = [[label, *row_cells(group, with_compile)]
            for label, group in [*((f"level {k}", v) for k, v in summary["levels"].items()),
                                 ("overall", summary["overall"])]]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).rjust(width) for cell, width in zip(row, widths))
             for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    if summary["flagged_for_review"]:
        lines.append("")
        lines.append("flagged for review (speedup > 10x): " + ", ".join(
            f"{f['name']} {f['speedup']:.1f}x vs {f['against']}"
            for f in summary["flagged_for_review"]))
    return "\n".join(lines)


def row_cells(group: dict[str, Any], with_compile: bool) -> list[str]:
    cells = [str(group[k]) for k in ("problems", "loaded", "compiled", "correct")]
    cells += [fmt(100 * group["fast_eager"][str(p)], ".0f", "%") for p in FAST_P]
    if with_compile:
        fast_c = group["fast_compile"] or {}
        cells += [fmt(100 * fast_c[str(p)] if str(p) in fast_c else None, ".0f", "%")
                  for p in FAST_P]
    cells.append(fmt(group["geomean_speedup_eager"], ".2f", "x"))
    if with_compile:
        cells.append(fmt(group["geomean_speedup_compile"], ".2f", "x"))
    cells.append(fmt(group["median_compile_s"], ".2f"))
    return cells
