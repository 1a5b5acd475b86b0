"""The GPU the harness runs on: whether it is a hardware one, the problem size that
suits it (bench's and bench --train's defaults), and PyTorch's peak GPU memory over a
reference's work (`torch_peak_bytes`, bench's and bench --train's "torch mem")."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from ..runtime import runtime

T = TypeVar("T")


def no_hardware_gpu() -> str | None:
    """Why there is no hardware GPU to run on (a software driver, no adapter), or None."""
    try:
        device = runtime.default_device()
    except Exception as exc:  # noqa: BLE001 - no adapter at all
        return f"no wgpu device ({type(exc).__name__})"
    return f"software GPU driver ({device.description})" if device.is_software else None


def default_size() -> tuple[str, str]:
    """"full" on a real GPU with CUDA beside it to time the reference, else "small"."""
    if not torch.cuda.is_available():
        return "small", "no CUDA for the reference"
    why = no_hardware_gpu()
    if why:
        return "small", why

    return "full", runtime.default_device().description


def torch_peak_bytes(run: Callable[[], T]) -> tuple[T, int | None]:
    """`run()`'s value and torch.cuda.max_memory_allocated over it, the peak reset first
    (so what the process holds on the GPU when it starts counts too); None without CUDA."""
    if not torch.cuda.is_available():
        return run(), None
    torch.cuda.reset_peak_memory_stats()
    value = run()
    return value, int(torch.cuda.max_memory_allocated())
