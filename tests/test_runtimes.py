"""The two runtimes (runtimes.py): the choice of one, the feature names, the WGSL both
accept, and, where Dawn opens a device (Mesa 26.1's software driver or a GPU: `./dev
test-dawn`), kernels run on it; elsewhere those tests skip with Dawn's reason."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import kernelwright
from kernelwright.codegen import codegen
from kernelwright.ir.ir import GraphBuilder
from kernelwright.options import CompileOptions
from kernelwright.plan import Plan
from kernelwright.runtime import runtime, runtimes
from kernelwright.schedule.schedule import build_plan


def test_runtime_name_from_argument_environment_and_default(monkeypatch):
    monkeypatch.delenv(runtimes.ENV, raising=False)
    assert runtimes.runtime_name() == "wgpu"
    monkeypatch.setenv(runtimes.ENV, " Dawn ")
    assert runtimes.runtime_name() == "dawn"
    assert runtimes.runtime_name("wgpu") == "wgpu"  # the argument wins
    monkeypatch.setenv(runtimes.ENV, "metal")
    with pytest.raises(ValueError, match="runtime 'metal'"):
        runtimes.runtime_name()


def test_feature_names_map_to_ours():
    wgpu_adapter = SimpleNamespace(features={"subgroup", "shader-f16", "cooperative-matrix"})
    assert runtimes.adapter_features("wgpu", wgpu_adapter) == {
        "subgroups": "subgroup", "shader-f16": "shader-f16",
        "cooperative-matrix": "cooperative-matrix"}
    dawn_adapter = SimpleNamespace(features={"subgroups", "timestamp-query",
                                             "chromium-experimental-subgroup-matrix"})
    assert runtimes.adapter_features("dawn", dawn_adapter) == {
        "subgroups": "subgroups", "timestamp-query": "timestamp-query",
        "subgroup-matrix": "chromium-experimental-subgroup-matrix"}
    assert runtimes.subgroup_matrix_configs("wgpu", wgpu_adapter) == ()


def test_missing_package_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "wgpudawn", None)  # import fails
    monkeypatch.setattr(runtimes, "_APIS", {})
    with pytest.raises(runtimes.RuntimeUnavailable, match="wgpudawn"):
        runtimes.api("dawn")


def test_default_device_is_wgpu_native_with_our_feature_names():
    dev = runtime.default_device("wgpu")
    assert dev.runtime == "wgpu" and dev.robust
    assert dev.features <= set(runtimes.FEATURES)
    assert dev.has_timestamps == ("timestamp-query" in dev.features)


def test_non_finite_constants_are_not_constant_expressions():
    """Tint refuses a constant expression whose value is infinite or NaN: the literals
    go through kw_f32_bits, declared once in the kernels that call it."""
    assert codegen.literal(float("-inf"), "f32") == "kw_f32_bits(0xff800000u)"
    assert codegen.literal(float("nan"), "f32") == codegen.NAN
    src = "fn main() { let x = kw_f32_bits(0x7f800000u); }"
    once = codegen.with_f32_bits(src)
    assert once.count("fn kw_f32_bits(") == 1 and codegen.with_f32_bits(once) == once
    assert codegen.with_f32_bits("fn main() {}") == "fn main() {}"


def _inf_plan():
    """A max reduction (identity -inf) of relu(x) where x > -0.5, else -inf."""
    b = GraphBuilder()
    x = b.input((6, 10), "f32", "x")
    keep = b.ew("gt", x, b.scalar(-0.5), dtype="bool")
    y = b.ew("where", keep, b.ew("relu", x), b.scalar(float("-inf")))
    out = b.reduce(y, "max", [1])
    b.graph.outputs.append(out)
    return build_plan(b.graph, "single", {x: "float32", out: "float32"}, CompileOptions())


def _check_inf_plan(dev):
    plan = _inf_plan()
    assert all("bitcast<f32>(0xff800000u)" not in k.source for k in plan.kernels)
    xs = np.random.default_rng(0).standard_normal((6, 10)).astype(np.float32)
    (got,) = runtime.Executable(plan, dev).run([xs])
    want = np.where(xs > -0.5, np.maximum(xs, 0), -np.inf).max(1)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_infinite_constants_run_on_wgpu():
    _check_inf_plan(runtime.default_device("wgpu"))


# -- on Dawn, where it opens a device -----------------------------------------------------
@pytest.fixture(scope="module")
def dawn():
    """Dawn's default device; the test is skipped (conftest) where Dawn opens none."""
    return runtime.default_device("dawn")


def test_dawn_device(dawn):
    assert dawn.runtime == "dawn" and "Dawn" in dawn.description
    assert not dawn.robust  # trusted kernels run without bounds checks
    assert dawn.features <= set(runtimes.FEATURES)
    assert "cooperative-matrix" not in dawn.features  # wgpu-native's, not Dawn's
    if "subgroup-matrix" in dawn.features:
        assert dawn.subgroup_matrix_configs
        assert all(c.m > 0 and c.n > 0 and c.k > 0 for c in dawn.subgroup_matrix_configs)
    assert dawn.limits["max-storage-buffers-per-shader-stage"] >= 8
    from wgpudawn.backends.dawn import extras

    toggles = extras.get_toggles(dawn.device)
    assert "disable_robustness" in toggles
    assert "timestamp_quantization" not in toggles  # benchmark timers at full precision


def test_dawn_runs_infinite_constants(dawn):
    _check_inf_plan(dawn)


@pytest.mark.parametrize("make,shape", [
    (lambda: torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.GELU(),
                                 torch.nn.LayerNorm(30), torch.nn.Softmax(-1)), (7, 20)),
    (lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.MaxPool2d(2)), (2, 3, 10, 10)),
])
def test_dawn_compiles_modules(dawn, make, shape):
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape)
    cm = kernelwright.compile(model, [x], runtime="dawn")
    assert cm.exe.dev is dawn
    torch.testing.assert_close(cm(x, poison=True), model(x), atol=1e-4, rtol=1e-4)


def test_dawn_untrusted_plan_runs_with_bounds_checks(dawn, tmp_path):
    """A plan loaded without trust runs on the robust sibling of Dawn's device."""
    model = torch.nn.Linear(12, 5).eval()
    x = torch.randn(3, 12)
    kernelwright.compile(model, [x], device=dawn).plan.save(tmp_path)
    plan = Plan.load(tmp_path)
    assert not any(k.trusted for k in plan.kernels)
    exe = runtime.Executable(plan, dawn)
    assert exe.dev is dawn.checked() and exe.dev.robust and exe.dev is not dawn
    with pytest.raises(RuntimeError, match="without bounds checks"):
        dawn.pipeline(plan.kernels[0].source, trusted=False)
