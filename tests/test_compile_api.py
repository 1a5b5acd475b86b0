"""The user-facing API: kernelwright.compile, torch.compile's backend, plans as data,
and the errors for what cannot be compiled or called."""

import collections
import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
from conftest import Fn

import kernelwright
from kernelwright.plan import PlanFileError


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


class Transforms(torch.nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x, dim=1).abs() * 2


def test_unsupported_op_names_op_and_user_line(capture):
    """The one-trace capture's nodes carry no source line: its failure exports the module
    for the message."""
    with pytest.raises(kernelwright.CompileError) as err:
        kernelwright.compile(Transforms(), [torch.randn(3, 4)])
    msg = str(err.value)
    assert "aten._fft_r2c" in msg
    assert "test_compile_api.py" in msg and "torch.fft.rfft(x, dim=1)" in msg


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
    # an unwritten or misread timestamp pair reads as a negative or an enormous time
    times = compiled.kernel_times_ms(torch.randn(3, 8))
    assert [name for name, _ in times] == [k.name for k in compiled.plan.kernels]
    assert all(0 <= t < 1e4 for _, t in times) and sum(t for _, t in times) > 0, times
    calls = compiled.gpu_times_ms([[torch.randn(3, 8)]], 3)
    assert len(calls) == 3 and all(0 < t < 1e4 for t in calls), calls
    # a plan of more kernels than one query set holds: several sets, every kernel timed
    x = torch.randn(3, 8)
    arrays = compiled._arrays(compiled._tensors([x]))
    split = compiled.exe.kernel_times_ms(arrays, per_set=1)
    assert len(split) == len(compiled.plan.kernels) > 1
    assert all(0 <= t < 1e4 for t in split) and sum(split) > 0, split


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


def test_a_tensor_larger_than_the_device_allocates_is_held_in_several_buffers():
    """A tensor larger than one binding is chunked, one larger than the device's largest
    buffer is held as several device buffers (tests/test_chunks.py covers each family)."""
    from kernelwright.runtime.runtime import open_device

    small = open_device(kernelwright.runtime.default_device().adapter,
                        {"max-buffer-size": 1 << 20, "max-storage-buffer-binding-size": 1 << 18})
    x = torch.randn((1 << 18) + 64)
    cm = kernelwright.compile(Fn(lambda x: x * 2.0), [x], device=small)
    assert cm.plan.buffers[0].segment and cm.plan.buffers[0].segment <= 1 << 20
    torch.testing.assert_close(cm(x), x * 2.0)


def test_a_kernel_binding_more_buffers_than_the_device_allows_is_a_clear_error():
    """A fused kernel reads every tensor it needs through a binding of its own; only the
    bindings its entry point reaches count (the template declares a scalar binding and a
    vec4 view of each read, and this kernel reads only the views): five reads and the
    output. A device that allows fewer storage buffers per shader stage is refused before
    any pipeline is built, naming the kernel; one that allows six runs it."""
    from kernelwright.codegen.codegen import declared_bindings, used_bindings
    from kernelwright.runtime.runtime import check_limits

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
    from kernelwright.codegen.codegen import used_bindings
    from kernelwright.runtime.runtime import open_device

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
    from kernelwright.codegen.codegen import used_bindings

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
    compute the same result. On Dawn the checked ones run on the robust device."""
    from kernelwright.runtime import runtime, runtimes

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
    assert all(runtime._key(k.source, False) in dev.checked()._pipelines
               for k in checked.plan.kernels)
    torch.testing.assert_close(checked(x, poison=True), expected, atol=1e-4, rtol=1e-4)
    monkeypatch.setattr(runtime, "FORCE_SHADER_CHECKS", False)
    with pytest.raises(runtimes.api(dev.runtime).GPUError,  # WGSL errors still surface
                       match="(?i)parsing"):
        dev.pipeline("@compute @workgroup_size(1) fn main( {", trusted=True)


@pytest.mark.slow
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


@dataclasses.dataclass
class Output:
    """A transformers-style output class, registered with torch's pytree."""

    last: torch.Tensor
    pooled: torch.Tensor


torch.export.register_dataclass(Output, serialized_type_name="test_compile_api.Output")


class Structured(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = self.lin(x)
        if self.kind == "dict":
            return {"h": h, "more": (h.relu(), [h.sum(1), h * 2])}
        if self.kind == "ordered":
            return collections.OrderedDict(pooled=h.sum(0), last=h)
        if self.kind == "dataclass":
            return Output(last=h, pooled=h.mean(0))
        if self.kind == "list":
            return [h, h + 1]
        return (h, (h.relu(), h - 1))


@pytest.mark.parametrize("kind", ["dict", "ordered", "dataclass", "list", "nested"])
def test_outputs_keep_the_modules_structure_also_after_save_and_load(kind, tmp_path):
    m = Structured(kind).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        want = m(x)
    compiled = kernelwright.compile(m, [x])
    compiled.plan.save(tmp_path / "plan")
    loaded = kernelwright.CompiledModule(kernelwright.Plan.load(tmp_path / "plan"))
    for got in (compiled(x), loaded(x)):
        assert torch.utils._pytree.tree_structure(got) == \
            torch.utils._pytree.tree_structure(want)
        assert type(got) is type(want)
        for g, w in zip(torch.utils._pytree.tree_leaves(got),
                        torch.utils._pytree.tree_leaves(want)):
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def test_plans_of_format_1_still_load(tmp_path):
    m = Fn(lambda x: (x * 2, x + 1))
    x = torch.randn(5)
    compiled = kernelwright.compile(m, [x])
    compiled.plan.save(tmp_path / "plan")
    path = tmp_path / "plan" / "plan.json"
    meta = json.loads(path.read_text())
    assert meta["format"] == 3 and meta["output_tree"] == "tuple"
    meta["format"] = 1
    del meta["scalars"]
    path.write_text(json.dumps(meta))
    out = kernelwright.CompiledModule(kernelwright.Plan.load(tmp_path / "plan"))(x)
    assert isinstance(out, tuple) and len(out) == 2
    torch.testing.assert_close(out, m(x))


def test_python_numbers_are_baked_in_and_checked_at_each_call(tmp_path):
    m = Fn(lambda x, s, flag, y: x * s + (1 if flag else 0) if y is None else x)
    x = torch.randn(3, 4)
    compiled = kernelwright.compile(m, [x, 2.5, True, None])
    torch.testing.assert_close(compiled(x, 2.5, True, None), x * 2.5 + 1)
    for bad in ((x, 3.0, True, None), (x, 2.5, False, None), (x, 2.5, 1, None),
                (x, 2.5, True, x)):
        with pytest.raises(ValueError, match="compiled with .* there: Python numbers"):
            compiled(*bad)
    with pytest.raises(ValueError, match="expected 4 inputs, got 2"):
        compiled(x, 2.5)
    compiled.plan.save(tmp_path / "plan")
    loaded = kernelwright.CompiledModule(kernelwright.Plan.load(tmp_path / "plan"))
    torch.testing.assert_close(loaded(x, 2.5, True, None), x * 2.5 + 1)
    with pytest.raises(ValueError, match="compiled with 2.5"):
        loaded(x, 2.0, True, None)


def test_a_call_after_the_weights_changed_is_an_error(capture):
    m = _mlp().eval()
    x = torch.randn(3, 8)
    compiled = kernelwright.compile(m, [x])
    assert compiled.changed_weights() == []
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), m(x), atol=1e-4, rtol=1e-4)
        m[0].weight.mul_(2)  # in place through the parameter: its version moves
    with pytest.raises(RuntimeError, match=r"weights changed since .*\(0\.weight\)"):
        compiled(x)
    compiled = kernelwright.compile(m, [x])
    m[2].bias.data = torch.zeros(4)  # new storage
    assert compiled.changed_weights() == ["2.bias"]
    m.load_state_dict(_mlp().state_dict())
    assert set(compiled.changed_weights()) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_float64_is_computed_in_float32_with_a_warning(capture):
    m = _mlp().double().eval()
    x = torch.randn(3, 8, dtype=torch.float64)
    with pytest.warns(UserWarning, match=r"float64 weight .*, input 'input' computed in float32"):
        compiled = kernelwright.compile(m, [x])
    out = compiled(x)
    assert out.dtype == torch.float64
    with torch.no_grad():
        torch.testing.assert_close(out, m(x), atol=1e-4, rtol=1e-4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernelwright.compile(_mlp().eval(), [torch.randn(3, 8)])
    assert not [w for w in caught if "float64" in str(w.message)]


def test_compile_reports_only_stages_that_run_long(capfd):
    m = _mlp().eval()
    kernelwright.compile(m, [torch.randn(3, 8)])  # fast: silent
    assert "kernelwright" not in capfd.readouterr().err
    kernelwright.compile(m, [torch.randn(3, 8)], progress=0.0)
    err = capfd.readouterr().err
    assert re.search(r"kernelwright: Sequential: capture\.\.\.\n", err), err
    assert re.search(r"kernelwright: Sequential: capture done in \d+\.\d s", err), err


def _saved(tmp_path):
    x = torch.randn(3, 8)
    compiled = kernelwright.compile(_mlp().eval(), [x])
    compiled.plan.save(tmp_path / "plan")
    return x, compiled, tmp_path / "plan"


def _edit(folder, change) -> None:
    meta = json.loads((folder / "plan.json").read_text())
    change(meta)
    (folder / "plan.json").write_text(json.dumps(meta))


def test_loaded_plans_are_untrusted_unless_the_caller_trusts_them(tmp_path):
    from kernelwright.runtime import runtime

    x, compiled, folder = _saved(tmp_path)
    plan = kernelwright.Plan.load(folder)
    assert not any(k.trusted for k in plan.kernels)
    loaded = kernelwright.CompiledModule(plan)
    assert all(runtime._key(k.source, False) in loaded.exe.dev._pipelines
               for k in plan.kernels)
    torch.testing.assert_close(loaded(x, poison=True), compiled(x), atol=0, rtol=0)
    assert all(k.trusted for k in kernelwright.Plan.load(folder, trust=True).kernels)


def test_a_damaged_or_tampered_plan_is_refused_naming_the_file(tmp_path):
    _, compiled, folder = _saved(tmp_path)
    out = compiled.plan.outputs[0]
    tampered = [
        (lambda m: m["buffers"].__setitem__(out.buffer, {**m["buffers"][out.buffer],
                                                         "nbytes": 8}),
         r"output 0 of shape \[3, 4\] needs 48 bytes, its buffer b\d+ has 8"),
        (lambda m: m["kernels"][0]["bindings"].__setitem__(0, 99), "names no buffer"),
        (lambda m: m["kernels"][0].__setitem__("bindings", [0]), "names no buffer"),
        (lambda m: m["buffers"][0].__setitem__("dtype", "i32"), "declared f32, its buffer"),
        (lambda m: m["kernels"][0].__setitem__("grid", [1, -1, 1]), "malformed"),
        (lambda m: m["inputs"][0].__setitem__("torch_dtype", "int64"), "holds f32"),
        (lambda m: m.__setitem__("output_tree", "spam"), "output_tree 'spam'"),
        (lambda m: m["buffers"].pop(), "KeyError|IndexError|names no buffer|malformed"),
        (lambda m: m["kernels"][0].pop("source"), "TypeError"),
    ]
    for change, why in tampered:
        (folder / "plan.json").unlink()
        compiled.plan.save(folder)
        _edit(folder, change)
        with pytest.raises(PlanFileError, match=rf"{re.escape(str(folder))}\S*: .*({why})"):
            kernelwright.Plan.load(folder)
    compiled.plan.save(folder)
    text = (folder / "plan.json").read_text()
    (folder / "plan.json").write_text(text[: len(text) // 2])
    with pytest.raises(PlanFileError, match=r"plan\.json: not a valid .*JSONDecodeError"):
        kernelwright.Plan.load(folder)
    compiled.plan.save(folder)
    data = (folder / "constants.safetensors").read_bytes()
    (folder / "constants.safetensors").write_bytes(data[:40])
    with pytest.raises(PlanFileError, match=r"constants\.safetensors: not a valid"):
        kernelwright.Plan.load(folder)


def test_a_grid_beyond_the_devices_dispatch_limit_is_refused(tmp_path):
    _, compiled, folder = _saved(tmp_path)
    limit = kernelwright.runtime.default_device().device.limits[
        "max-compute-workgroups-per-dimension"]
    _edit(folder, lambda m: m["kernels"][0].__setitem__("grid", [limit + 1, 1, 1]))
    plan = kernelwright.Plan.load(folder)
    with pytest.raises(RuntimeError, match=rf"dispatches \({limit + 1}, 1, 1\) workgroups"):
        kernelwright.CompiledModule(plan)


class _Counted(torch.nn.Module):
    """A check of a tensor's values (as transformers checks a VLM's image tokens)."""

    def forward(self, x, ids):
        torch._check_tensor_all((ids == 3).sum() == x.shape[0])
        return x * 2


def test_a_module_checking_its_values_raises_where_eager_would(tmp_path):
    """A torch._check on values the call computes is computed by the plan and raised
    (a RuntimeError naming the module's line) where it fails, also from a saved plan;
    a call that passes it returns eager's result."""
    x, ids = torch.randn(4, 2), torch.tensor([3, 3, 1, 3, 3])
    compiled = kernelwright.compile(_Counted(), [x, ids])
    assert compiled.plan.checks
    torch.testing.assert_close(compiled(x, ids), x * 2)
    compiled.plan.save(tmp_path / "plan")
    loaded = kernelwright.CompiledModule(kernelwright.Plan.load(tmp_path / "plan"))
    for cm in (compiled, loaded):
        with pytest.raises(RuntimeError, match="(?s)check failed.*test_compile_api"):
            cm(x, torch.tensor([3, 1, 1, 3, 3]))
