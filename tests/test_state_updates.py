"""State a call changes (ir.Graph.updates, Plan.updates): the constant's buffer holds
the new value after the call, so the next call reads it: stored over the state by the
kernel computing it where that kernel is the state's last reader and reads it only at
the element it stores (schedule.written_in_place), else copied over the state by a copy
kernel once the state's last reader ran (schedule.early_updates), else after the call's
kernels."""

import numpy as np
import pytest

from kernelwright.codegen.codegen import used_bindings
from kernelwright.ir.ir import GraphBuilder
from kernelwright.options import BindingLimits, CompileOptions
from kernelwright.runtime.runtime import Executable
from kernelwright.schedule.schedule import build_plan


@pytest.mark.parametrize("shape", [(5, 3), (16, 64)])  # one element a step, and four
def test_an_update_is_written_in_place_and_read_by_the_next_call(shape):
    """The update's kernel is read by two kernels (the outputs): it reads the state from
    its own output binding and stores over it, bound once, no copy kernel."""
    b = GraphBuilder()
    x = b.input(shape, "f32", "x")
    total = b.const(np.zeros(shape, np.float32), "f32", "total")
    new = b.ew("add", total, x)
    out = b.ew("mul", new, b.scalar(2.0))
    out3 = b.ew("mul", new, b.scalar(3.0))
    b.graph.outputs += [out, out3]
    b.graph.updates.append((total, new))
    plan = build_plan(b.graph, "single", {x: "float32", out: "float32", out3: "float32"},
                      CompileOptions())
    assert plan.updates == []
    [state] = [spec.buffer for _, spec in plan.state]
    [add] = [k for k in plan.kernels if k.bindings[-1] == state]
    assert add.name == "add" and add.bindings.count(state) == 1
    assert [k.name for k in plan.kernels] == ["add", "mul", "mul"]
    exe = Executable(plan)
    running = np.zeros(shape, np.float32)
    for i in range(3):
        a = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        running = running + a
        got, got3 = exe.run([a])
        np.testing.assert_allclose(got, 2 * running, rtol=1e-6)
        np.testing.assert_allclose(got3, 3 * running, rtol=1e-6)


def _written(kernel) -> list[int]:
    """The buffers a kernel binds read_write: the states it stores, then its output."""
    return [kernel.bindings[i] for i, access in used_bindings(kernel.source).items()
            if access == "read_write"]


@pytest.mark.parametrize("shape", [(5, 3), (16, 64)])  # one element a step, and four
def test_an_update_read_by_one_elementwise_kernel_is_stored_by_it(shape):
    """An update whose only reader is one elementwise kernel, reading it and the state at
    the element it stores (an optimizer's moment, read by the parameter's update), is
    computed there and stored over the state (schedule.joining_updates): one kernel,
    the state bound read_write once, read by the next call."""
    b = GraphBuilder()
    x = b.input(shape, "f32", "x")
    total = b.const(np.zeros(shape, np.float32), "f32", "total")
    new = b.ew("add", b.ew("mul", total, b.scalar(0.5)), x)
    out = b.ew("mul", new, b.scalar(2.0))
    b.graph.outputs.append(out)
    b.graph.updates.append((total, new))
    plan = build_plan(b.graph, "single", {x: "float32", out: "float32"}, CompileOptions())
    assert plan.updates == []
    [state] = [spec.buffer for _, spec in plan.state]
    [kernel] = plan.kernels
    assert kernel.name == "mul+add" and kernel.bindings.count(state) == 1
    assert _written(kernel) == [state, kernel.bindings[-1]]
    exe = Executable(plan)
    running = np.zeros(shape, np.float32)
    for i in range(3):
        a = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        running = running * np.float32(0.5) + a
        (got,) = exe.run([a])
        np.testing.assert_allclose(got, 2 * running, rtol=1e-6)
        np.testing.assert_allclose(exe.read(plan.state[0][1]), running, rtol=1e-6)


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
    [(_, spec)] = plan.state
    np.testing.assert_allclose(exe.read(spec), np.exp(a), rtol=1e-6)


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



def _updated_twice_over(new_of, reader, want, writer_name: str, shape=(4, 4)) -> None:
    """A state `total` updated to `new_of(b, total, x)`, the output `reader(b, total,
    new)`; over three calls the output and the state against `want(old, x)` -> (output,
    new state) in numpy. The update must not overwrite the old value before every reader
    of it ran (its own kernel's transposed read included): the kernel writing the state
    (`writer_name`) follows every kernel that reads the old value."""
    b = GraphBuilder()
    x = b.input(shape, "f32", "x")
    total = b.const(np.zeros(shape, np.float32), "f32", "total", state=True)
    new = new_of(b, total, x)
    out = reader(b, total, new)
    b.graph.outputs.append(out)
    b.graph.updates.append((total, new))
    plan = build_plan(b.graph, "single", {x: "float32", out: "float32"}, CompileOptions())
    [(_, spec)] = plan.state
    assert plan.updates == []
    [writer] = [i for i, k in enumerate(plan.kernels) if k.bindings[-1] == spec.buffer]
    assert plan.kernels[writer].name == writer_name
    if writer_name == "copy":  # after it, only readers of the new value bind the state
        assert all(i < writer for i, k in enumerate(plan.kernels)
                   if spec.buffer in k.bindings[:-1])
    exe = Executable(plan)
    state = np.zeros(shape, np.float32)
    for i in range(3):
        a = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        expected, state = want(state, a)
        (got,) = exe.run([a])
        scale = 1e-5 * np.abs(expected).max()  # a column sum's rounding, at its magnitude
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=scale)
        np.testing.assert_allclose(exe.read(spec), state, rtol=1e-5, atol=scale)


def test_an_old_value_read_after_its_update_is_not_overwritten():
    _updated_twice_over(lambda b, t, x: b.ew("add", t, x), lambda b, t, new: b.ew("mul", t, new),
                        lambda old, a: (old * (old + a), old + a), "copy")


def test_an_update_reading_its_state_at_other_elements_is_copied_after():
    _updated_twice_over(lambda b, t, x: b.ew("add", x, b.permute(t, [1, 0])),
                        lambda b, t, new: b.ew("mul", new, b.scalar(2.0)),
                        lambda old, a: (2 * (a + old.T), a + old.T), "copy")


def test_an_update_read_at_its_element_by_its_last_reader_is_written_in_place():
    """The state's other reader (a column sum, long enough to be its own kernel) runs
    first; the update's own kernel reads the state where it stores."""
    def new_of(b, t, x):
        return b.ew("add", b.ew("mul", t, b.reduce(t, "sum", [0], keepdim=True)), x)

    _updated_twice_over(new_of, lambda b, t, new: b.ew("mul", new, b.scalar(3.0)),
                        lambda old, a: (3 * (old * old.sum(0) + a), old * old.sum(0) + a),
                        "mul+add", shape=(256, 8))


def _stored_or_not(limits=None, extra_reader=False) -> tuple:
    """new = total * 0.5 + x and out = new * 2 (and with `extra_reader` a second output
    reading the state: its column sums), planned for `limits`, run three calls against
    numpy; the plan returned."""
    shape = (16, 8)
    b = GraphBuilder()
    x = b.input(shape, "f32", "x")
    total = b.const(np.zeros(shape, np.float32), "f32", "total", state=True)
    new = b.ew("add", b.ew("mul", total, b.scalar(0.5)), x)
    outs = [b.ew("mul", new, b.scalar(2.0))]
    if extra_reader:
        outs.append(b.reduce(total, "sum", [0]))
    b.graph.outputs += outs
    b.graph.updates.append((total, new))
    plan = build_plan(b.graph, "single", {x: "float32", **dict.fromkeys(outs, "float32")},
                      CompileOptions(limits=limits))
    exe = Executable(plan)
    running = np.zeros(shape, np.float32)
    for i in range(3):
        a = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        sums = running.sum(0)
        running = running * np.float32(0.5) + a
        got = exe.run([a])
        np.testing.assert_allclose(got[0], 2 * running, rtol=1e-6)
        if extra_reader:
            np.testing.assert_allclose(got[1], sums, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(exe.read(plan.state[0][1]), running, rtol=1e-6)
    return plan


def test_an_update_is_not_stored_by_a_reader_binding_too_many_buffers():
    """Stored by the output's kernel, the update makes it bind x, the state and the
    output: over a limit of two bindings, its own kernel writes it in place instead."""
    plan = _stored_or_not(BindingLimits(max_bindings=2, max_bytes=1 << 20, align=256))
    assert [k.name for k in plan.kernels] == ["mul+add", "mul"], plan.summary()
    assert all(len(_written(k)) == 1 for k in plan.kernels)
    assert len(_stored_or_not(BindingLimits(max_bindings=3, max_bytes=1 << 20,
                                            align=256)).kernels) == 1


def test_an_update_whose_state_another_kernel_reads_is_not_stored_by_its_reader():
    """The state's old value is also read by another kernel (a column sum): the update
    is no reader's to store: its value is written over the state (here copied) after
    every reader of the old one."""
    plan = _stored_or_not(extra_reader=True)
    assert all(len(_written(k)) == 1 for k in plan.kernels), plan.summary()
    [state] = [spec.buffer for _, spec in plan.state]
    [writer] = [i for i, k in enumerate(plan.kernels) if _written(k) == [state]]
    assert all(i < writer for i, k in enumerate(plan.kernels)
               if state in k.bindings and i != writer)
