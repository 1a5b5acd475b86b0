"""Out-of-memory errors: recognised wherever a job raises them, and reported as such.

An allocation that fails is not the problem's fault nor the candidate's: with
``--jobs`` it is often a neighbour job's memory. PyTorch raises
``torch.cuda.OutOfMemoryError`` (or a RuntimeError saying "out of memory" from a
library such as cuBLAS), wgpu ``GPUOutOfMemoryError`` or a Vulkan
``ERROR_OUT_OF_DEVICE_MEMORY``, Python ``MemoryError``. The harness's broad
``except`` blocks (a reference that cannot run on a distribution, a candidate that
raised, a factory that failed) call `reraise_oom` first, so that such an error
leaves verification as `OutOfMemory` and the worker reports it with the reason
``OOM_REASON``, which the runner retries alone (runner.py).
"""

from __future__ import annotations

OOM_REASON = "out-of-memory"
# Lower-case fragments of the messages of allocation failures (PyTorch, CUDA libraries,
# wgpu, Vulkan); matched on the message of each exception in the chain.
MARKERS = ("out of memory", "outofmemory", "out_of_device_memory", "out_of_host_memory",
           "not enough memory", "cublas_status_alloc_failed", "failed to allocate")
CHAIN_LIMIT = 8


class OutOfMemory(Exception):
    """An allocation failed in a job; `where` says in what (a stage, "candidate", ...)."""

    def __init__(self, where: str, detail: str) -> None:
        super().__init__(f"out of memory in {where}: {detail}")
        self.where = where
        self.detail = detail


def is_out_of_memory(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from (``__cause__``), is a failed
    allocation: by class (MemoryError, torch's and wgpu's OutOfMemoryError) or message."""
    for _ in range(CHAIN_LIMIT):
        if exc is None:
            return False
        if isinstance(exc, (MemoryError, OutOfMemory)):
            return True
        if any("OutOfMemory" in cls.__name__ for cls in type(exc).__mro__):
            return True
        if any(marker in str(exc).lower() for marker in MARKERS):
            return True
        exc = exc.__cause__
    return False


def reraise_oom(exc: BaseException, where: str) -> None:
    """Raise `exc` as `OutOfMemory` (from it) when it is an out-of-memory error; else
    return, and the caller handles it as it would any other error."""
    if isinstance(exc, OutOfMemory):
        raise exc
    if is_out_of_memory(exc):
        text = f"{type(exc).__name__}: {exc}".strip()
        raise OutOfMemory(where, text if len(text) <= 1000 else text[:1000] + " ...") from exc


def gib(nbytes: float | None) -> str:
    """Bytes as GiB, for messages."""
    return "unknown" if nbytes is None else f"{nbytes / 2**30:.2f} GiB"
