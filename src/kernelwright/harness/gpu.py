"""The GPU the harness runs on: whether it is a hardware one, and the problem size
that suits it (bench's and bench --train's defaults)."""

from __future__ import annotations

import torch

from ..runtime import runtime


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
