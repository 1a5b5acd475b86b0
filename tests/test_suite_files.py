"""The bundled problem suite: every file loads, runs at its small size, and keeps the format."""

import contextlib
import importlib.util
import re
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

SUITE = Path(__file__).resolve().parents[1] / "src" / "kernelwright" / "suite"
MINIMUM_PER_LEVEL = {"level1": 128, "level2": 41, "level3": 26}
# The small size runs on a software Vulkan driver: keep it tiny...
MAX_SMALL_FLOPS = 2_000_000
MAX_SMALL_NUMEL = 50_000
# ...except in a problem about tensors larger than one binding: its small size has a tensor
# over the software driver's binding (128 MiB), so kernels are chunked there too, within
# these bounds, and its full size has one over NVIDIA's (2 GiB).
SOFTWARE_BINDING_BYTES = 128 * 2**20
GPU_BINDING_BYTES = 2 * 2**30
MAX_LARGE_SMALL_NUMEL = 64 * 2**20
MAX_LARGE_SMALL_FLOPS = 5_000_000_000
FILE_NAME = re.compile(r"^\d{3}_[a-z0-9_]+\.py$")
# Float tensors are float32, except in a problem about float16 ("fp16" in its name);
# outputs may also be int64 (argmax, argmin).
INDEX_DTYPES = (torch.int64,)

PROBLEMS = sorted(SUITE.glob("level*/*.py"))


def _id(path):
    return f"{path.parent.name}/{path.stem}"


def _load(path):
    name = f"kernelwright_suite_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _LargestTensor(TorchDispatchMode):
    """Records the element count and the bytes of the largest tensor any operation produces."""

    def __init__(self):
        super().__init__()
        self.numel = 0
        self.nbytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self.numel = max(self.numel, leaf.numel())
                self.nbytes = max(self.nbytes, leaf.numel() * leaf.element_size())
        return out


def _build(module, size):
    vars(module).update(module.SIZES[size])
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).eval()
    inputs = module.get_inputs()
    return model, inputs


def test_suite_levels_meet_minimum_counts():
    for level, minimum in MINIMUM_PER_LEVEL.items():
        files = sorted((SUITE / level).glob("*.py"))
        assert len(files) >= minimum, f"{level}: {len(files)} problems, want >= {minimum}"
        numbers = [f.name[:3] for f in files]
        assert len(set(numbers)) == len(numbers), f"{level}: duplicate problem numbers"
    assert (SUITE / "__init__.py").is_file()
    assert not list(SUITE.glob("level*/__init__.py"))


@pytest.mark.parametrize("path", PROBLEMS, ids=_id)
def test_problem_format(path):
    assert FILE_NAME.match(path.name), path.name
    module = _load(path)
    doc = (module.__doc__ or "").strip()
    assert doc and "\n" not in doc, "needs a one-line module docstring"
    for name in ("Model", "get_inputs", "get_init_inputs", "SIZES"):
        assert hasattr(module, name), f"missing {name}"
    assert issubclass(module.Model, nn.Module)
    sizes = module.SIZES
    assert set(sizes) == {"small", "full"}
    assert set(sizes["small"]) == set(sizes["full"]), "small and full override different names"
    assert sizes["full"], "SIZES must name the size-dependent constants"
    for key, value in sizes["full"].items():
        assert getattr(module, key) == value, f"module constant {key} differs from SIZES['full']"
    for key, value in sizes["small"].items():
        if isinstance(value, int) and value >= 16:
            assert value % 16, f"small size {key}={value} is a multiple of 16"


@pytest.mark.parametrize("path", PROBLEMS, ids=_id)
def test_problem_runs_small(path):
    module = _load(path)
    model, inputs = _build(module, "small")
    assert isinstance(inputs, list) and inputs
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    tensors += list(model.parameters()) + list(model.buffers())
    float_dtype = torch.float16 if "fp16" in path.stem else torch.float32
    for t in tensors:
        if t.is_floating_point():
            assert t.dtype == float_dtype
    largest = _LargestTensor()
    flops = FlopCounterMode(display=False)
    with torch.no_grad(), flops, largest:
        out = model(*inputs)
    with torch.no_grad():
        again = model(*inputs)
    leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    assert leaves, "forward returned no tensor"
    for t, u in zip(leaves, tree_leaves(again)):
        assert t.dtype == float_dtype or t.dtype in INDEX_DTYPES
        if t.is_floating_point():
            assert torch.isfinite(t).all(), "non-finite output"
        assert torch.equal(t, u), "forward is not deterministic"
    numel = max([largest.numel] + [t.numel() for t in tensors])
    total = flops.get_total_flops()
    if numel * float_dtype.itemsize > SOFTWARE_BINDING_BYTES:
        assert numel <= MAX_LARGE_SMALL_NUMEL, f"small size has a tensor of {numel} elements"
        assert total <= MAX_LARGE_SMALL_FLOPS, f"small size needs {total} FLOP"
    else:
        assert numel <= MAX_SMALL_NUMEL, f"small size has a tensor of {numel} elements"
        assert total <= MAX_SMALL_FLOPS, f"small size needs {total} FLOP"


def _forward_on_meta(module, size, largest=None):
    """The problem's output at `size` and the bytes of the largest tensor it takes, holds
    or (recorded by `largest`, when given) produces; all on the meta device (no memory)."""
    vars(module).update(module.SIZES[size])
    with torch.device("meta"), torch.no_grad():
        model = module.Model(*module.get_init_inputs()).eval()
        inputs = module.get_inputs()
        with largest or contextlib.nullcontext():
            out = model(*inputs)
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    tensors += list(model.parameters()) + list(model.buffers())
    most = max([largest.nbytes if largest else 0]
               + [t.numel() * t.element_size() for t in tensors])
    return out, most


@pytest.mark.parametrize("path", PROBLEMS, ids=_id)
def test_problem_full_size_builds_on_meta(path):
    _, small = _forward_on_meta(_load(path), "small", _LargestTensor())
    large = small > SOFTWARE_BINDING_BYTES
    # Intermediates are recorded only where they are checked: the mode slows a long
    # recurrence's forward tenfold.
    out, full = _forward_on_meta(_load(path), "full", _LargestTensor() if large else None)
    leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    assert leaves and all(t.device.type == "meta" for t in leaves)
    if large:
        assert full > GPU_BINDING_BYTES, "a small size over one binding needs a full size over one"
