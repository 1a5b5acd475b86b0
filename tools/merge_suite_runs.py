"""Merge the output folders of several `kernelwright bench` runs into one.

    python tools/merge_suite_runs.py OUT RUN [RUN ...]

Each RUN is a folder `kernelwright bench --out` wrote (results.json, results.sqlite).
A problem's result is taken from the last RUN that has it. OUT gets results.json
(the last run's description, a `merged_from` list of the runs with the problems taken
from each; a RUN that is itself a merge contributes its own list, so OUT may be one of
the RUNs' copies), the summary recomputed), results.sqlite (each result's row copied as its run
stored it, with that run's settings key) and report.html. Used when the suite on the
H200 takes more than one device call, or when a change reruns only the problems whose
kernels it changed; say which in the folder's README.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from kernelwright.harness import metrics, report
from kernelwright.harness.runner import ResultStore


def stored_rows(run: Path, results: list[dict]) -> dict[str, tuple]:
    """Each result's row in the run's SQLite (the one holding the same result)."""
    db = sqlite3.connect(run / "results.sqlite")
    columns = [c[1] for c in db.execute("PRAGMA table_info(results)")]
    rows = {}
    for result in results:
        for row in db.execute("SELECT * FROM results WHERE name = ?", (result["name"],)):
            if json.loads(row[columns.index("result")]) == json.loads(json.dumps(result)):
                rows[result["name"]] = row
    db.close()
    missing = [r["name"] for r in results if r["name"] not in rows]
    if missing:
        raise SystemExit(f"{run}: results.json and results.sqlite disagree on {missing[:5]}")
    return rows


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, runs = Path(argv[1]), [Path(a) for a in argv[2:]]
    chosen: dict[str, tuple[int, dict, tuple]] = {}
    documents = []
    for index, run in enumerate(runs):
        document = json.loads((run / "results.json").read_text())
        documents.append(document)
        rows = stored_rows(run, document["problems"])
        for result in document["problems"]:
            chosen[result["name"]] = (index, result, rows[result["name"]])
    order = sorted(chosen, key=lambda name: (chosen[name][1].get("level") or 0, name))
    results = [chosen[name][1] for name in order]
    out.mkdir(parents=True, exist_ok=True)
    db_path = out / "results.sqlite"
    db_path.unlink(missing_ok=True)
    ResultStore(db_path).close()  # the schema
    db = sqlite3.connect(db_path)
    for name in order:
        row = chosen[name][2]
        db.execute(f"INSERT INTO results VALUES ({', '.join('?' * len(row))})", row)
    keys = {chosen[name][2][1] for name in order}  # the settings keys used, with their runs
    for run in runs:
        source = sqlite3.connect(run / "results.sqlite")
        for row in source.execute("SELECT * FROM runs"):
            if row[0] in keys:
                db.execute("INSERT OR IGNORE INTO runs VALUES (?, ?, ?)", row)
        source.close()
    db.commit()
    db.close()
    summary = metrics.summarize(results)
    info = {key: value for key, value in documents[-1].items()
            if key not in ("summary", "problems", "settings")}
    info["merged_from"] = []
    for i, run in enumerate(runs):
        taken = [name for name in order if chosen[name][0] == i]
        # a RUN that is itself a merge keeps its runs: each problem stays with its own
        parts = documents[i].get("merged_from") or [
            {"run": str(run), "created": documents[i].get("created"), "problems": taken}]
        for part in parts:
            kept = [name for name in part["problems"] if name in taken]
            if kept:
                info["merged_from"].append({**part, "problems": kept})
    document = {**info, "settings": documents[-1].get("settings"), "summary": summary,
                "problems": results}
    (out / "results.json").write_text(json.dumps(document, indent=1, default=str))
    report.write_report(out / "report.html", info, summary, results)
    print(metrics.format_table(summary))
    for entry in info["merged_from"]:
        print(f"{len(entry['problems'])} problems from {entry['run']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
