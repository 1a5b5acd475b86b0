"""The accelerated precision mode (matmuls on the device's matrix units, f16 operands,
f32 accumulation). Everywhere: the matrix unit's choice from what a device reports, the
selection logic (no unit: strict kernels and a warning), the generated WGSL of both
spellings (Dawn's subgroup matrices, wgpu-native's cooperative matrices: structure, and
the latter's index arithmetic run with its builtins emulated in plain WGSL), the
runtime's feature request and the bench's tolerance plumbing. On a device with subgroup
matrices (Dawn on Mesa 26.1's software driver: 8 x 8 x 8; python-dawn -m pytest
--runtime dawn) the kernels run against PyTorch at the fp16 tolerance; elsewhere those
tests skip. tools/coop_matmul.py is the test on real hardware."""

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
from kernelwright.kernels.gemv import GEMV_MAX_M
from kernelwright.kernels.matmul_coop import COOP_UNIT, MATRIX_LOADS
from kernelwright.lower import attention as attention_ops
from kernelwright.options import CompileOptions, MatrixUnit
from kernelwright.runtime import runtime, runtimes
from kernelwright.schedule.schedule import build_plan, fuse, live_nodes

SUB8 = MatrixUnit("subgroup-matrix", 8, 8, 8, 8)  # Mesa 26.1's software driver, via Dawn
SUB16 = MatrixUnit("subgroup-matrix", 16, 16, 16, 32)  # NVIDIA's, via Dawn
UNITS = (SUB8, SUB16, COOP_UNIT)


def matmul_graph(m, k, n, transposed_b=False, relu=False):
    b = GraphBuilder()
    x = b.input((m, k), "f32", "x")
    w = b.input((n, k) if transposed_b else (k, n), "f32", "w")
    y = b.matmul(x, b.transpose(w, 0, 1) if transposed_b else w)
    if relu:
        y = b.ew("relu", y)
    b.graph.outputs.append(y)
    return b.graph, {x: "float32", w: "float32", y: "float32"}


def accelerated(unit=COOP_UNIT, **kw):
    return CompileOptions("accelerated", matrix=unit, **kw)


def generated(graph, knobs=None, mode="accelerated", unit=COOP_UNIT):
    """The template-node kernel of a one-matmul graph, generated in `mode`."""
    groups = fuse(graph, live_nodes(graph))
    materialized = {g.root for g in groups}
    (g,) = [g for g in groups if g.template is not None]
    options = accelerated(unit) if mode == "accelerated" else CompileOptions(mode)
    return kernels.fill_kernel(g.root, g.template, materialized, lambda v: id(v), knobs,
                               options=options)


def config(component="f16", result="f32", side=8, lo=8, hi=8):
    return runtimes.SubgroupMatrixConfig(component, result, side, side, side, lo, hi)


# -- the matrix unit ------------------------------------------------------------------
MESA = (config("f16", "f16"), config(), config("u8", "u32"), config("i8", "i32"))
BASE = {"shader-f16", "subgroups"}


def test_matrix_unit_from_the_reported_configs():
    assert kernels.matrix_unit(BASE | {"subgroup-matrix"}, MESA) == SUB8
    nvidia = (config("f16", "f16", 16, 32, 32), config("f16", "f32", 16, 32, 32))
    assert kernels.matrix_unit(BASE | {"subgroup-matrix"}, nvidia) == SUB16
    both = (config(side=8), config(side=16, lo=32, hi=32))  # the largest product first
    assert kernels.matrix_unit(BASE | {"subgroup-matrix"}, both) == SUB16
    # f16 results only, or subgroups of varying size: not usable
    for configs in ((config("f16", "f16"),), (config(lo=8, hi=32),), ()):
        assert kernels.matrix_unit(BASE | {"subgroup-matrix"}, configs) is None
    assert kernels.matrix_unit(BASE | {"cooperative-matrix"}, ()) == COOP_UNIT
    assert kernels.matrix_unit({"subgroups", "subgroup-matrix"}, MESA) is None  # no f16
    assert kernels.matrix_unit(BASE, MESA) is None  # the feature not granted
    with pytest.raises(ValueError):
        MatrixUnit("tensor-core", 16, 16, 16, 32)


def test_accelerated_options_need_a_unit():
    with pytest.raises(ValueError, match="matrix unit"):
        CompileOptions("accelerated")
    with pytest.raises(ValueError):
        CompileOptions("fast")
    assert accelerated().matrix == COOP_UNIT


# -- selection ------------------------------------------------------------------------
def test_device_without_a_unit_gives_strict_kernels_with_a_warning():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(50, 72), torch.nn.ReLU())
    x = torch.randn(40, 50)
    dev = runtime.default_device("wgpu")  # wgpu-native: no subgroup matrices, no coop here
    if compiler.device_matrix(dev) is not None:
        pytest.skip(f"{dev.description} has a matrix unit")
    with pytest.warns(UserWarning, match="(?s)accelerated precision is not available.*strict"):
        cm = kernelwright.compile(model, [x], device=dev, precision="accelerated")
    assert cm.precision == "strict"
    assert all(not k.key.startswith("matmul_coop") for k in cm.plan.kernels)
    torch.testing.assert_close(cm(x), model(x), atol=1e-4, rtol=1e-4)
    assert "cooperative-matrix" in compiler.accelerated_unavailable(dev)
    with pytest.raises(ValueError, match="(?s)accelerated.*strict"):  # no fallback there
        compiler.plan_module(model, [x], precision="accelerated", device=dev)


def test_precision_from_environment(monkeypatch):
    model = torch.nn.Linear(20, 24)
    x = torch.randn(18, 20)
    dev = runtime.default_device("wgpu")
    if compiler.device_matrix(dev) is not None:
        pytest.skip(f"{dev.description} has a matrix unit")
    monkeypatch.setenv("KERNELWRIGHT_PRECISION", "accelerated")
    with pytest.warns(UserWarning, match="accelerated precision"):
        assert kernelwright.compile(model, [x], device=dev).precision == "strict"
    monkeypatch.setenv("KERNELWRIGHT_PRECISION", "strict")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert kernelwright.compile(model, [x], device=dev).precision == "strict"
    monkeypatch.setenv("KERNELWRIGHT_PRECISION", "fast")
    with pytest.raises(ValueError, match="precision 'fast'"):
        kernelwright.compile(model, [x], device=dev)


def fake_device(features, configs=(), coop_error=""):
    return SimpleNamespace(features=frozenset(features), subgroup_matrix_configs=configs,
                           coop_error=coop_error)


def test_probe_reasons_without_running_anything():
    off = fake_device(BASE | {"subgroup-matrix"}, (config("f16", "f16"),))
    assert "f16->f16 8x8x8" in compiler._probe_accelerated(off)
    no_coop = fake_device(BASE, coop_error="experimental features off")
    why = compiler._probe_accelerated(no_coop)
    assert "experimental features off" in why and "subgroup matrices" in why
    no_f16 = fake_device({"subgroup-matrix", "subgroups"}, MESA)
    assert "shader-f16" in compiler._probe_accelerated(no_f16)


@pytest.mark.parametrize("unit", UNITS, ids=str)
def test_template_choice_by_mode_and_size(unit):
    graph, dtypes = matmul_graph(40, 50, 72, transposed_b=True, relu=True)
    assert generated(graph, unit=unit).name == "matmul_coop"
    assert generated(graph, mode="strict").name == "matmul"
    # the whole pipeline, default chooser off
    plan = build_plan(graph, "single", dtypes, accelerated(unit))
    assert [k.key.split()[0] for k in plan.kernels] == ["matmul_coop"]
    s = unit.m - 1  # less than one matrix on one side: few rows take the gemv
    for m, k, n in ((s, 50, 72), (40, s, 72), (40, 50, s)):
        want = "gemv" if m <= GEMV_MAX_M else "matmul"
        assert generated(matmul_graph(m, k, n)[0], unit=unit).name == want


# -- the generated WGSL ---------------------------------------------------------------
COOP_CALL = re.compile(r"coop(Load|LoadT|Store|StoreT|MultiplyAdd)\b")
MATRIX_CALL = re.compile(r"(coop(Load|LoadT|Store|StoreT|MultiplyAdd)|subgroupMatrix\w+)\b")


def assert_uniform_matrix_calls(src):
    """Matrix operations stay in uniform control flow: never on a line with a branch."""
    for line in src.splitlines():
        if MATRIX_CALL.search(line):
            assert "if (" not in line and "lane" not in line, line


@pytest.mark.parametrize("knobs", [None, {"LOAD": "row"}, {"LOAD": "rowT", "BK": 16},
                                   {"BM": 64, "BN": 128, "WM": 32, "WN": 64, "BK": 64}])
def test_cooperative_wgsl_structure(knobs):
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
    assert "subgroupMatrix" not in re.sub(r"//.*", "", src)
    assert_uniform_matrix_calls(src)
    assert gen.grid == (-(-260 // used["BN"]), -(-300 // used["BM"]), 1)
    assert gen.key.template == "matmul_coop"


@pytest.mark.parametrize("unit", [SUB8, SUB16], ids=str)
@pytest.mark.parametrize("knobs", [None, {"LOAD": "col"}, {"LOAD": "k"}, {"LOAD": "mn"},
                                   {"BM": 64, "BN": 128, "WM": 32, "WN": 64, "BK": 64}])
def test_subgroup_matrix_wgsl_structure(unit, knobs):
    graph, _ = matmul_graph(300, 200, 260, transposed_b=True, relu=True)
    gen = generated(graph, knobs, unit=unit)
    src, used = gen.source, gen.knobs
    lay = kernels.matmul_coop._coop_layout(used, unit)
    s = unit.m
    ti, tj = used["WM"] // s, used["WN"] // s
    assert ("enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;\n"
            in src)
    assert "coop" not in re.sub(r"//.*", "", src)
    assert f"@workgroup_size({lay['nsg'] * unit.subgroup})" in src
    col_a, col_b = ("false" if r else "true"
                    for r in kernels.matmul_coop.TILE_ORDERS[used["LOAD"]])
    left = f"subgroupMatrixLoad<subgroup_matrix_left<f16, {s}, {s}>>(&tile_a, u32("
    right = f"subgroupMatrixLoad<subgroup_matrix_right<f16, {s}, {s}>>(&tile_b, u32("
    assert src.count(left) == ti and src.count(right) == tj
    assert re.findall(rf"tile_a, u32\(.*\), {col_a}, {lay['sa']}u\)", src) and len(
        re.findall(rf"tile_b, u32\(.*\), {col_b}, {lay['sb']}u\)", src)) == tj
    assert src.count(f"subgroup_matrix_result<f32, {s}, {s}>()") == ti * tj
    assert src.count("subgroupMatrixMultiplyAccumulate(") == ti * tj
    assert src.count("subgroupMatrixStore(&tile_c, u32(cbase), acc_") == ti * tj
    assert f"kk += {s})" in src and f"tile_c: array<f32, {lay['nsg']} * {s * s}>" in src
    assert src.count("epilogue(acc, gi)") == ti * tj and "max(acc, f32(0.0))" in src
    assert_uniform_matrix_calls(src)
    assert lay["bytes"] == gen.workgroup_bytes
    assert gen.grid == (-(-260 // used["BN"]), -(-300 // used["BM"]), 1)
    if knobs is None:  # 8 x 8 matrices per tile, 8 subgroups of 4 x 2 accumulators
        assert (used["BM"], used["BN"], used["WM"], used["WN"]) == (8 * s, 8 * s, 4 * s, 2 * s)


@pytest.mark.parametrize("unit", [SUB16, COOP_UNIT], ids=str)
@pytest.mark.parametrize("over", [
    {"VEC": 4}, {"PREFETCH": 1}, {"STAGES": 2}, {"VEC": 4, "PREFETCH": 1, "STAGES": 2},
    {"GROUP": 4, "EPI": "row"}, {"BM": 128, "BN": 256, "WM": 64, "WN": 64, "BK": 16,
                                 "VEC": 4, "PREFETCH": 1, "STAGES": 2, "EPI": "row"}])
def test_pipeline_knobs_wgsl(unit, over):
    """What each knob of the staging, K loop, tile order and epilogue writes, for
    NVIDIA's 16 x 16 x 16 matrices in subgroups of 32 (Dawn's spelling) and wgpu-native's:
    A @ B^T + relu, 1000 x 600 x 900 (K a multiple of 4, M and N partial tiles)."""
    graph, _ = matmul_graph(1000, 600, 900, transposed_b=True, relu=True)
    gen = generated(graph, over, unit=unit)
    src, used = gen.source, gen.knobs
    lay = kernels.matmul_coop._coop_layout(used, unit)
    ti, tj, bk = used["WM"] // 16, used["WN"] // 16, used["BK"]
    stages = used["STAGES"]
    assert lay["bytes"] == gen.workgroup_bytes == (2 * stages * (lay["a_words"] + lay["b_words"])
                                                   + 4 * lay["nsg"] * lay["scratch"])
    assert f"array<f16, {stages * lay['a_words']}>" in src
    assert f"array<f16, {stages * lay['b_words']}>" in src
    assert f"@workgroup_size({lay['nsg'] * 32})" in src
    assert_uniform_matrix_calls(src)
    # VEC 4: both plain operands read 16 bytes a load through their vec4 views
    assert ("in0v4[" in src and "in1v4[" in src and "vec4<f32>;" in src) == (used["VEC"] == 4)
    if used["VEC"] == 1:
        assert "load_a(b, m0 + " in src and "load_b(b, kb + " in src
    # K 600 is not a multiple of BK 32 or 16: the K test is written
    assert " < 600) {" in src
    # PREFETCH 1 or STAGES 2: the next tiles fetched while the multiplies run
    assert (f"if (k0 + {bk} < 600) {{" in src) == (used["PREFETCH"] == 1 or stages == 2)
    assert ("let ra = ((k0 / " in src) == (stages == 2)
    loop = src[src.index("for (var k0"):src.index("for (var kk")]
    assert loop.count("workgroupBarrier();") == (1 if stages == 1 else 0)
    assert ("let pid = " in src) == (used["GROUP"] > 0)
    sub = unit.api == "subgroup-matrix"
    mma = "subgroupMatrixMultiplyAccumulate(" if sub else "coopMultiplyAdd("
    assert src.count(mma) == ti * tj
    epilogue = src[src.index("for (var kk"):]
    per_store = 1 if used["EPI"] == "row" else tj
    assert epilogue.count("workgroupBarrier();") == 2 * ti * per_store + 1
    assert src.count("epilogue(acc, gi)") == ti * per_store
    if sub and used["EPI"] == "row":
        row = f"subgroupMatrixStore(&tile_c, u32(cbase + 16), acc_0_1, false, {used['WN']}u);"
        assert row in src


@pytest.mark.parametrize("unit,bad", [
    (COOP_UNIT, {"WM": 24}), (COOP_UNIT, {"BK": 8}), (COOP_UNIT, {"PAD": 4}),
    (COOP_UNIT, {"LOAD": "diag"}), (COOP_UNIT, {"BM": 128, "BN": 128, "WM": 16, "WN": 16}),
    (COOP_UNIT, {"TM": 4}), (SUB8, {"LOAD": "rowT"}), (SUB8, {"WM": 12}), (SUB8, {"BK": 12}),
    (SUB16, {"WN": 24}), (SUB8, {"BM": 256, "BN": 256, "WM": 8, "WN": 8}),
    (SUB16, {"VEC": 2}), (SUB16, {"PREFETCH": 2}), (SUB16, {"STAGES": 3}),
    (SUB16, {"GROUP": -1}), (SUB16, {"EPI": "tile"}), (SUB16, {"VEC": 4, "BK": 36})])
def test_bad_knobs_are_compile_errors(unit, bad):
    with pytest.raises(CompileError):
        generated(matmul_graph(300, 200, 260)[0], bad, unit=unit)


@pytest.mark.parametrize("unit", UNITS, ids=str)
def test_knob_space_is_valid(unit):
    graph, _ = matmul_graph(1000, 700, 900)
    space = kernels.matmul_coop.matmul_coop_space(1000, 900, 700, unit)
    assert len(space) >= 6 and all(k["LOAD"] == MATRIX_LOADS[unit.api][0] for k in space)
    # the pipelines and the banded tile order beside the first-measured kernel
    styles = {(k["VEC"], k["PREFETCH"], k["STAGES"], k["EPI"]) for k in space}
    assert styles == set(kernels.matmul_coop.COOP_PIPELINES)
    assert any(k["GROUP"] for k in space) and not any(k["GROUP"] and not k["PREFETCH"]
                                                      for k in space)
    big = kernels.matmul_coop.matmul_coop_space(4096, 4096, 4096, unit, workgroup_bytes=49152)
    assert {(k["BM"], k["BN"]) for k in big} >= {(8 * unit.m, 16 * unit.n),
                                                 (16 * unit.m, 8 * unit.n)}
    for knobs in space:
        gen = generated(graph, knobs, unit=unit)
        assert gen.knobs == knobs
        coop = kernels.matmul_coop
        assert coop._coop_layout(knobs, unit)["bytes"] <= coop.COOP_WORKGROUP_BYTES
    # the request's space comes from the options' unit
    groups = fuse(graph, live_nodes(graph))
    (g,) = [g for g in groups if g.template is not None]
    assert kernels.knob_space("matmul_coop", g.root, g.template, (), accelerated(unit)) == space


# The matrix builtins of both spellings emulated in plain WGSL, for 16 x 16 x 16 matrices
# and subgroups of 32 (NVIDIA's configuration). A fragment is (base, stride, column-major)
# into its staged tile, read when multiplied; lane l of a subgroup holds elements l, l +
# 32, ... of each accumulator (row-major), in private memory, as a real subgroup would.
EMULATION = """
var<private> emu_acc: array<f32, NACC * 8>;
var<private> emu_lane: i32;
fn at(r: i32, c: i32, s: i32, col: i32) -> i32 { return select(r * s + c, c * s + r, col != 0); }
fn emu_zero(id: i32) -> i32 {
  for (var i = 0; i < 8; i++) { emu_acc[id * 8 + i] = 0.0; } return id; }
fn emu_mma(a: vec3<i32>, b: vec3<i32>, id: i32) -> i32 {
  for (var i = 0; i < 8; i++) {
    let e = emu_lane + 32 * i; let r = e / 16; let q = e % 16;
    var s = emu_acc[id * 8 + i];
    for (var k = 0; k < 16; k++) {
      s = fma(f32(tile_a[a.x + at(r, k, a.y, a.z)]), f32(tile_b[b.x + at(k, q, b.y, b.z)]), s); }
    emu_acc[id * 8 + i] = s; }
  return id; }
fn emu_store(id: i32, base: i32, stride: i32, col: i32) {
  for (var i = 0; i < 8; i++) {
    let e = emu_lane + 32 * i;
    tile_c[base + at(e / 16, e % 16, stride, col)] = emu_acc[id * 8 + i]; } }
"""


def emulated(src: str, row_major: bool, accumulators: int) -> str:
    """`src` (either spelling, 16 x 16 x 16 matrices, subgroups of 32) with its matrix
    builtins replaced by EMULATION's; `row_major`: wgpu-native's LOAD order."""
    for line in ("enable wgpu_cooperative_matrix;\n", "enable subgroups;\n",
                 "enable chromium_experimental_subgroup_matrix;\n"):
        src = src.replace(line, "")
    src = src.replace(",\n        @builtin(subgroup_id) sg: u32,\n"
                      "        @builtin(subgroup_invocation_id) lane: u32) {",
                      ") {\n    let sg = li / 32u; let lane = li % 32u;"
                      " emu_lane = i32(lane);")
    col = "0" if row_major else "1"
    src = re.sub(r"coopLoadT?<coop_mat16x16<f16, [AB]>>\(&tile_[ab]\[(.*?)\], (\d+)u\)",
                 rf"vec3<i32>(\1, \2, {col})", src)
    src = re.sub(r"subgroupMatrixLoad<subgroup_matrix_(left|right)<f16, 16, 16>>"
                 r"\(&tile_[ab], u32\((.*?)\), (true|false), (\d+)u\)",
                 lambda g: f"vec3<i32>({g[2]}, {g[4]}, {int(g[3] == 'true')})", src)
    ids = iter(range(accumulators))
    src = re.sub(r"coopLoadT?<coop_mat16x16<f32, C>>\(&tile_c\[cbase\], 16u\)"
                 r"|subgroup_matrix_result<f32, 16, 16>\(\)",
                 lambda _: f"emu_zero({next(ids)})", src)
    src = re.sub(r"coopStoreT?\((acc_\d+_\d+), &tile_c\[(.*?)\], (\d+)u\)",
                 rf"emu_store(\1, \2, \3, {col})", src)
    src = re.sub(r"subgroupMatrixStore\(&tile_c, u32\((.*?)\), (acc_\d+_\d+), false, (\d+)u\)",
                 r"emu_store(\2, \1, \3, 0)", src)
    src = src.replace("coopMultiplyAdd(", "emu_mma(")
    src = src.replace("subgroupMatrixMultiplyAccumulate(", "emu_mma(")
    assert not MATRIX_CALL.search(re.sub(r"//.*", "", src)), src
    head, _, body = src.partition("\n@compute")
    return head + EMULATION.replace("NACC", str(accumulators)) + "\n@compute" + body


SMALL = {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "BK": 32, "PAD": 8}
PIPELINE = {"VEC": 4, "PREFETCH": 1, "STAGES": 2, "GROUP": 2, "EPI": "row"}
EMULATED = [  # (unit, knobs over SMALL, B transposed, A through a prologue)
    (COOP_UNIT, {"LOAD": "col"}, True, False),
    (COOP_UNIT, {"LOAD": "rowT"}, True, False),
    (COOP_UNIT, {"LOAD": "col", **PIPELINE}, False, False),
    (COOP_UNIT, {"LOAD": "row", **PIPELINE, "STAGES": 1}, True, True),
    (SUB16, {"LOAD": "row"}, True, False),
    (SUB16, {"LOAD": "row", **PIPELINE}, True, False),
    (SUB16, {"LOAD": "col", **PIPELINE, "BK": 16}, False, True),
    (SUB16, {"LOAD": "row", "VEC": 4, "PREFETCH": 1}, False, False),
    (SUB16, {"LOAD": "col", "VEC": 4, "STAGES": 2, "EPI": "row"}, True, True),
    (SUB16, {"LOAD": "row", **PIPELINE, "WM": 64, "WN": 64}, False, False),
    (SUB16, {"LOAD": "k", **PIPELINE}, True, False),
    (SUB16, {"LOAD": "mn", "VEC": 4, "PREFETCH": 1, "EPI": "row"}, False, True),
]


@pytest.mark.parametrize("unit,over,transposed,prologue", EMULATED,
                         ids=[f"{u.api}-{i}" for i, (u, *_) in enumerate(EMULATED)])
def test_index_arithmetic_with_emulated_matrix_ops(unit, over, transposed, prologue):
    """The template's staging (scalar or four a load, a vec4 view or a prologue's four
    lanes), K loop (prefetch, two stages), tile order, fragment offsets, accumulator layout
    and epilogue stores for NVIDIA's 16 x 16 x 16 matrices in subgroups of 32, run on the
    software driver with the matrix builtins replaced by plain WGSL: relu(A @ B) at a
    shape with partial tiles on every side (K a multiple of 4 but not of BK), batch 2,
    against numpy on the f16-rounded operands."""
    bsz, m, k, n = 2, 140, 40, 72
    b = GraphBuilder()
    x = b.input((bsz, m, k), "f32", "x")
    w = b.input((bsz, n, k) if transposed else (bsz, k, n), "f32", "w")
    xa = b.ew("abs", x) if prologue else x
    y = b.ew("relu", b.matmul(xa, b.transpose(w, 1, 2) if transposed else w))
    b.graph.outputs.append(y)
    knobs = {**kernels.matmul_coop.matmul_coop_knobs(m, n, unit), **SMALL, **over}
    plan = build_plan(b.graph, "single", {x: "float32", w: "float32", y: "float32"},
                      accelerated(unit, choose=lambda request: knobs))
    (kernel,) = plan.kernels
    assert kernel.key.startswith("matmul_coop") and kernel.knobs == knobs
    if knobs["VEC"] == 4:  # four elements a load: through a view, or a prologue's lanes
        assert ("load_a4(" in kernel.source) == prologue
        assert "in1v4[" in kernel.source
    row_major = kernels.matmul_coop.TILE_ORDERS[knobs["LOAD"]][0]  # (wgpu-native: both)
    accs = (knobs["WM"] // 16) * (knobs["WN"] // 16)
    kernel.source = emulated(kernel.source, row_major, accs)
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((bsz, m, k)).astype(np.float32)
    ws = rng.standard_normal(tuple(w.shape)).astype(np.float32)
    (got,) = runtime.Executable(plan, runtime.default_device("wgpu")).run([xs, ws])
    r16 = [a.astype(np.float16).astype(np.float64) for a in (xs, ws)]
    left = np.abs(r16[0]) if prologue else r16[0]
    want = np.maximum(left @ (r16[1].transpose(0, 2, 1) if transposed else r16[1]), 0)
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
    if compiler.accelerated_unavailable(runtime.default_device()) is None:
        candidate = make(torch.nn.Linear(20, 24), [torch.randn(18, 20)])
        assert candidate.precision == "accelerated-f16"
        return
    with pytest.warns(UserWarning, match="accelerated precision"):
        candidate = make(torch.nn.Linear(20, 24), [torch.randn(18, 20)])
    assert candidate.precision == "strict"


# -- on a device with a matrix unit ---------------------------------------------------
@pytest.fixture(scope="module")
def matrix_device():
    """A device whose matrix unit passes the accelerated probe (Dawn's subgroup
    matrices here), else the test skips with each runtime's reason."""
    reasons = []
    for name in ("dawn", "wgpu"):
        try:
            dev = runtime.default_device(name)
        except runtimes.RuntimeUnavailable as exc:
            reasons.append(f"{name}: {exc}")
            continue
        why = compiler.accelerated_unavailable(dev)
        if why is None:
            return dev
        reasons.append(f"{name}: {why}")
    pytest.skip("no device with subgroup or cooperative matrices: " + "; ".join(reasons))


def run_accelerated(dev, model, inputs, choose=None):
    """`model` compiled accelerated on `dev`, labelled so, with its matmuls on the
    matrix units, checked against PyTorch at the fp16 tolerance."""
    cm = kernelwright.compile(model, inputs, device=dev, precision="accelerated",
                              choose=choose)
    assert cm.precision == "accelerated-f16"
    names = [k.key.split()[0] for k in cm.plan.kernels]
    assert "matmul_coop" in names, names
    atol, rtol = Tolerance(accelerated=True).for_dtype(torch.float32)
    torch.testing.assert_close(cm(*inputs), model(*inputs), atol=atol, rtol=rtol)
    return cm


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


# (16, 8, 8): whole 8 x 8 matrices on Mesa's unit; 8 rows or fewer take the gemv in either
# precision (kernels/gemv.takes_gemv: a product of few rows is bound by B's bytes)
@pytest.mark.parametrize("m,k,n", [(64, 64, 64), (37, 45, 50), (130, 70, 99), (16, 8, 8),
                                   (200, 24, 136)])
def test_matmul_on_the_device(matrix_device, m, k, n):
    torch.manual_seed(m + k + n)
    run_accelerated(matrix_device, Fn(torch.mm), [torch.randn(m, k), torch.randn(k, n)])


DEVICE_KNOBS = [  # in the matrix's sides s; "LOAD" None: the spelling's second order
    {"LOAD": None}, {"BM": 8, "BN": 4, "WM": 4, "WN": 2, "BK": 64},
    {"VEC": 4}, {"PREFETCH": 1}, {"STAGES": 2}, {"VEC": 4, "PREFETCH": 1, "STAGES": 2},
    {"VEC": 4, "PREFETCH": 1, "STAGES": 2, "EPI": "row", "GROUP": 2, "LOAD": None},
    {"BM": 4, "BN": 4, "WM": 2, "WN": 2, "VEC": 4, "PREFETCH": 1, "EPI": "row", "GROUP": 2},
    {"BM": 8, "BN": 16, "WM": 4, "WN": 4, "BK": 16, "VEC": 4, "PREFETCH": 1, "STAGES": 2,
     "EPI": "row"}, {"LOAD": "k", "VEC": 4, "PREFETCH": 1, "STAGES": 2},
    {"LOAD": "mn", "VEC": 4, "PREFETCH": 1}]


@pytest.mark.parametrize("over", DEVICE_KNOBS, ids=str)
@pytest.mark.parametrize("transposed", [True, False], ids=["a@b.T", "a@b"])
def test_matmul_with_other_knobs_on_the_device(matrix_device, over, transposed):
    """Other load orders, tiles (larger than the product too), wide loads, prefetching,
    two stages, the banded tile order and the row epilogue, forced through the chooser:
    the same product, with partial tiles on every side."""
    unit = compiler.device_matrix(matrix_device)
    s = unit.m
    knobs = {k: v * s if k in ("BM", "BN", "WM", "WN") else v for k, v in over.items()}
    if knobs.get("LOAD", "") is None:
        knobs["LOAD"] = MATRIX_LOADS[unit.api][1]
    if knobs.get("LOAD", MATRIX_LOADS[unit.api][0]) not in MATRIX_LOADS[unit.api]:
        pytest.skip(f"LOAD {knobs['LOAD']} is not one of {unit.api}'s")
    seen = []

    def choose(request):
        if request.kind != "matmul_coop":
            return None
        seen.append({**request.default.knobs, **knobs})
        return seen[-1]

    torch.manual_seed(1)
    if transposed:
        fn, inputs = Fn(lambda a, b: a @ b.T), [torch.randn(45, 72), torch.randn(52, 72)]
    else:
        fn, inputs = Fn(torch.mm), [torch.randn(70, 36), torch.randn(36, 60)]
    cm = run_accelerated(matrix_device, fn, inputs, choose)
    assert [k.knobs for k in cm.plan.kernels if k.key.startswith("matmul_coop")] == seen


def test_linear_with_bias_and_activation_on_the_device(matrix_device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(50, 72), torch.nn.GELU(),
                                torch.nn.Linear(72, 33), torch.nn.ReLU()).eval()
    cm = run_accelerated(matrix_device, model, [torch.randn(3, 13, 50)])
    assert sum(k.key.startswith("matmul_coop") for k in cm.plan.kernels) == 2


def test_batched_matmul_on_the_device(matrix_device):
    torch.manual_seed(0)
    run_accelerated(matrix_device, Fn(torch.bmm), [torch.randn(3, 33, 20), torch.randn(3, 20, 41)])


def test_conv2d_on_the_device(matrix_device):
    """A convolution's implicit GEMM (the windows read by the B loader) on the units."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU()).eval()
    run_accelerated(matrix_device, model, [torch.randn(2, 8, 10, 10)])


def test_decomposed_attention_on_the_device(matrix_device, monkeypatch):
    """Attention decomposed into matmuls (forced: scores, then weights @ V) puts both
    products on the units (the fused one: tests/test_accelerated_attention.py)."""
    monkeypatch.setattr(attention_ops, "FUSED", False)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 24, 16) for _ in range(3))
    cm = run_accelerated(matrix_device, Fn(torch.nn.functional.scaled_dot_product_attention),
                         [q, k, v])
    assert sum(k.key.startswith("matmul_coop") for k in cm.plan.kernels) == 2
