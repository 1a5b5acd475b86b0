"""The accelerated precision mode (matmuls on cooperative matrices, f16 operands, f32
accumulation). The software driver has no cooperative matrices, so these tests cover
the selection logic (feature absent: strict kernels and a warning), the generated WGSL
(structure, and its index arithmetic run with the cooperative builtins emulated in
plain WGSL), the runtime's feature request and the bench's tolerance plumbing.
tools/coop_matmul.py is the test on real hardware."""

from __future__ import annotations

import re
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import kernelwright
from kernelwright import compiler, kernels
from kernelwright.check.tolerance import Tolerance
from kernelwright.harness import runner, worker
from kernelwright.ir.ir import CompileError, GraphBuilder
from kernelwright.options import CompileOptions
from kernelwright.runtime import runtime
from kernelwright.schedule.schedule import build_plan, fuse, live_nodes


def matmul_graph(m, k, n, transposed_b=False, relu=False):
    b = GraphBuilder()
    x = b.input((m, k), "f32", "x")
    w = b.input((n, k) if transposed_b else (k, n), "f32", "w")
    y = b.matmul(x, b.transpose(w, 0, 1) if transposed_b else w)
    if relu:
        y = b.ew("relu", y)
    b.graph.outputs.append(y)
    return b.graph, {x: "float32", w: "float32", y: "float32"}


def generated(graph, knobs=None, mode="accelerated"):
    """The template-node kernel of a one-matmul graph, generated in `mode`."""
    groups = fuse(graph, live_nodes(graph))
    materialized = {g.root for g in groups}
    (g,) = [g for g in groups if g.template is not None]
    return kernels.fill_kernel(g.root, g.template, materialized, lambda v: id(v), knobs,
                               options=CompileOptions(mode))


# -- selection ------------------------------------------------------------------------
def test_feature_absent_gives_strict_kernels_with_a_warning():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(50, 72), torch.nn.ReLU())
    x = torch.randn(40, 50)
    dev = runtime.default_device()
    assert not dev.has_coop_matrix  # the software driver has no cooperative matrices
    with pytest.warns(UserWarning, match="accelerated precision is not available.*strict"):
        cm = kernelwright.compile(model, [x], precision="accelerated")
    assert cm.precision == "strict"
    assert all(not k.key.startswith("matmul_coop") for k in cm.plan.kernels)
    torch.testing.assert_close(cm(x), model(x), atol=1e-4, rtol=1e-4)
    assert "cooperative-matrix" in compiler.accelerated_unavailable(dev)


def test_precision_from_environment(monkeypatch):
    model = torch.nn.Linear(20, 24)
    x = torch.randn(18, 20)
    monkeypatch.setenv("KERNELWRIGHT_PRECISION", "accelerated")
    with pytest.warns(UserWarning, match="accelerated precision"):
        assert kernelwright.compile(model, [x]).precision == "strict"
    monkeypatch.setenv("KERNELWRIGHT_PRECISION", "strict")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert kernelwright.compile(model, [x]).precision == "strict"
    monkeypatch.setenv("KERNELWRIGHT_PRECISION", "fast")
    with pytest.raises(ValueError, match="precision 'fast'"):
        kernelwright.compile(model, [x])


def test_probe_reasons_without_running_anything():
    no_coop = SimpleNamespace(has_coop_matrix=False, coop_error="experimental features off")
    assert "experimental features off" in compiler._probe_accelerated(no_coop)
    no_f16 = SimpleNamespace(has_coop_matrix=True, coop_error="",
                             features={"cooperative-matrix", "subgroups"})
    assert "shader-f16" in compiler._probe_accelerated(no_f16)


def test_template_choice_by_mode_and_size():
    graph, dtypes = matmul_graph(40, 50, 72, transposed_b=True, relu=True)
    assert generated(graph).name == "matmul_coop"
    assert generated(graph, mode="strict").name == "matmul"
    # the whole pipeline, default chooser off
    plan = build_plan(graph, "single", dtypes, CompileOptions("accelerated"))
    assert [k.key.split()[0] for k in plan.kernels] == ["matmul_coop"]
    for m, k, n in ((8, 50, 72), (40, 8, 72), (40, 50, 12)):  # less than one 16^3 tile
        assert generated(matmul_graph(m, k, n)[0]).name == "matmul"
    with pytest.raises(ValueError):
        CompileOptions("fast")


# -- the generated WGSL ---------------------------------------------------------------
COOP_CALL = re.compile(r"coop(Load|LoadT|Store|StoreT|MultiplyAdd)\b")


@pytest.mark.parametrize("knobs", [None, {"LOAD": "row"}, {"LOAD": "rowT", "BK": 16},
                                   {"BM": 64, "BN": 128, "WM": 32, "WN": 64, "BK": 64}])
def test_wgsl_structure(knobs):
    graph, _ = matmul_graph(300, 200, 260, transposed_b=True, relu=True)
    gen = generated(graph, knobs)
    src, used = gen.source, gen.knobs
    lay = kernels.matmul_coop._coop_layout(used)
    ti, tj = used["WM"] // 16, used["WN"] // 16
    assert src.startswith("// ") and "enable f16;\nenable wgpu_cooperative_matrix;\n" in src
    assert f"@workgroup_size({lay['nsg'] * 32})" in src
    assert src.count("coopMultiplyAdd(") == ti * tj
    load, store = kernels.matmul_coop.COOP_LOADS[used["LOAD"]][:2]
    assert src.count(f"{load}<coop_mat16x16<f16, A>>") == ti
    assert src.count(f"{load}<coop_mat16x16<f16, B>>") == tj
    assert src.count(f"{store}(acc_") == ti * tj
    assert f"array<f16, {lay['a_words']}>" in src and f"array<f16, {lay['b_words']}>" in src
    assert src.count("epilogue(acc, gi)") == ti * tj and "max(acc, f32(0.0))" in src
    # Cooperative operations stay in uniform control flow: never on a line with a branch.
    for line in src.splitlines():
        if COOP_CALL.search(line):
            assert "if (" not in line and "lane" not in line, line
    assert gen.grid == (-(-260 // used["BN"]), -(-300 // used["BM"]), 1)
    assert gen.key.template == "matmul_coop"


@pytest.mark.parametrize("bad", [{"WM": 24}, {"BK": 8}, {"PAD": 4}, {"LOAD": "diag"},
                                 {"BM": 128, "BN": 128, "WM": 16, "WN": 16}, {"TM": 4}])
def test_bad_knobs_are_compile_errors(bad):
    with pytest.raises(CompileError):
        generated(matmul_graph(300, 200, 260)[0], bad)


def test_knob_space_is_valid():
    graph, _ = matmul_graph(1000, 700, 900)
    space = kernels.matmul_coop.matmul_coop_space(1000, 900, 700)
    assert space and all(k["LOAD"] == "col" for k in space)
    for knobs in space:
        gen = generated(graph, knobs)
        assert gen.knobs == knobs
        coop = kernels.matmul_coop
        assert coop._coop_layout(knobs)["bytes"] <= coop.COOP_WORKGROUP_BYTES


# The cooperative builtins emulated in plain WGSL. A fragment is (base, stride) into its
# staged tile, read lazily in the memory order the template assumes for its LOAD; every
# invocation keeps its own copy of its subgroup's accumulators in private memory.
EMULATION = """
var<private> emu_acc: array<f32, NACC * 256>;
fn at(r: i32, c: i32, s: i32) -> i32 { return select(c * s + r, r * s + c, ROW); }
fn emu_zero(id: i32) -> i32 {
  for (var i = 0; i < 256; i++) { emu_acc[id * 256 + i] = 0.0; } return id; }
fn emu_mma(a: vec2<i32>, b: vec2<i32>, id: i32) -> i32 {
  for (var r = 0; r < 16; r++) { for (var q = 0; q < 16; q++) {
    var s = emu_acc[id * 256 + r * 16 + q];
    for (var k = 0; k < 16; k++) {
      s = fma(f32(tile_a[a.x + at(r, k, a.y)]), f32(tile_b[b.x + at(k, q, b.y)]), s); }
    emu_acc[id * 256 + r * 16 + q] = s; } }
  return id; }
fn emu_store(id: i32, base: i32) {
  for (var i = 0; i < 256; i++) { tile_c[base + at(i / 16, i % 16, 16)] = emu_acc[id * 256 + i]; } }
"""


def emulated(src: str, row_major: bool, accumulators: int) -> str:
    src = src.replace("enable wgpu_cooperative_matrix;\n", "")
    src = src.replace(",\n        @builtin(subgroup_id) sg: u32,\n"
                      "        @builtin(subgroup_invocation_id) lane: u32) {",
                      ") {\n    let sg = li / 32u; let lane = li % 32u;")
    src = re.sub(r"coopLoadT?<coop_mat16x16<f16, [AB]>>\(&tile_[ab]\[(.*?)\], (\d+)u\)",
                 r"vec2<i32>(\1, \2)", src)
    ids = iter(range(accumulators))
    src = re.sub(r"coopLoadT?<coop_mat16x16<f32, C>>\(&tile_c\[cbase\], 16u\)",
                 lambda _: f"emu_zero({next(ids)})", src)
    src = re.sub(r"coopStoreT?\((acc_\d+_\d+), &tile_c\[cbase\], 16u\)",
                 r"emu_store(\1, cbase)", src)
    src = src.replace("coopMultiplyAdd(", "emu_mma(")
    assert not COOP_CALL.search(re.sub(r"//.*", "", src))
    head, _, body = src.partition("\n@compute")
    emulation = EMULATION.replace("ROW", "true" if row_major else "false")
    return head + emulation.replace("NACC", str(accumulators)) + "\n@compute" + body


@pytest.mark.parametrize("load", ["col", "rowT"])
def test_index_arithmetic_with_emulated_cooperative_ops(load):
    """The template's staging, fragment offsets, accumulator layout and epilogue store, run
    on the software driver with the cooperative builtins replaced by plain WGSL: A @ B^T
    + relu at a shape with partial tiles on every side, batch 2, against numpy on the
    f16-rounded operands."""
    bsz, m, k, n = 2, 37, 45, 50
    b = GraphBuilder()
    x = b.input((bsz, m, k), "f32", "x")
    w = b.input((bsz, n, k), "f32", "w")
    y = b.ew("relu", b.matmul(x, b.transpose(w, 1, 2)))
    b.graph.outputs.append(y)
    knobs = {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "BK": 32, "PAD": 8, "LOAD": load}
    plan = build_plan(b.graph, "single", {x: "float32", w: "float32", y: "float32"},
                      CompileOptions("accelerated", choose=lambda request: knobs))
    (kernel,) = plan.kernels
    assert kernel.key.startswith("matmul_coop") and kernel.knobs == knobs
    kernel.source = emulated(kernel.source, kernels.matmul_coop.COOP_LOADS[load][2], 4)
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((bsz, m, k)).astype(np.float32)
    ws = rng.standard_normal((bsz, n, k)).astype(np.float32)
    (got,) = runtime.Executable(plan).run([xs, ws])
    r16 = [a.astype(np.float16).astype(np.float64) for a in (xs, ws)]
    want = np.maximum(r16[0] @ r16[1].transpose(0, 2, 1), 0)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


# -- runtime and bench plumbing -------------------------------------------------------
class RefusingAdapter:
    """The software adapter, claiming cooperative matrices and refusing them on request."""

    def __init__(self, real):
        self.real = real
        self.info = real.info
        self.limits = real.limits
        self.features = set(real.features) | {"cooperative-matrix"}
        self.requests = []

    def request_device_sync(self, required_features, required_limits):
        self.requests.append(list(required_features))
        if "cooperative-matrix" in required_features:
            raise RuntimeError("Some experimental features were requested, but experimental "
                               "features are not enabled")
        return self.real.request_device_sync(required_features=required_features,
                                             required_limits=required_limits)


def test_refused_feature_never_breaks_opening_the_device():
    adapter = RefusingAdapter(runtime.default_device("wgpu").adapter)  # its feature names
    dev = runtime.open_device(adapter)
    assert adapter.requests[0][-1] == "cooperative-matrix"
    assert "cooperative-matrix" not in adapter.requests[1]
    assert not dev.has_coop_matrix and "experimental features" in dev.coop_error
    assert "experimental features" in compiler._probe_accelerated(dev)


def test_tolerance_and_labels():
    tol = Tolerance(accelerated=True)
    assert tol.label == "accelerated-f16"
    assert tol.for_dtype(torch.float32) == (1e-2, 1e-2)
    assert Tolerance().for_dtype(torch.float32) == (1e-4, 1e-4)
    assert worker.precision_label(False, True) == "accelerated-f16"
    assert worker.precision_label(True, False) == "loose(1e-2)"
    fast, strict = runner.BenchSettings(accelerated=True), runner.BenchSettings()
    assert fast.key() != strict.key()
    problem = SimpleNamespace(path="p.py", name="p", level=1)
    cfg = fast.worker_config(problem)
    assert cfg.accelerated and worker.new_result(cfg)["precision"] == "accelerated-f16"
    assert worker.WorkerConfig.from_json(cfg.to_json()).accelerated


def test_bench_factory_passes_the_precision():
    make = worker.load_factory("kernelwright", "accelerated")
    with pytest.warns(UserWarning, match="accelerated precision"):
        candidate = make(torch.nn.Linear(20, 24), [torch.randn(18, 20)])
    assert candidate.precision == "strict"
