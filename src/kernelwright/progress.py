"""Progress of a long compile on stderr, silent for fast ones.

A compile runs in stages (capture, schedule, pipelines, ...). `Progress.stage` times
one: a stage still running after `after` seconds prints a line saying what runs, and
then one with its time when it ends; a stage that ends sooner prints nothing.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO


class Progress:
    """Reports the stages of one compile of `what` that run longer than `after` seconds
    (None: none) to `stream` (None: sys.stderr at the time of writing)."""

    def __init__(self, what: str, after: float | None = 2.0,
                 stream: TextIO | None = None) -> None:
        self.what = what
        self.after = after
        self.stream = stream

    def _write(self, line: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(f"kernelwright: {self.what}: {line}\n")
        stream.flush()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the stage `name` of the compile run in the with-block."""
        if self.after is None:
            yield
            return
        t0 = time.perf_counter()
        lock = threading.Lock()
        state = {"reported": False, "done": False}

        def report() -> None:
            with lock:
                if not state["done"]:
                    state["reported"] = True
                    self._write(f"{name}...")

        timer = threading.Timer(self.after, report)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            with lock:
                state["done"] = True
                if state["reported"]:
                    self._write(f"{name} done in {time.perf_counter() - t0:.1f} s")


QUIET = Progress("", after=None)  # reports nothing
