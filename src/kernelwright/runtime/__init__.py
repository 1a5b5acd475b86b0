"""The runtime: run a Plan on a wgpu device (runtime.py).

`kernelwright.runtime.default_device()` and the other public names are re-exported here.
"""

from .runtime import (
    Device,
    Executable,
    check_limits,
    default_device,
    device_bytes,
    max_binding_bytes,
    open_device,
)

__all__ = ["Device", "Executable", "check_limits", "default_device", "device_bytes",
           "max_binding_bytes", "open_device"]
