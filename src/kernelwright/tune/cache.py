"""The tuning cache: the winning knobs per (device, kernel key), in SQLite.

The database is KERNELWRIGHT_TUNE_DB, else ~/.cache/kernelwright/tune.sqlite. One
row per device description and kernel key (template, shape bucket, digest); the
bucket is the exact operand shapes for now, so a kernel tuned at one shape says
nothing about another. A row keeps the winner's knobs, the default knobs, both
times and what was rejected on the way.

Every compile looks kernels up, so lookups are cheap: the rows are read into a dict
once and again only when the file changes (one stat per lookup); without a file a
lookup costs one stat and opens nothing.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

DEFAULT_DB = "~/.cache/kernelwright/tune.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS winners (
    device TEXT NOT NULL,         -- runtime.Device.description
    template TEXT NOT NULL,       -- templates.KernelKey: template,
    bucket TEXT NOT NULL,         --   operand shapes (the exact shapes for now),
    digest TEXT NOT NULL,         --   digest of functions, attributes, template text
    knobs TEXT NOT NULL,          -- JSON: the winner's knobs
    default_knobs TEXT NOT NULL,  -- JSON: the heuristic's knobs
    default_ms REAL,              -- median GPU time of the default kernel
    best_ms REAL,                 -- median GPU time of the winner
    candidates INTEGER,           -- settings tried, the default included
    rejected TEXT,                -- JSON: [{knobs, status, error}] of discarded candidates
    tuned_at TEXT,
    PRIMARY KEY (device, template, bucket, digest)
)
"""


def db_path() -> Path:
    return Path(os.environ.get("KERNELWRIGHT_TUNE_DB") or DEFAULT_DB).expanduser()


@dataclass
class Winner:
    knobs: dict
    default_knobs: dict
    default_ms: float | None
    best_ms: float | None


class TuneCache:
    """The winners in one SQLite file (created on the first store)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self._stamp: tuple[int, int] | None = None
        self._winners: dict[tuple[str, str], Winner] = {}

    def exists(self) -> bool:
        return self.path.exists()

    def lookup(self, device: str, key: str) -> Winner | None:
        """The winner for `key` (str of a templates.KernelKey) on `device`, if any."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        if (st.st_mtime_ns, st.st_size) != self._stamp:
            self._winners = {(r["device"], r["key"]): Winner(
                r["knobs"], r["default_knobs"], r["default_ms"], r["best_ms"])
                for r in self.rows()}
            self._stamp = (st.st_mtime_ns, st.st_size)
        return self._winners.get((device, key))

    def store(self, device: str, key, winner: Winner, candidates: int,
              rejected: list[dict]) -> None:
        """Record the winner for `key` (a templates.KernelKey) on `device`."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO winners VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (device, key.template, key.bucket, key.digest, json.dumps(winner.knobs),
                 json.dumps(winner.default_knobs), winner.default_ms, winner.best_ms,
                 candidates, json.dumps(rejected),
                 datetime.now(timezone.utc).isoformat(timespec="seconds")))
        self._stamp = None  # read the file again at the next lookup

    def forget(self, device: str, key) -> None:
        if not self.exists():
            return
        with self._connect() as db:
            db.execute("DELETE FROM winners WHERE device = ? AND template = ? AND bucket = ? "
                       "AND digest = ?", (device, key.template, key.bucket, key.digest))
        self._stamp = None

    def rows(self) -> list[dict]:
        """Every row, JSON columns decoded, with "key" (the str of its KernelKey)."""
        if not self.exists():
            return []
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = [dict(r) for r in db.execute("SELECT * FROM winners")]
        for r in rows:
            r["key"] = f"{r['template']} {r['bucket']} #{r['digest']}"
            for column in ("knobs", "default_knobs", "rejected"):
                r[column] = json.loads(r[column]) if r[column] else None
        return rows

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection for one transaction (committed on success), then closed."""
        db = sqlite3.connect(self.path, timeout=30)
        try:
            with db:
                db.execute(SCHEMA)
                yield db
        finally:
            db.close()


_CACHES: dict[Path, TuneCache] = {}


def default_cache() -> TuneCache:
    """The cache at db_path(), one object per path for the process."""
    path = db_path()
    if path not in _CACHES:
        _CACHES[path] = TuneCache(path)
    return _CACHES[path]
