"""The device dtypes and what each one is on the host, in WGSL and in PyTorch: the one table.

A graph value is 'f32', 'i32' (int32 and int64 tensors, int64 values within the int32
range) or 'bool' (stored as u32 in a buffer, one element a word). A buffer holds one of
those or a *packed* half type, 'f16' or 'bf16': a float16 or bfloat16 tensor of the
user's (an input, a weight, an output) stored as it is, two elements to a u32 word
(element 2k in the low half), read as f32 (codegen.read_packed) and narrowed from f32
with rounding to nearest even (kernels/half.wgsl). Every module reads these facts here.
"""

from __future__ import annotations

import warnings
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
    # storage only: a value read from these buffers is f32 (host bf16 as its uint16 bits)
    "f16": DeviceDtype(np.float16, "f32", "u32", 2, "float16"),
    "bf16": DeviceDtype(np.uint16, "f32", "u32", 2, "bfloat16"),
}
# the dtypes a graph value has, in promotion order: the first present wins (ir.promote)
DTYPES = ("f32", "i32", "bool")
PACKED = ("f16", "bf16")  # buffer dtypes of two elements a word

# the packed buffer dtype storing a PyTorch dtype as it is where it is not its device dtype
STORAGE_OF: dict[str, str] = {"float16": "f16", "bfloat16": "bf16"}

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
    """The size of a buffer of `numel` elements of `dtype`, in whole words (at least one:
    wgpu refuses empty bindings)."""
    return max(4, -(-numel * itemsize(dtype) // 4) * 4)


def is_packed(dtype: str) -> bool:
    """Whether buffers of `dtype` hold two elements a word (f16, bf16)."""
    return dtype in PACKED


def fills_words(dtype: str, count: int) -> bool:
    """Whether runs of `count` elements of a buffer of `dtype` from an element at a
    multiple of `count` fill whole u32 words (each starting on a word): any unpacked
    buffer; a packed half one for an even count (a put's slices written a word at a time)."""
    return not is_packed(dtype) or count % 2 == 0


def storage_of_torch(torch_dtype) -> str | None:
    """The packed buffer dtype storing a PyTorch dtype as it is ('torch.float16' -> 'f16'),
    or None where its buffers hold its device dtype."""
    return STORAGE_OF.get(str(torch_dtype).replace("torch.", ""))


def to_storage(array: np.ndarray, dtype: str) -> np.ndarray:
    """A host array as buffer dtype `dtype` holds it: f32 values narrowed to f16 or to
    bf16's bits with rounding to nearest even (NaN stays NaN), as PyTorch rounds; in its
    own dtype, the array as it is (a transposed view too: the upload makes it contiguous)."""
    if dtype == "bf16":
        # PyTorch's own conversion (one pass; numpy's bit arithmetic took five, 10x the
        # time for a model's weights), a NaN kept as its sign and payload, quieted
        f32 = np.ascontiguousarray(array, dtype=np.float32)
        with warnings.catch_warnings():  # a read-only array: read, never written
            warnings.simplefilter("ignore", UserWarning)
            out = torch.from_numpy(f32).to(torch.bfloat16).view(torch.int16).numpy()
        out = out.view(np.uint16)
        nan = np.isnan(f32)
        if nan.any():
            out[nan] = (f32[nan].view(np.uint32) >> 16 | 0x40).astype(np.uint16)
        return out
    return np.asarray(array, dtype=numpy_type(dtype))  # (a view stays one: runtime copies)


def host_array(t: torch.Tensor, dtype: str) -> np.ndarray:
    """The host array of a float16 or bfloat16 tensor stored as packed `dtype` as it is
    (bf16: its uint16 bits)."""
    t = t.detach().cpu().contiguous()
    if dtype == "bf16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    return t.to(torch.float16).numpy()


def host_tensor(a: np.ndarray, dtype: str) -> torch.Tensor:
    """A tensor from a host array of a packed buffer dtype (bf16: uint16 bits)."""
    if dtype == "bf16":
        return torch.from_numpy(np.array(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(a))


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


def holds(buffer_dtype: str, torch_name: str) -> bool:
    """Whether a buffer of `buffer_dtype` may hold a tensor of PyTorch dtype `torch_name`
    (its device dtype, or its packed storage)."""
    return buffer_dtype in (DEVICE_DTYPE_OF.get(torch_name), STORAGE_OF.get(torch_name))


def torch_dtype(name: str):
    """The torch.dtype of a supported PyTorch dtype name ('int64' -> torch.int64)."""
    if name not in DEVICE_DTYPE_OF:
        raise KeyError(f"dtype {name!r} is not supported")
    return getattr(torch, name)
