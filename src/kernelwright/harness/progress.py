"""Progress: one line per finished problem on stderr, and a live line while one runs.

On a terminal the running problem's line is redrawn in place with its elapsed
time; elsewhere (CI logs, pipes) only the finished lines are written. Each line
carries the count ``[12/80]``, a bar, the status and the headline numbers.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

BAR_WIDTH = 20
REDRAW_S = 0.5


def status_of(result: dict[str, Any]) -> str:
    """PASS, FAIL, ERROR (the problem itself), TIMEOUT, MEMORY, OOM (an allocation
    failed: oom.py) or CRASH."""
    if result.get("correct"):
        return "PASS"
    reason = result.get("reason") or ""
    if reason in ("load", "reference"):
        return "ERROR"
    if reason == "out-of-memory":
        return "OOM"
    if reason in ("timeout", "memory", "crash"):
        return reason.upper()
    return "FAIL"


def headline(result: dict[str, Any]) -> str:
    """The numbers (or the error) worth a glance."""
    parts = []
    if result.get("correct"):
        if result.get("speedup_eager") is not None:
            parts.append(f"{result['speedup_eager']:.2f}x eager")
        if result.get("speedup_compile") is not None:
            parts.append(f"{result['speedup_compile']:.2f}x compile")
    elif result.get("error"):
        error = " ".join(str(result["error"]).split())
        parts.append(error if len(error) <= 90 else error[:87] + "...")
    if result.get("compile_s") is not None:
        parts.append(f"compile {result['compile_s']:.2f}s")
    if any("review" in flag for flag in result.get("flags", [])):
        parts.append("REVIEW")
    return "  ".join(parts)


class Progress:
    """Writes the run's progress; `live` defaults to whether the stream is a terminal.

    Several problems may run at once (``--jobs``): the live line names them all, and
    `tick` may be called from the threads that watch them.
    """

    def __init__(self, total: int, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.running: dict[str, float] = {}  # name -> when it started
        self.finished = 0
        self.last_draw = 0.0
        self.width = len(str(total))
        self.lock = threading.Lock()

    def prefix(self, index: int) -> str:
        done = int(BAR_WIDTH * index / max(1, self.total))
        return f"[{index:>{self.width}}/{self.total}] {'#' * done}{'.' * (BAR_WIDTH - done)}"

    def start(self, name: str) -> None:
        with self.lock:
            self.running[name] = time.monotonic()
        self.tick(force=True)

    def tick(self, elapsed: float | None = None, force: bool = False) -> None:
        if not self.live:
            return
        with self.lock:
            now = time.monotonic()
            if not self.running or (not force and now - self.last_draw < REDRAW_S):
                return
            self.last_draw = now
            names = "  ".join(f"{name} {now - began:.0f}s" for name, began in self.running.items())
            self.stream.write(f"\r\033[K{self.prefix(self.finished)} ....   {names}")
            self.stream.flush()

    def finish(self, result: dict[str, Any], note: str = "") -> None:
        with self.lock:
            self.running.pop(result.get("name"), None)
            self.finished += 1
            clear = "\r\033[K" if self.live else ""
            status = status_of(result)
            line = (f"{self.prefix(self.finished)} {status:<7} {result.get('name')}  "
                    f"{headline(result)}")
            self.stream.write(f"{clear}{line}{note}\n")
            self.stream.flush()
            self.last_draw = 0.0
        self.tick(force=True)
