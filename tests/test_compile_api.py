"""The user-facing API: kernelwright.compile, torch.compile's backend, plans as data,
and the errors for what cannot be compiled or called."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import Fn

import kernelwright


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def test_torch_compile_backend_matches_eager_and_recompiles_per_shape():
    m = _mlp().eval()
    c = torch.compile(m, backend="kernelwright")
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(c(x[:3]), m(x[:3]), atol=1e-4, rtol=1e-4)
        m[0].weight.data.mul_(2)  # parameters are read on every call on this path
        torch.testing.assert_close(c(x), m(x), atol=1e-4, rtol=1e-4)


def test_plan_save_load_roundtrip(tmp_path):
    m = _mlp().eval()
    x = torch.randn(3, 8)
    compiled = kernelwright.compile(m, [x])
    compiled.plan.save(tmp_path / "plan")
    loaded = kernelwright.CompiledModule(kernelwright.Plan.load(tmp_path / "plan"))
    torch.testing.assert_close(loaded(x), compiled(x), atol=0, rtol=0)
    summary = loaded.plan.summary()
    assert "matmul" in summary and "input" in summary and "output" in summary


class Sorts(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=1).values * 2


def test_unsupported_op_names_op_and_user_line():
    with pytest.raises(kernelwright.CompileError) as err:
        kernelwright.compile(Sorts(), [torch.randn(3, 4)])
    msg = str(err.value)
    assert "aten.sort" in msg
    assert "test_compile_api.py" in msg and "torch.sort(x, dim=1)" in msg


def test_wrong_shape_or_dtype_is_an_error_not_a_wrong_answer():
    compiled = kernelwright.compile(_mlp().eval(), [torch.randn(3, 8)])
    with pytest.raises(ValueError, match="compiled for float32"):
        compiled(torch.randn(4, 8))
    with pytest.raises(ValueError, match="compiled for float32"):
        compiled(torch.randn(3, 8).double())
    with pytest.raises(ValueError, match="expected 1 inputs"):
        compiled(torch.randn(3, 8), torch.randn(3, 8))


def test_buffers_are_reused_when_lifetimes_do_not_overlap():
    # A chain of reductions materializes several intermediates of one size.
    m = Fn(lambda x: torch.softmax(torch.softmax(torch.softmax(x, 0), 1), 0))
    compiled = kernelwright.compile(m, [torch.randn(6, 5)])
    plan = compiled.plan
    temps = [b for b in plan.buffers if b.kind == "temp"]
    written = [k.bindings[-1] for k in plan.kernels]
    assert len(written) > len(set(written)) or len(temps) < len(plan.kernels) - 1, plan.summary()


def test_kernel_timestamps_when_supported():
    compiled = kernelwright.compile(_mlp().eval(), [torch.randn(3, 8)])
    if not compiled.exe.dev.has_timestamps:
        pytest.skip("adapter has no timestamp queries")
    times = compiled.kernel_times_ms(torch.randn(3, 8))
    assert len(times) == len(compiled.plan.kernels) and all(t >= 0 for _, t in times)
    assert all(t >= 0 for t in compiled.gpu_times_ms([[torch.randn(3, 8)]], 3))


def test_poison_fills_outputs_and_intermediates_with_nan():
    compiled = kernelwright.compile(_mlp().eval(), [torch.randn(3, 8)])
    exe = compiled.exe
    exe.poison()
    for spec in compiled.plan.outputs:
        assert np.isnan(exe.read(spec)).all()
    # and a call after poisoning overwrites every output element
    assert not torch.isnan(compiled(torch.randn(3, 8), poison=True)).any()


def test_int64_inputs_run_no_pytorch_compute():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        ops: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Record.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    m = Fn(lambda x, i: x * i)
    x, i = torch.randn(4, 5), torch.randint(-3, 3, (4, 5))
    compiled = kernelwright.compile(m, [x, i])
    with Record():
        out = compiled(x, i)
    torch.testing.assert_close(out, x * i)
    compute = [op for op in Record.ops if op.split(".")[1] in ("max", "min", "gt", "lt", "mul")]
    assert not compute, compute
    with pytest.raises(ValueError, match="int32 range"):
        compiled(x, torch.full((4, 5), 2**40))


def test_a_buffer_larger_than_the_device_binds_is_a_clear_error():
    limits = kernelwright.runtime.default_device().device.limits
    most = min(limits["max-storage-buffer-binding-size"], limits["max-buffer-size"])
    x = torch.empty(most // 4 + 1)  # never filled: only its shape is compiled
    with pytest.raises(RuntimeError, match=r"larger than .* can bind to a kernel"):
        kernelwright.compile(Fn(lambda x: x * 2.0), [x])


def test_a_kernel_binding_more_buffers_than_the_device_allows_is_a_clear_error():
    """A fused kernel reads every tensor it needs through a binding of its own; only the
    bindings its entry point reaches count (the template declares a scalar binding and a
    vec4 view of each read, and this kernel reads only the views): five reads and the
    output. A device that allows fewer storage buffers per shader stage is refused before
    any pipeline is built, naming the kernel; one that allows six runs it."""
    from kernelwright.codegen import declared_bindings, used_bindings
    from kernelwright.runtime import check_limits

    xs = [torch.randn(4, 8) for _ in range(5)]
    fn = Fn(lambda a, b, c, d, e: a * b + c * d - e)
    compiled = kernelwright.compile(fn, xs)
    (kernel,) = compiled.plan.kernels
    assert len(used_bindings(kernel.source)) == 6 < len(declared_bindings(kernel.source))
    limits = dict(kernelwright.runtime.default_device().device.limits)
    limits["max-storage-buffers-per-shader-stage"] = 6
    check_limits(compiled.plan, limits, "this device")
    torch.testing.assert_close(compiled(*xs), fn(*xs))
    limits["max-storage-buffers-per-shader-stage"] = 5
    with pytest.raises(RuntimeError, match=rf"kernel {re.escape(kernel.name)} binds 6 "
                       "storage buffers; a small device allows 5 per kernel"):
        check_limits(compiled.plan, limits, "a small device")


def test_fusion_stays_within_the_devices_binding_limit():
    """A normalization's fused kernel reads x and four per-channel tensors (five
    bindings and its output). On a device that allows five storage buffers per kernel,
    the compiler stores the smallest inline value that reads two of them, the
    per-channel scale g * rsqrt(v + eps) (8 floats), and fuses the rest: two kernels
    of five bindings or fewer, and the same result. On the full device: one kernel."""
    from kernelwright.codegen import used_bindings
    from kernelwright.runtime import open_device

    fn = Fn(lambda x, m, g, v, b: (x - m) * (g * torch.rsqrt(v + 1e-5)) + b)
    xs = [torch.randn(4, 8, 16)] + [torch.randn(8, 1) for _ in range(4)]
    xs[3] = xs[3].abs()
    full = kernelwright.compile(fn, xs)
    assert len(full.plan.kernels) == 1
    assert len(used_bindings(full.plan.kernels[0].source)) == 6

    adapter = kernelwright.runtime.default_device().adapter
    small = open_device(adapter, {"max-storage-buffers-per-shader-stage": 5})
    assert small.max_bindings == 5
    compiled = kernelwright.compile(fn, xs, device=small)
    kernels = compiled.plan.kernels
    assert len(kernels) == 2
    assert all(len(used_bindings(k.source)) <= 5 for k in kernels)
    temps = [b.nbytes for b in compiled.plan.buffers if b.kind == "temp"]
    assert temps == [8 * 4]  # the scale, not the 512-element tensor
    torch.testing.assert_close(compiled(*xs), fn(*xs))


def test_used_bindings_follow_the_calls_from_main():
    from kernelwright.codegen import used_bindings

    src = """@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read> in0v4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
fn g(i: i32) -> f32 { return in1[i]; }
fn f(i: i32) -> f32 { return g(i) * 2.0; }
fn unused(i: i32) -> f32 { return in0[i]; }
var<workgroup> tile: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = i32(gid.x);
    out[i] = f(i) + in0v4[i].x;
}
"""
    assert used_bindings(src) == {1: "read", 2: "read", 3: "read_write"}


def test_kernels_compile_without_runtime_checks_unless_forced(monkeypatch):
    """Kernels the templates write are trusted modules (no index clamps or loop counters
    from wgpu's translator); FORCE_SHADER_CHECKS compiles the same WGSL with them; both
    compute the same result."""
    import wgpu

    from kernelwright import runtime

    m = _mlp().eval()
    x = torch.randn(4, 8)
    dev = runtime.default_device()
    compiled = kernelwright.compile(m, [x])
    assert compiled.plan.kernels and all(k.trusted for k in compiled.plan.kernels)
    keys = [runtime._key(k.source, True) for k in compiled.plan.kernels]
    assert all(key in dev._pipelines for key in keys)
    expected = m(x).detach()
    torch.testing.assert_close(compiled(x, poison=True), expected, atol=1e-4, rtol=1e-4)
    monkeypatch.setattr(runtime, "FORCE_SHADER_CHECKS", True)
    checked = kernelwright.compile(m, [x])
    assert all(runtime._key(k.source, False) in dev._pipelines for k in checked.plan.kernels)
    torch.testing.assert_close(checked(x, poison=True), expected, atol=1e-4, rtol=1e-4)
    monkeypatch.setattr(runtime, "FORCE_SHADER_CHECKS", False)
    with pytest.raises(wgpu.GPUError, match="parsing error"):  # WGSL errors still surface
        dev.pipeline("@compute @workgroup_size(1) fn main( {", trusted=True)


def test_torch_compile_by_name_in_a_process_that_never_imported_kernelwright():
    """torch finds the backend through the installed entry point and imports the package
    itself; the package's own registration must not make that a duplicate. The software
    Vulkan driver's complaint about XDG_RUNTIME_DIR stays out of the output."""
    from importlib.metadata import entry_points

    if "kernelwright" not in entry_points(group="torch_dynamo_backends").names:
        pytest.skip("kernelwright is not installed (no torch_dynamo_backends entry point)")
    code = textwrap.dedent("""
        import sys, torch
        m = torch.nn.Linear(4, 3)
        x = torch.randn(2, 4)
        with torch.no_grad():
            out = torch.compile(m, backend="kernelwright")(x)
            torch.testing.assert_close(out, m(x), atol=1e-4, rtol=1e-4)
        assert "kernelwright.compiler" in sys.modules
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    src = os.path.join(os.path.dirname(__file__), "..", "src")
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]
    assert "XDG_RUNTIME_DIR" not in run.stderr, run.stderr[-3000:]
