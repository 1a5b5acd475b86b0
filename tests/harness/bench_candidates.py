"""Candidates for the harness tests: honest ones in numpy, and the cheat corpus.

Numpy is not PyTorch: an honest candidate reads its inputs with ``.numpy()``,
computes in numpy and hands back ``torch.from_numpy`` — only data moves through
torch, as with kernelwright's compiled modules. Like those, `NumpyCandidate`
takes ``poison=True`` and then starts every output filled with NaN, so a kernel
that leaves part of its output unwritten shows NaN there.

The tiny reference problems (`Model` classes here) and the factories
``make(model, example_inputs) -> callable`` are used by test_cheats.py in
process, and by the runner tests as a candidate spec ``bench_candidates.py:make``.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn as nn

# --- reference problems -------------------------------------------------------


class LinearReLU(nn.Module):
    def __init__(self, n_in: int = 64, n_out: int = 16) -> None:
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class RowSoftmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


class RowSum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


class RowMean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)


class ConstantOne(nn.Module):
    """Degenerate: the output is 1 whatever the input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0 + 1


class Tiny(nn.Module):
    """Near zero: a zero output would pass a plain 1e-4 tolerance."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e-6


class Log(nn.Module):
    """Needs positive inputs: the other distributions must keep them positive."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class IndexSelect(nn.Module):
    """An integer input, which must stay a valid index."""

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return x.index_select(0, index)


SPY: list[torch.Tensor] = []


class SpiedReLU(nn.Module):
    """Keeps a handle on every output it makes: memory that still holds the
    reference's last output, as a freed GPU buffer would."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(x)
        SPY.append(out)
        del SPY[:-4]
        return out


def rand_inputs(*shape: int) -> Callable[[int], list]:
    def own(seed: int) -> list:
        torch.manual_seed(seed)
        return [torch.rand(*shape)]
    return own


def randn_inputs(*shape: int) -> Callable[[int], list]:
    def own(seed: int) -> list:
        torch.manual_seed(seed)
        return [torch.randn(*shape)]
    return own


def positive_inputs(*shape: int) -> Callable[[int], list]:
    def own(seed: int) -> list:
        torch.manual_seed(seed)
        return [torch.rand(*shape) * 3 + 0.1]
    return own


def index_inputs(seed: int) -> list:
    torch.manual_seed(seed)
    return [torch.randn(16, 8), torch.randint(0, 16, (10,))]


# --- numpy kernels --------------------------------------------------------------


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


class NumpyCandidate:
    """A candidate computing `fn(self, *arrays)` in numpy; honours ``poison=True``."""

    def __init__(self, fn: Callable[..., np.ndarray]) -> None:
        self.fn = fn
        self.poison = False

    def empty(self, shape: tuple, dtype: type = np.float32) -> np.ndarray:
        return np.full(shape, np.nan, dtype) if self.poison else np.empty(shape, dtype)

    def __call__(self, *inputs: torch.Tensor, poison: bool = False) -> torch.Tensor:
        self.poison = poison
        arrays = [x.detach().numpy() if isinstance(x, torch.Tensor) else x for x in inputs]
        return torch.from_numpy(np.ascontiguousarray(self.fn(self, *arrays)))


def linear_params(model: nn.Module) -> tuple[np.ndarray, np.ndarray]:
    linear = model.linear
    return linear.weight.detach().numpy().copy(), linear.bias.detach().numpy().copy()


# --- honest factories -------------------------------------------------------------


def honest_linear_relu(model: nn.Module, example: list) -> NumpyCandidate:
    w, b = linear_params(model)
    return NumpyCandidate(lambda self, x: np.maximum(x @ w.T + b, 0).astype(np.float32))


def honest_softmax(model: nn.Module, example: list) -> NumpyCandidate:
    return NumpyCandidate(lambda self, x: np_softmax(x).astype(np.float32))


def honest_sum(model: nn.Module, example: list) -> NumpyCandidate:
    return NumpyCandidate(lambda self, x: x.sum(axis=1, dtype=np.float64).astype(np.float32))


def honest_mean(model: nn.Module, example: list) -> NumpyCandidate:
    return NumpyCandidate(lambda self, x: x.mean(axis=1, dtype=np.float64).astype(np.float32))


def honest_tiny(model: nn.Module, example: list) -> NumpyCandidate:
    return NumpyCandidate(lambda self, x: (x * np.float32(1e-6)).astype(np.float32))


def honest_constant(model: nn.Module, example: list) -> NumpyCandidate:
    return NumpyCandidate(lambda self, x: (x * 0 + 1).astype(np.float32))


def honest_log(model: nn.Module, example: list) -> NumpyCandidate:
    return NumpyCandidate(lambda self, x: np.log(x).astype(np.float32))


def honest_index_select(model: nn.Module, example: list) -> NumpyCandidate:
    return NumpyCandidate(lambda self, x, index: x[index])


def honest_relu(model: nn.Module, example: list) -> NumpyCandidate:
    return NumpyCandidate(lambda self, x: np.maximum(x, 0).astype(np.float32))


def honest_specialised_softmax(model: nn.Module, example: list) -> Callable:
    """Like a compiled module: built for the example's shape, refuses any other."""
    shape = tuple(example[0].shape)

    def run(self: NumpyCandidate, x: np.ndarray) -> np.ndarray:
        if x.shape != shape:
            raise ValueError(f"compiled for {shape}, called with {x.shape}")
        out = self.empty(shape)
        out[...] = np_softmax(x)
        return out

    return NumpyCandidate(run)


def honest_with_data_movement(model: nn.Module, example: list) -> Callable:
    """Moves data through torch (detach, clone, dtype copy, view): allowed."""
    def run(x: torch.Tensor, poison: bool = False) -> torch.Tensor:
        a = x.detach().clone().to(torch.float32).contiguous().numpy()
        out = torch.from_numpy(np_softmax(a).astype(np.float32))
        return out.view(out.shape)
    return run


# --- the cheat corpus ---------------------------------------------------------------


def cheat_stale_reference_output(model: nn.Module, example: list) -> Callable:
    """Returns the reference's last output, which memory still holds."""
    def run(x: torch.Tensor) -> torch.Tensor:
        return SPY[-1]
    return run


def cheat_cache_by_identity(model: nn.Module, example: list) -> NumpyCandidate:
    """Computes once per input tensor (by id and address), then replays the answer."""
    cache: dict[tuple[int, int], np.ndarray] = {}

    def wrapped(*inputs: torch.Tensor, poison: bool = False) -> torch.Tensor:
        key = (id(inputs[0]), inputs[0].data_ptr())
        if key not in cache:
            cache[key] = np_softmax(inputs[0].detach().numpy()).astype(np.float32)
        return torch.from_numpy(cache[key].copy())
    return wrapped


def cheat_zeros(model: nn.Module, example: list) -> NumpyCandidate:
    """Does nothing: an output of the right shape, all zero."""
    n_out = model.linear.out_features if isinstance(model, LinearReLU) else None

    def run(self: NumpyCandidate, x: np.ndarray) -> np.ndarray:
        return np.zeros((x.shape[0], n_out) if n_out else x.shape, np.float32)
    return NumpyCandidate(run)


def cheat_ones(model: nn.Module, example: list) -> NumpyCandidate:
    return NumpyCandidate(lambda self, x: np.ones(x.shape, np.float32))


def cheat_uniform_mean(model: nn.Module, example: list) -> NumpyCandidate:
    """E[x] = 0.5 for x ~ U(0, 1): true for the problem's own inputs only."""
    return NumpyCandidate(lambda self, x: np.full(x.shape[0], 0.5, np.float32))


def cheat_first_row_only(model: nn.Module, example: list) -> NumpyCandidate:
    def run(self: NumpyCandidate, x: np.ndarray) -> np.ndarray:
        out = self.empty(x.shape)
        out[0] = np_softmax(x[:1])[0]
        return out
    return NumpyCandidate(run)


def cheat_hard_coded_shape(model: nn.Module, example: list) -> NumpyCandidate:
    """Sizes baked in (as #defines in a kernel), whatever the inputs."""
    rows, cols = 8, 64

    def run(self: NumpyCandidate, x: np.ndarray) -> np.ndarray:
        out = self.empty((rows, cols))
        n = min(rows, x.shape[0])
        out[:n] = np_softmax(x[:n])
        return out
    return NumpyCandidate(run)


def cheat_fp16(model: nn.Module, example: list) -> NumpyCandidate:
    """fp16 arithmetic, cast back to fp32: passes a loose tolerance, not the strict one."""
    w, b = linear_params(model)
    w16, b16 = w.astype(np.float16), b.astype(np.float16)
    return NumpyCandidate(
        lambda self, x: np.maximum(x.astype(np.float16) @ w16.T + b16, 0).astype(np.float32))


def cheat_calls_torch(model: nn.Module, example: list) -> Callable:
    def run(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)
    return run


def cheat_calls_reference(model: nn.Module, example: list) -> Callable:
    def run(*inputs: torch.Tensor) -> torch.Tensor:
        return model(*inputs)
    return run


def cheat_tamper_reference(model: nn.Module, example: list) -> NumpyCandidate:
    """Makes the reference return zeros, then returns zeros itself."""
    type(model).forward = lambda self, x: torch.zeros_like(x)
    return NumpyCandidate(lambda self, x: np.zeros(x.shape, np.float32))


def buggy_clobbers_input(model: nn.Module, example: list) -> NumpyCandidate:
    """Not a cheat, a bug: computes softmax in place in its input tensor."""
    def run(self: NumpyCandidate, x: np.ndarray) -> np.ndarray:
        x -= x.max(axis=1, keepdims=True)
        np.exp(x, out=x)
        x /= x.sum(axis=1, keepdims=True)
        return x.copy()
    return NumpyCandidate(run)


# --- a factory for the runner tests: by the problem's class name ------------------


def _hang(model: nn.Module, example: list) -> Callable:
    time.sleep(3600)
    raise AssertionError("unreachable")


def _segfault(model: nn.Module, example: list) -> Callable:
    ctypes.string_at(0)  # reads address 0: SIGSEGV
    raise AssertionError("unreachable")


def _segfault_on_call(model: nn.Module, example: list) -> Callable:
    def run(*inputs: torch.Tensor) -> torch.Tensor:
        ctypes.string_at(0)  # during the first trial
        raise AssertionError("unreachable")
    return run


def _exit(model: nn.Module, example: list) -> Callable:
    os._exit(3)


BY_CLASS_NAME = {
    "Relu": honest_relu,
    "Softmax": honest_softmax,
    "Hang": _hang,
    "Segfault": _segfault,
    "SegfaultInTrial": _segfault_on_call,
    "Exit": _exit,
    "Zeros": cheat_ones,
}


def make(model: nn.Module, example: list) -> Callable:
    """Candidate spec for the runner tests: picks a factory by the model's class name."""
    return BY_CLASS_NAME[type(model).__name__](model, example)
