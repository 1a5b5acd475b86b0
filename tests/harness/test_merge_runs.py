"""tools/merge_suite_runs.py: the last run that has a problem gives its result."""

from __future__ import annotations

import json
import runpy
import sqlite3
from pathlib import Path

from kernelwright.harness import runner
from kernelwright.harness.worker import WorkerConfig, new_result

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "merge_suite_runs.py"


def fake_run(folder: Path, key: str, speedups: dict[str, float]) -> None:
    folder.mkdir()
    store = runner.ResultStore(folder / "results.sqlite")
    store.db.execute("INSERT INTO runs VALUES (?, ?, ?)", (key, "{}", "now"))
    results = []
    for name, speedup in speedups.items():
        result = new_result(WorkerConfig(path="p.py", name=name, level=1))
        result.update(loaded=True, compiled=True, correct=True, compile_s=0.5,
                      time_ms=1.0, ref_eager_ms=speedup, speedup_eager=speedup)
        store.put(result, key)
        results.append(result)
    store.close()
    document = {"created": key, "device": "d", "precision": "strict", "problems": results}
    (folder / "results.json").write_text(json.dumps(document))


def test_merge_takes_each_problem_from_the_last_run_that_has_it(tmp_path: Path) -> None:
    fake_run(tmp_path / "a", "key-a", {"level1/1_x": 1.0, "level1/2_y": 2.0})
    fake_run(tmp_path / "b", "key-b", {"level1/2_y": 4.0, "level1/3_z": 8.0})
    merge = runpy.run_path(str(SCRIPT))["main"]
    out = tmp_path / "out"
    assert merge(["merge", str(out), str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    merged = json.loads((out / "results.json").read_text())
    assert {r["name"]: r["speedup_eager"] for r in merged["problems"]} == {
        "level1/1_x": 1.0, "level1/2_y": 4.0, "level1/3_z": 8.0}
    assert [len(m["problems"]) for m in merged["merged_from"]] == [1, 2]
    assert abs(merged["summary"]["overall"]["geomean_speedup_eager"] - 32 ** (1 / 3)) < 1e-9
    db = sqlite3.connect(out / "results.sqlite")
    assert sorted(db.execute("SELECT name, settings FROM results")) == [
        ("level1/1_x", "key-a"), ("level1/2_y", "key-b"), ("level1/3_z", "key-b")]
    assert sorted(row[0] for row in db.execute("SELECT settings FROM runs")) == ["key-a",
                                                                              "key-b"]
    db.close()
    assert (out / "report.html").read_text().startswith("<!")


def test_a_merged_run_merged_again_keeps_each_problem_with_its_own_run(tmp_path: Path) -> None:
    fake_run(tmp_path / "a", "key-a", {"level1/1_x": 1.0, "level1/2_y": 2.0})
    fake_run(tmp_path / "b", "key-b", {"level1/3_z": 8.0})
    fake_run(tmp_path / "c", "key-c", {"level1/2_y": 4.0})
    merge = runpy.run_path(str(SCRIPT))["main"]
    first = tmp_path / "first"
    assert merge(["merge", str(first), str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = tmp_path / "out"
    assert merge(["merge", str(out), str(first), str(tmp_path / "c")]) == 0
    merged = json.loads((out / "results.json").read_text())
    assert [(Path(m["run"]).name, m["problems"]) for m in merged["merged_from"]] == [
        ("a", ["level1/1_x"]), ("b", ["level1/3_z"]), ("c", ["level1/2_y"])]
