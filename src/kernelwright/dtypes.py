"""The device dtypes and what each one is on the host, in WGSL and in PyTorch: the one table.

A graph value is 'f32', 'i32' (int32 and int64 tensors, int64 values within the int32
range) or 'bool' (stored as u32 in a buffer, one element a word). Every module reads
these facts here. Only numpy is imported; `torch_dtype` imports PyTorch when called.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class DeviceDtype:
    """What one device dtype is in each place it appears."""

    numpy: type  # element type of a host array of the buffer's bytes
    wgsl: str  # WGSL type of a value in a kernel
    element: str  # WGSL element type of a storage buffer holding it
    itemsize: int  # bytes per element in a buffer
    torch: str  # PyTorch dtype name of a graph output of this dtype when none is known


DEVICE_DTYPES: dict[str, DeviceDtype] = {
    "f32": DeviceDtype(np.float32, "f32", "f32", 4, "float32"),
    "i32": DeviceDtype(np.int32, "i32", "i32", 4, "int64"),
    "bool": DeviceDtype(np.uint32, "bool", "u32", 4, "bool"),
}
DTYPES = tuple(DEVICE_DTYPES)  # in promotion order: the first present wins (ir.promote)

# the device dtype holding each supported PyTorch dtype, by name ('float32', not 'torch.float32')
DEVICE_DTYPE_OF: dict[str, str] = {
    "float32": "f32", "float16": "f32", "bfloat16": "f32", "float64": "f32",
    "int64": "i32", "int32": "i32", "int16": "i32", "int8": "i32", "uint8": "i32",
    "bool": "bool",
}


def numpy_type(dtype: str) -> type:
    """The numpy element type of a host array holding a buffer of device dtype `dtype`."""
    return DEVICE_DTYPES[dtype].numpy


def wgsl_type(dtype: str) -> str:
    """The WGSL type of a value of device dtype `dtype`."""
    return DEVICE_DTYPES[dtype].wgsl


def element_type(dtype: str) -> str:
    """The WGSL element type of a storage buffer of device dtype `dtype`."""
    return DEVICE_DTYPES[dtype].element


def itemsize(dtype: str) -> int:
    """Bytes per element of a buffer of device dtype `dtype`."""
    return DEVICE_DTYPES[dtype].itemsize


def buffer_bytes(numel: int, dtype: str) -> int:
    """The size of a buffer of `numel` elements of `dtype` (at least one word: wgpu refuses
    empty bindings)."""
    return max(4, numel * itemsize(dtype))


def default_torch_name(dtype: str) -> str:
    """The PyTorch dtype name given to a graph output of `dtype` whose own is not known."""
    return DEVICE_DTYPES[dtype].torch


def device_dtype_of_torch(torch_dtype) -> str | None:
    """The device dtype holding a PyTorch dtype (a torch.dtype or its str, 'torch.int64'),
    or None where it is not supported."""
    name = str(torch_dtype)
    if not name.startswith("torch."):
        return None
    return DEVICE_DTYPE_OF.get(name[len("torch."):])


def torch_dtype(name: str):
    """The torch.dtype of a supported PyTorch dtype name ('int64' -> torch.int64)."""
    if name not in DEVICE_DTYPE_OF:
        raise KeyError(f"dtype {name!r} is not supported")
    return getattr(torch, name)
