"""The state of an optimize run, in OUT/optimize.sqlite, written after every attempt.

Three tables: `problems` (one row per problem: "running" or "done", and the finished
ProblemReport as JSON), `attempts` (every candidate with its generator, status,
message, source, knobs, grid, times and token usage) and `kernels` (per problem and
kernel spec key: the compiler's source, knobs and template, its time, and the best
correct kernel found so far). A run that is interrupted keeps all of it; ``--resume``
reloads a kernel's attempts and best kernel and goes on from there, and skips finished
problems. `measured(kind)` reads back what knob settings measured on the kernels of a
template, for the built-in generator's order (optimize/builtin.py).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from .generator import Attempt, Measured

SCHEMA = """
CREATE TABLE IF NOT EXISTS problems (
    name TEXT PRIMARY KEY, path TEXT, status TEXT, report TEXT, updated TEXT
);
CREATE TABLE IF NOT EXISTS attempts (
    problem TEXT, spec_key TEXT, seq INTEGER, generator TEXT, status TEXT, message TEXT,
    source TEXT, knobs TEXT, grid TEXT, time_ms REAL, best_ms REAL, usage TEXT, note TEXT,
    PRIMARY KEY (problem, spec_key, seq)
);
CREATE TABLE IF NOT EXISTS kernels (
    problem TEXT, spec_key TEXT, name TEXT, baseline_source TEXT, baseline_ms REAL,
    best_source TEXT, best_grid TEXT, best_knobs TEXT, best_generator TEXT, best_ms REAL,
    best_bindings TEXT, knobs TEXT, kind TEXT,
    PRIMARY KEY (problem, spec_key)
);
"""
# columns added since the first states were written: added to an older file on open
ADDED = {"kernels": (("knobs", "TEXT"), ("kind", "TEXT"))}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class RunState:
    """OUT/optimize.sqlite; every write is committed at once."""

    def __init__(self, out: str | Path) -> None:
        self.path = Path(out) / "optimize.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.executescript(SCHEMA)
        for table, columns in ADDED.items():
            have = {r["name"] for r in self.db.execute(f"PRAGMA table_info({table})")}
            with self.db:
                for name, kind in columns:
                    if name not in have:
                        self.db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")

    def close(self) -> None:
        self.db.close()

    def reset(self, problem: str) -> None:
        """Forget everything about `problem` (a fresh, not resumed, run of it)."""
        with self.db:
            for table, column in (("problems", "name"), ("attempts", "problem"),
                                  ("kernels", "problem")):
                self.db.execute(f"DELETE FROM {table} WHERE {column} = ?", (problem,))

    def start(self, problem: str, path: str) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO problems VALUES (?, ?, 'running', NULL, ?)",
                            (problem, path, _now()))

    def finish(self, problem: str, path: str, report: dict) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO problems VALUES (?, ?, 'done', ?, ?)",
                            (problem, path, json.dumps(report), _now()))

    def report(self, problem: str) -> dict | None:
        """The finished report of `problem`, if it finished."""
        row = self.db.execute("SELECT report FROM problems WHERE name = ? AND status = 'done'",
                              (problem,)).fetchone()
        return json.loads(row["report"]) if row and row["report"] else None

    def reports(self) -> list[dict]:
        rows = self.db.execute("SELECT name, status, report FROM problems ORDER BY rowid")
        return [json.loads(r["report"]) if r["report"] else {"name": r["name"],
                                                               "status": r["status"]}
                for r in rows]

    def add_attempt(self, problem: str, spec_key: str, attempt: Attempt, usage: dict,
                    note: str = "") -> None:
        with self.db:
            seq = self.db.execute("SELECT COUNT(*) FROM attempts WHERE problem = ? AND "
                                  "spec_key = ?", (problem, spec_key)).fetchone()[0]
            self.db.execute(
                "INSERT INTO attempts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (problem, spec_key, seq, attempt.generator, attempt.status, attempt.message,
                 attempt.source, json.dumps(attempt.knobs),
                 json.dumps(list(attempt.grid)) if attempt.grid else None, attempt.time_ms,
                 attempt.best_ms, json.dumps(usage), note))

    def attempts(self, problem: str, spec_key: str) -> list[tuple[Attempt, dict]]:
        rows = self.db.execute("SELECT * FROM attempts WHERE problem = ? AND spec_key = ? "
                               "ORDER BY seq", (problem, spec_key))
        return [(Attempt(r["generator"], r["source"], json.loads(r["knobs"]),
                         tuple(json.loads(r["grid"])) if r["grid"] else None, r["status"],
                         r["message"], r["time_ms"], r["best_ms"]), json.loads(r["usage"]))
                for r in rows]

    def set_kernel(self, problem: str, spec_key: str, name: str, baseline_source: str,
                   baseline_ms: float | None, knobs: dict | None = None,
                   kind: str | None = None) -> None:
        """Record the kernel (once; its best stays as stored) with the compiler's knobs
        and its template."""
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO kernels (problem, spec_key, name, "
                            "baseline_source, baseline_ms, knobs, kind) VALUES "
                            "(?, ?, ?, ?, ?, ?, ?)",
                            (problem, spec_key, name, baseline_source, baseline_ms,
                             json.dumps(knobs) if knobs is not None else None, kind))
            if baseline_ms is not None:
                self.db.execute("UPDATE kernels SET baseline_ms = ? WHERE problem = ? AND "
                                "spec_key = ? AND baseline_ms IS NULL",
                                (baseline_ms, problem, spec_key))

    def set_best(self, problem: str, spec_key: str, source: str | None, grid, knobs,
                 generator: str | None, best_ms: float | None, bindings: list[dict]) -> None:
        with self.db:
            self.db.execute(
                "UPDATE kernels SET best_source = ?, best_grid = ?, best_knobs = ?, "
                "best_generator = ?, best_ms = ?, best_bindings = ? WHERE problem = ? AND "
                "spec_key = ?",
                (source, json.dumps(list(grid)) if grid else None, json.dumps(knobs),
                 generator, best_ms, json.dumps(bindings), problem, spec_key))

    def kernel(self, problem: str, spec_key: str) -> dict | None:
        row = self.db.execute("SELECT * FROM kernels WHERE problem = ? AND spec_key = ?",
                              (problem, spec_key)).fetchone()
        if row is None:
            return None
        data = dict(row)
        data["best_grid"] = tuple(json.loads(data["best_grid"])) if data["best_grid"] else None
        for column in ("best_knobs", "best_bindings"):
            data[column] = json.loads(data[column]) if data[column] else None
        return data

    def measured(self, kind: str, besides: tuple[str, str] | None = None) -> list[Measured]:
        """Every correct candidate with knobs on a kernel of template `kind` (but the
        kernel `besides`, (problem, spec key)) timed against the compiler's kernel: the
        attempts up to the kernel's first improvement (after it they were timed against
        the winner)."""
        found: list[Measured] = []
        kernels = self.db.execute("SELECT problem, spec_key, knobs FROM kernels WHERE "
                                  "kind = ? AND knobs IS NOT NULL", (kind,)).fetchall()
        for k in kernels:
            if besides == (k["problem"], k["spec_key"]):
                continue
            own = json.loads(k["knobs"])
            for a in self.db.execute("SELECT status, knobs, time_ms, best_ms FROM attempts "
                                     "WHERE problem = ? AND spec_key = ? ORDER BY seq",
                                     (k["problem"], k["spec_key"])):
                knobs = json.loads(a["knobs"]) if a["knobs"] else None
                if a["status"] in ("slower", "improved") and knobs and a["time_ms"] \
                        and a["best_ms"]:
                    found.append(Measured(own, knobs, a["best_ms"] / a["time_ms"]))
                if a["status"] == "improved":
                    break
        return found
