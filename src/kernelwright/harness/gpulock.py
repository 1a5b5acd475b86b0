"""A readers-writer lock between the workers of a parallel run, so that timing stays honest.

With ``kernelwright bench --jobs N`` several workers share one GPU. Compiling and
verifying may overlap: a worker holds the lock *shared* around each single run on
the GPU outside timing (one call of the candidate or of the reference, one
comparison, moving the reference to its device). Timing holds it *exclusive*: no
other worker runs GPU work while a candidate or a reference is timed; only CPU-side
work of other workers (imports, capture, code generation, input generation,
torch.compile's compile) goes on beside it. Shared sections must stay short: a
timer waits for all of them to end, and everyone else waits for the timer (the
first H200 runs held it for whole verifications and stalled).

It is two POSIX record locks (``lockf``) on files next to each other: the gate and
the lock itself. A shared holder passes the gate (exclusive, released at once) and
then takes the lock shared; an exclusive holder takes the gate, keeps it, and waits
for the shared holders to drain, so a waiting timer is not starved by a stream of
verifiers. Record locks belong to the process: a child forked while one is held
(torch.compile's compile workers) does not hold it too — with ``flock`` it did, and
a worker waited forever on its own children. The kernel releases both when a worker
dies, however it dies. Locks are per process, so threads of one process do not
exclude each other; workers are processes. Without a path (one job) both are no-ops.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

ENV = "KERNELWRIGHT_GPU_LOCK"  # the lock file's path, set by the runner for its workers


class GpuLock:
    def __init__(self, path: str | None) -> None:
        self.path = path

    @classmethod
    def from_env(cls) -> GpuLock:
        return cls(os.environ.get(ENV) or None)

    def shared(self):
        """Held by each run on the GPU outside timing (one call, one comparison)."""
        return self._held(fcntl.LOCK_SH)

    def exclusive(self):
        """Held while timing: no other worker runs anything on the GPU."""
        return self._held(fcntl.LOCK_EX)

    @contextmanager
    def _held(self, mode: int) -> Iterator[None]:
        """Pass the gate, take the lock in `mode`; a shared holder leaves the gate at
        once, an exclusive one keeps it, so new readers queue behind a waiting timer."""
        if not self.path:
            yield
            return
        flags = os.O_RDWR | os.O_CREAT
        gate, lock = os.open(self.path + ".gate", flags, 0o644), os.open(self.path, flags, 0o644)
        try:
            fcntl.lockf(gate, fcntl.LOCK_EX)
            fcntl.lockf(lock, mode)
            if mode == fcntl.LOCK_SH:
                fcntl.lockf(gate, fcntl.LOCK_UN)
            yield
        finally:
            os.close(lock)  # closing releases the locks
            os.close(gate)
