"""Executable.dispatch submits a call's kernels in growing batches (the GPU starts on the
first while the host encodes the rest) and Executable.read_all reads small outputs back
through one staging buffer: neither may change what a call computes."""

from __future__ import annotations

import numpy as np
import pytest

from kernelwright.ir.ir import GraphBuilder
from kernelwright.options import CompileOptions
from kernelwright.runtime import runtime
from kernelwright.runtime.runtime import Executable
from kernelwright.schedule.schedule import build_plan


def _chain(depth: int):
    """x @ w repeated `depth` times (one kernel each), every product an output, and a
    state that the call replaces by the last product (an update copied after the kernels:
    the new value is also an output)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input((6, 6), "f32", "x")
    w = (rng.standard_normal((6, 6)) / 3).astype(np.float32)
    wv = b.const(w, "f32", "w")
    state = b.const(np.zeros((6, 6), np.float32), "f32", "last", state=True)
    y, outs = x, []
    for _ in range(depth):
        y = b.matmul(y, wv)
        outs.append(y)
    b.graph.outputs.extend(outs)
    b.graph.updates.append((state, outs[-1]))
    plan = build_plan(b.graph, "tuple", {x: "float32", **{o: "float32" for o in outs}},
                      CompileOptions())
    return plan, w


@pytest.mark.parametrize("first,most", [(1, 2), (4, 8), (32, 512)])
def test_batched_submission_computes_the_same(monkeypatch, first, most):
    monkeypatch.setattr(runtime, "SUBMIT_FIRST", first)
    monkeypatch.setattr(runtime, "SUBMIT_MOST", most)
    plan, w = _chain(13)
    assert len(plan.kernels) >= 13 and plan.updates  # several batches, and the copy after
    exe = Executable(plan)
    a = np.random.default_rng(1).standard_normal((6, 6)).astype(np.float32)
    got = exe.run([a])
    want, y = [], a.astype(np.float64)
    for _ in range(13):
        y = y @ w
        want.append(y)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
    [(_, spec)] = plan.state
    np.testing.assert_allclose(exe.read(spec), want[-1], rtol=1e-4, atol=1e-5)


def test_outputs_read_together_equal_each_read_alone(monkeypatch):
    monkeypatch.setattr(runtime, "READ_TOGETHER", 100)  # 6 x 6 floats: each read alone
    plan, _ = _chain(3)
    exe = Executable(plan)
    exe.dispatch([np.random.default_rng(2).standard_normal((6, 6)).astype(np.float32)])
    alone = [exe.read(spec) for spec in plan.outputs]
    for got, want in zip(exe.read_all(plan.outputs), alone):
        np.testing.assert_array_equal(got, want)
    monkeypatch.setattr(runtime, "READ_TOGETHER", 1 << 20)  # now all three together
    together = exe.read_all(plan.outputs)
    for got, want in zip(together, alone):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_read_all_keeps_its_staging_buffer_and_returns_copies():
    plan, _ = _chain(3)
    exe = Executable(plan)
    rng = np.random.default_rng(3)
    first_in, second_in = (rng.standard_normal((6, 6)).astype(np.float32) for _ in range(2))
    first = exe.run([first_in])
    kept = [a.copy() for a in first]
    staging = exe._staging
    second = exe.run([second_in])
    assert exe._staging is staging  # made once, used by every call
    for a, b in zip(first, kept):  # the first call's arrays are not the staging's bytes
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], second[0])
    exe.dispatch([first_in])
    for got, want in zip(exe.read_all(plan.outputs), kept):
        np.testing.assert_array_equal(got, want)
