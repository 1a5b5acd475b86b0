"""Shared test helpers: compile a module with kernelwright and compare with PyTorch eager.

`--runtime dawn|wgpu` (or KERNELWRIGHT_RUNTIME) picks the runtime the tests' default
device comes from; a test that needs a device of a runtime that opens none here is
skipped with the reason (runtimes.RuntimeUnavailable)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

import kernelwright
from kernelwright.runtime import runtimes


def pytest_addoption(parser):
    parser.addoption("--runtime", choices=runtimes.RUNTIMES, default=None,
                     help="the runtime of the tests' default device (else "
                          f"{runtimes.ENV}, else wgpu)")


def pytest_configure(config):
    name = config.getoption("--runtime")
    if name:
        os.environ[runtimes.ENV] = name


def pytest_report_header(config):
    return f"kernelwright runtime: {runtimes.runtime_name()}"


def _skip_unavailable(outcome) -> None:
    """Turn a RuntimeUnavailable raised by a test (or its set-up) into a skip."""
    exc = outcome.excinfo
    if exc is not None and isinstance(exc[1], runtimes.RuntimeUnavailable):
        outcome.force_exception(pytest.skip.Exception(str(exc[1]), _use_item_location=True))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _skip_unavailable((yield))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _skip_unavailable((yield))


@pytest.fixture(params=["trace", "export"])
def capture(request, monkeypatch) -> str:
    """Compile's capture a test runs under: its one trace (capture.trace_graph), or
    torch.export (capture.export_graph), the fallback where the trace cannot, reached by
    a trace that captures nothing."""
    if request.param == "export":
        monkeypatch.setattr(kernelwright.compiler, "trace_graph", lambda module, inputs: None)
    return request.param


def leaves(out) -> list:
    """The tensors of a (possibly nested) tuple/list/dict output, in PyTorch's order
    (torch.export flattens outputs the same way): LSTM's (out, (h, c)) gives 3."""
    return torch.utils._pytree.tree_leaves(out)


def check(module: torch.nn.Module, *inputs, atol: float = 1e-4, rtol: float = 1e-4,
          equal_nan: bool = False, choose=None):
    """Compile `module`, run it on poisoned buffers and assert that every output leaf
    (nested tuples and lists flattened) matches PyTorch eager; returns the compiled
    module. `equal_nan` accepts NaN where PyTorch has NaN (tests of NaN inputs);
    `choose`: the knob chooser of the compile (kernelwright.compile)."""
    module = module.eval()
    with torch.no_grad():
        expected = module(*inputs)
    compiled = kernelwright.compile(module, list(inputs), choose=choose)
    got = compiled(*inputs, poison=True)
    exp = leaves(expected)
    out = leaves(got)
    assert len(exp) == len(out), (len(exp), len(out))
    for e, g in zip(exp, out):
        assert g.shape == e.shape, (g.shape, e.shape)
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        if e.dtype.is_floating_point:
            torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=equal_nan)
        else:
            assert torch.equal(g, e), (g, e)
    return compiled


class Fn(torch.nn.Module):
    """Wraps a function of tensors as a module."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


@pytest.fixture
def fn_module():
    return Fn
