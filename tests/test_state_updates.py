"""State a call changes (ir.Graph.updates, Plan.updates): the constant's buffer holds
the new value after the call, so the next call reads it."""

import numpy as np

from kernelwright.ir.ir import GraphBuilder
from kernelwright.options import CompileOptions
from kernelwright.runtime.runtime import Executable
from kernelwright.schedule.schedule import build_plan


def test_an_update_is_read_by_the_next_call():
    b = GraphBuilder()
    x = b.input((5, 3), "f32", "x")
    total = b.const(np.zeros((5, 3), np.float32), "f32", "total")
    new = b.ew("add", total, x)
    out = b.ew("mul", new, b.scalar(2.0))
    b.graph.outputs.append(out)
    b.graph.updates.append((total, new))
    plan = build_plan(b.graph, "single", {x: "float32", out: "float32"}, CompileOptions())
    assert len(plan.updates) == 1
    exe = Executable(plan)
    xs = [np.random.default_rng(i).standard_normal((5, 3)).astype(np.float32) for i in range(3)]
    running = np.zeros((5, 3), np.float32)
    for a in xs:
        running = running + a
        (got,) = exe.run([a])
        np.testing.assert_allclose(got, 2 * running, rtol=1e-6)


def test_a_state_no_kernel_reads_is_still_written():
    b = GraphBuilder()
    x = b.input((4,), "f32", "x")
    seen = b.const(np.full(4, 7.0, np.float32), "f32", "seen")
    out = b.ew("neg", x)
    b.graph.outputs.append(out)
    b.graph.updates.append((seen, b.ew("exp", x)))
    plan = build_plan(b.graph, "single", {x: "float32", out: "float32"}, CompileOptions())
    exe = Executable(plan)
    a = np.arange(4, dtype=np.float32)
    exe.run([a])
    (src, dst), = plan.updates
    raw = exe.dev.device.queue.read_buffer(exe.buffers[dst], 0, 16)
    np.testing.assert_allclose(np.frombuffer(raw, np.float32), np.exp(a), rtol=1e-6)


def test_a_permuted_state_is_read_as_updated():
    """A constant the graph updates is transposed at each call, not once at compile time
    (a training step's nn.Linear weight)."""
    b = GraphBuilder()
    x = b.input((2, 3), "f32", "x")
    w = b.const(np.arange(12, dtype=np.float32).reshape(4, 3), "f32", "w", state=True)
    out = b.matmul(x, b.permute(w, [1, 0]))
    b.graph.outputs.append(out)
    b.graph.updates.append((w, b.ew("add", w, b.scalar(1.0))))
    plan = build_plan(b.graph, "single", {x: "float32", out: "float32"}, CompileOptions())
    exe = Executable(plan)
    a = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    weight = np.arange(12, dtype=np.float32).reshape(4, 3)
    for step in range(3):
        (got,) = exe.run([a])
        np.testing.assert_allclose(got, a @ (weight + step).T, rtol=1e-5, atol=1e-5)
