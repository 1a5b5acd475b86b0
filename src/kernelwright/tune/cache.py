"""The tuning cache: the winning knobs per (device, kernel key), in SQLite.

The database is KERNELWRIGHT_TUNE_DB, else ~/.cache/kernelwright/tune.sqlite. One
row per device description and kernel key (template, shape bucket, digest); the
bucket is the exact operand shapes for now, so a kernel tuned at one shape says
nothing about another. A row keeps the winner's knobs, the default knobs, both
times and what was rejected on the way.

A second table, `kernels`, keeps whole kernels found by ``kernelwright optimize``
(optimize/): per device and kernel spec key (the kernel key and the shapes of every
binding) the WGSL source, its grid and knobs, the generator that wrote it, the
knobs of the compiler's kernel it beat and the times of both. `choose_knobs` hands
such a kernel to the compile path in place of the template's while the compiler
would still make the kernel it beat (`choose.fresh`).

A third table, `facts`, keeps what was measured about a device once and decides
plans on it: its waves (the workgroups of each large-product tile that it runs at
once, tune/waves.py).

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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

DEFAULT_DB = "~/.cache/kernelwright/tune.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS winners (
    device TEXT NOT NULL,         -- runtime.Device.description
    template TEXT NOT NULL,       -- kernels.KernelKey: template,
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
);
CREATE TABLE IF NOT EXISTS kernels (
    device TEXT NOT NULL,         -- runtime.Device.description
    spec_key TEXT NOT NULL,       -- optimize.spec.spec_key: kernel key + binding shapes
    source TEXT NOT NULL,         -- the winner's WGSL
    grid TEXT NOT NULL,           -- JSON [x, y, z]
    knobs TEXT,                   -- JSON: template knobs that made it (built-in generator)
    views TEXT,                   -- JSON: reads bound again as vec4 arrays (Generated.views)
    generator TEXT NOT NULL,      -- who wrote it ("builtin", "openai:MODEL", ...)
    baseline_ms REAL,             -- GPU time of the compiler's kernel
    best_ms REAL,                 -- GPU time of the winner
    problem TEXT,                 -- where it was found
    found_at TEXT,
    baseline_knobs TEXT,          -- JSON: the knobs of the compiler's kernel it beat
    PRIMARY KEY (device, spec_key)
);
CREATE TABLE IF NOT EXISTS facts (
    device TEXT NOT NULL,         -- runtime.Device.description
    name TEXT NOT NULL,           -- what was measured ("waves": tune/waves.py)
    value TEXT NOT NULL,          -- JSON
    measured_at TEXT,
    PRIMARY KEY (device, name)
)
"""
# Columns added after files were written: (table, column, type). A file that lacks one
# gains it (NULL in its earlier rows) when it is next opened.
ADDED_COLUMNS = (("kernels", "baseline_knobs", "TEXT"),)


def db_path() -> Path:
    return Path(os.environ.get("KERNELWRIGHT_TUNE_DB") or DEFAULT_DB).expanduser()


@dataclass
class Winner:
    knobs: dict
    default_knobs: dict
    default_ms: float | None
    best_ms: float | None

TRUSTED_GENERATORS = ("builtin",)  # generators whose kernels kernelwright's templates wrote


@dataclass
class KernelWinner:
    """A whole kernel found by kernelwright optimize for one device and spec key."""

    source: str
    grid: tuple[int, int, int]
    knobs: dict | None
    generator: str
    baseline_ms: float | None
    best_ms: float | None
    problem: str = ""
    views: list[int] = field(default_factory=list)  # kernels.Generated.views
    baseline_knobs: dict | None = None  # the compiler's kernel's; None: not recorded

    @property
    def trusted(self) -> bool:
        """Written by kernelwright's templates (the built-in generator's knobs and
        rewrites), so compiled without wgpu's runtime checks like the compiler's own."""
        return self.generator in TRUSTED_GENERATORS


class TuneCache:
    """The winners in one SQLite file (created on the first store)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self._stamp: tuple[int, int] | None = None
        self._winners: dict[tuple[str, str], Winner] = {}
        self._kernels: dict[tuple[str, str], KernelWinner] = {}
        self._facts: dict[tuple[str, str], object] = {}

    def exists(self) -> bool:
        return self.path.exists()

    def lookup(self, device: str, key: str) -> Winner | None:
        """The winner for `key` (str of a kernels.KernelKey) on `device`, if any."""
        return self._winners.get((device, key)) if self._fresh() else None

    def lookup_kernel(self, device: str, spec_key: str) -> KernelWinner | None:
        """The optimized kernel for `spec_key` on `device`, if any."""
        return self._kernels.get((device, spec_key)) if self._fresh() else None

    def lookup_fact(self, device: str, name: str):
        """The value measured as `name` on `device` (decoded JSON), if any."""
        return self._facts.get((device, name)) if self._fresh() else None

    def store_fact(self, device: str, name: str, value) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO facts VALUES (?, ?, ?, ?)",
                       (device, name, json.dumps(value),
                        datetime.now(timezone.utc).isoformat(timespec="seconds")))
        self._stamp = None

    def _fresh(self) -> bool:
        """Read the rows again when the file changed; False when there is no file."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        if (st.st_mtime_ns, st.st_size) != self._stamp:
            self._winners = {(r["device"], r["key"]): Winner(
                r["knobs"], r["default_knobs"], r["default_ms"], r["best_ms"])
                for r in self.rows()}
            self._kernels = {(r["device"], r["spec_key"]): KernelWinner(
                r["source"], tuple(r["grid"]), r["knobs"], r["generator"], r["baseline_ms"],
                r["best_ms"], r["problem"] or "", r["views"] or [], r["baseline_knobs"])
                for r in self.kernel_rows()}
            with self._connect() as db:
                self._facts = {(device, name): json.loads(value) for device, name, value
                               in db.execute("SELECT device, name, value FROM facts")}
            self._stamp = (st.st_mtime_ns, st.st_size)
        return True

    def store_kernel(self, device: str, spec_key: str, winner: KernelWinner) -> None:
        """Record an optimized kernel for `spec_key` on `device`."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO kernels (device, spec_key, source, grid, knobs, views, "
                "generator, baseline_ms, best_ms, problem, found_at, baseline_knobs) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (device, spec_key, winner.source, json.dumps(list(winner.grid)),
                 json.dumps(winner.knobs), json.dumps(winner.views), winner.generator,
                 winner.baseline_ms, winner.best_ms, winner.problem,
                 datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 None if winner.baseline_knobs is None else json.dumps(winner.baseline_knobs)))
        self._stamp = None

    def forget_kernel(self, device: str, spec_key: str) -> None:
        if not self.exists():
            return
        with self._connect() as db:
            db.execute("DELETE FROM kernels WHERE device = ? AND spec_key = ?",
                       (device, spec_key))
        self._stamp = None

    def kernel_rows(self) -> list[dict]:
        """Every optimized kernel, JSON columns decoded."""
        if not self.exists():
            return []
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = [dict(r) for r in db.execute("SELECT * FROM kernels")]
        for r in rows:
            for column in ("grid", "knobs", "views", "baseline_knobs"):
                r[column] = json.loads(r[column]) if r[column] else None
        return rows

    def store(self, device: str, key, winner: Winner, candidates: int,
              rejected: list[dict]) -> None:
        """Record the winner for `key` (a kernels.KernelKey) on `device`."""
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
                db.executescript(SCHEMA)
                for table, column, kind in ADDED_COLUMNS:
                    if column not in {c[1] for c in db.execute(f"PRAGMA table_info({table})")}:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
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
