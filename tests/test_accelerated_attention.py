"""Attention in the accelerated precision mode: the fused kernel on subgroup matrices
(kernels/attention_coop.py; Q K^T and P V on the matrix units, f16 operands, f32
accumulation and softmax). Everywhere: the one choice of the kernel
(kernels.attention_template, asked by the lowering and kernels.template_kind), the
generated WGSL for 8 x 8 x 8 and 16 x 16 x 16 matrices, the knobs and their space. On a
device with subgroup matrices (Dawn on Mesa 26.1's software driver: python-dawn -m
pytest --runtime dawn) SDPA in its forms and a transformers-style attention module run
against PyTorch at the fp16 tolerance; elsewhere those tests skip with the reason."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn
from torch import nn

import kernelwright
from kernelwright import compiler, kernels
from kernelwright.check.tolerance import Tolerance
from kernelwright.ir.ir import CompileError, GraphBuilder
from kernelwright.kernels.attention_coop import (
    attention_coop_knobs,
    attention_coop_layout,
    attention_coop_space,
)
from kernelwright.kernels.matmul_coop import COOP_UNIT
from kernelwright.lower import attention as attention_ops
from kernelwright.options import CompileOptions, MatrixUnit
from kernelwright.runtime import runtime, runtimes
from kernelwright.schedule.schedule import fuse, live_nodes

SUB8 = MatrixUnit("subgroup-matrix", 8, 8, 8, 8)  # Mesa 26.1's software driver, via Dawn
SUB16 = MatrixUnit("subgroup-matrix", 16, 16, 16, 32)  # NVIDIA's, via Dawn
MMA = "subgroupMatrixMultiplyAccumulate("


def accelerated(unit):
    return CompileOptions("accelerated", matrix=unit)


def attention_graph(bh=3, lq=37, s=45, e=40, ev=40, masked=False, causal=False):
    b = GraphBuilder()
    q, k, v = b.input((bh, lq, e), "f32", "q"), b.input((bh, s, e), "f32", "k"), \
        b.input((bh, s, ev), "f32", "v")
    mask = b.expand(b.input((1, lq, s), "f32", "mask"), (bh, lq, s)) if masked else None
    b.graph.outputs.append(b.attention(q, k, v, mask, causal, 0.125))
    return b.graph


def generated(graph, options, knobs=None):
    groups = fuse(graph, live_nodes(graph))
    materialized = {g.root for g in groups}
    (g,) = [g for g in groups if g.template is not None]
    return kernels.fill_kernel(g.root, g.template, materialized, lambda v: id(v), knobs,
                               options=options)


# -- the choice -----------------------------------------------------------------------
def test_the_kernel_is_chosen_by_precision_and_matrix_unit():
    for unit in (SUB8, SUB16):
        assert kernels.attention_template(accelerated(unit), 37, 64, 64) == "attention_coop"
        assert kernels.attention_template(accelerated(unit), 37, 40, 80) == "attention_coop"
    assert kernels.attention_template(CompileOptions(), 37, 64, 64) == "attention"
    assert kernels.attention_template(None, 37, 64, 64) == "attention"
    # wgpu-native's cooperative matrices: the strict kernel (subgroup matrices only)
    assert kernels.attention_template(accelerated(COOP_UNIT), 37, 64, 64) == "attention"
    # too wide for the accelerated tiles: the strict kernel; for both: decomposed
    assert attention_coop_knobs(512, 512, SUB16) is None
    assert kernels.attention_template(accelerated(SUB16), 37, 512, 512) is None
    assert kernels.attention_template(accelerated(SUB16), 37, 4100, 64) is None
    # few queries (a decoding step): the decode kernel in either precision
    for options in (accelerated(SUB8), CompileOptions(), None):
        assert kernels.attention_template(options, 8, 64, 64) == "attention_decode"
    node = attention_graph().nodes[-1]
    assert kernels.template_kind(node, accelerated(SUB8)) == "attention_coop"
    assert kernels.template_kind(attention_graph(lq=3).nodes[-1],
                                 accelerated(SUB8)) == "attention_decode"
    assert kernels.template_kind(node, CompileOptions()) == "attention"
    assert kernels.template_kind(node, accelerated(COOP_UNIT)) == "attention"


def test_the_lowering_fuses_whenever_the_accelerated_kernel_fits(monkeypatch):
    monkeypatch.setattr(attention_ops, "FUSED", None)
    assert attention_ops.fused(1, 37, 6, 40, 40, accelerated(SUB8))
    assert not attention_ops.fused(1, 37, 6, 40, 40, CompileOptions())  # small scores
    assert not attention_ops.fused(1, 37, 6, 40, 40, accelerated(COOP_UNIT))
    assert not attention_ops.fused(1, 37, 6, 4100, 40, accelerated(SUB8))
    assert attention_ops.fused(1, 5, 6, 40, 40, CompileOptions())  # few queries: decode
    monkeypatch.setattr(attention_ops, "FUSED", False)  # forced: the decomposition
    assert not attention_ops.fused(1, 37, 6, 40, 40, accelerated(SUB8))


# -- the generated WGSL ---------------------------------------------------------------
def assert_uniform_matrix_calls(src):
    """Matrix operations stay in uniform control flow: never on a line with a branch,
    never inside a loop over invocations (`for (var x = t; ...`, `for (var r = t; ...`)."""
    inside = None  # the indentation of the invocations' loop we are in
    for line in src.splitlines():
        indent = len(line) - len(line.lstrip())
        if inside is not None and indent == inside and line.strip() == "}":
            inside = None
        elif re.match(r"\s*for \(var [xr] = t;", line):
            inside = indent
        if re.search(r"subgroupMatrix\w+\(|subgroupMatrixLoad<", line):
            assert "if (" not in line and inside is None, line


@pytest.mark.parametrize("unit", [SUB8, SUB16], ids=str)
@pytest.mark.parametrize("form", [dict(), dict(causal=True), dict(masked=True),
                                  dict(e=64, ev=80, lq=70, s=20)])
def test_wgsl_structure(unit, form):
    graph = attention_graph(**form)
    gen = generated(graph, accelerated(unit))
    src, knobs = gen.source, gen.knobs
    e, ev, lq = form.get("e", 40), form.get("ev", 40), form.get("lq", 37)
    assert gen.name == "attention_coop" and gen.key.template == "attention_coop"
    assert knobs == attention_coop_knobs(e, ev, unit)
    lay = attention_coop_layout(e, ev, knobs, unit)
    s = unit.m
    ti, te, tc, td = knobs["WQ"] // s, -(-e // s), knobs["BK"] // s, -(-ev // s)
    assert ("enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;\n"
            in src)
    assert f"@workgroup_size({knobs['NSG'] * unit.subgroup})" in src
    assert src.count(MMA) == ti * te * tc + ti * td  # scores, then P V per depth step
    left = f"subgroupMatrixLoad<subgroup_matrix_left<f16, {s}, {s}>>(&h_tile"
    right = f"subgroupMatrixLoad<subgroup_matrix_right<f16, {s}, {s}>>(&kv_tile"
    assert src.count(left) == ti * te + ti  # the query fragments, P's
    assert src.count(right) == te * tc + td  # K^T (column-major), V's
    assert src.count(f"), true, {lay['KS']}u)") == te * tc  # only K is read transposed
    assert src.count("subgroupMatrixStore(&f_tile") == ti * tc + 2 * ti * td
    assert src.count(f"subgroupMatrixLoad<subgroup_matrix_result<f32, {s}, {s}>>") == ti * td
    assert f"array<f16, {lay['H_WORDS']}>" in src and f"array<f32, {lay['F_WORDS']}>" in src
    assert gen.workgroup_bytes == lay["workgroup_bytes"] <= 32768
    code = re.sub(r"//.*", "", src)
    assert ("load_mask(b, i, j)" in code) == form.get("masked", False)
    assert ("&& j <= i" in code) == form.get("causal", False)
    assert f"min(45, q0 + {lay['BQ']})" in src if form.get("causal") else "let kend = " in src
    assert src.count("epilogue(acc, gi)") == 1 and "coop" not in code
    assert gen.grid[0] * gen.grid[1] >= 3 * -(-lq // lay["BQ"])
    assert_uniform_matrix_calls(src)


@pytest.mark.parametrize("bad", [{"WQ": 12}, {"BK": 12}, {"NSG": 64}, {"NSG": 0},
                                 {"NSG": 4, "WQ": 64, "BK": 64}])
def test_bad_knobs_are_compile_errors(bad):
    with pytest.raises(CompileError):
        generated(attention_graph(), accelerated(SUB8), bad)


@pytest.mark.parametrize("unit", [SUB8, SUB16], ids=str)
def test_knob_space_is_valid(unit):
    space = attention_coop_space(64, 64, unit)
    assert len(space) >= 4 and attention_coop_knobs(64, 64, unit) in space
    assert {k["WQ"] for k in space} == {unit.m, 2 * unit.m}
    graph = attention_graph(e=64, ev=64)
    for knobs in space:
        assert generated(graph, accelerated(unit), knobs).knobs == knobs
    assert kernels.knob_space("attention_coop", graph.outputs[0], graph.nodes[-1], (),
                              accelerated(unit)) == space


# -- on a device with subgroup matrices -----------------------------------------------
@pytest.fixture(scope="module")
def matrix_device():
    """A device whose subgroup matrices pass the accelerated probe (Dawn here), else the
    test skips with the reason."""
    try:
        dev = runtime.default_device("dawn")
    except runtimes.RuntimeUnavailable as exc:
        pytest.skip(f"no device with subgroup matrices: dawn: {exc}")
    why = compiler.accelerated_unavailable(dev)
    if why is not None:
        pytest.skip(f"no device with subgroup matrices: dawn: {why}")
    if compiler.device_matrix(dev).api != "subgroup-matrix":
        pytest.skip(f"{dev.description} has no subgroup matrices")
    return dev


def run_accelerated(dev, model, inputs, choose=None, fused=1):
    """`model` compiled accelerated on `dev` with `fused` attention_coop kernels, checked
    against PyTorch at the fp16 tolerance on poisoned buffers."""
    cm = kernelwright.compile(model.eval(), inputs, device=dev, precision="accelerated",
                              choose=choose)
    assert cm.precision == "accelerated-f16"
    names = [k.key.split()[0] for k in cm.plan.kernels]
    assert names.count("attention_coop") == fused and "attention" not in names, names
    atol, rtol = Tolerance(accelerated=True).for_dtype(torch.float32)
    with torch.no_grad():
        expected = model(*inputs)
    torch.testing.assert_close(cm(*inputs, poison=True), expected, atol=atol, rtol=rtol)
    return cm


def qkv(b, h, lq, s, e, ev=None):
    return [torch.randn(b, h, lq, e), torch.randn(b, h, s, e), torch.randn(b, h, s, ev or e)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 2, 64, 64, 64), (2, 2, 37, 37, 40), (1, 2, 45, 45, 80)],
                         ids=["e64", "e40_partial", "e80_partial"])
def test_sdpa_on_the_device(matrix_device, causal, shape):
    torch.manual_seed(sum(shape))
    run_accelerated(matrix_device,
                    Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
                    qkv(*shape))


def test_cross_attention_with_an_additive_mask_on_the_device(matrix_device):
    """Lq != Lk, V's head dim other than Q's, a [Lq, Lk] additive mask with whole rows
    at -inf (zeros out, as PyTorch) and a custom scale."""
    torch.manual_seed(0)
    q, k, v = qkv(2, 2, 21, 50, 40, 24)
    mask = torch.randn(21, 50)
    mask[3] = float("-inf")
    mask[:, 7] = float("-inf")
    run_accelerated(matrix_device,
                    Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, scale=0.3)),
                    [q, k, v, mask])


def test_causal_cross_attention_on_the_device(matrix_device):
    torch.manual_seed(1)
    run_accelerated(matrix_device,
                    Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
                    qkv(1, 2, 40, 19, 64))


class SelfAttention(nn.Module):
    """Attention as transformers' encoders write it: q, k, v projections, heads split by
    view and transpose, an additive padding mask [B, 1, 1, S] built from the attention
    mask, SDPA, heads merged, the output projection."""

    def __init__(self, hidden=80, heads=2):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(hidden, hidden)
                                                              for _ in range(4))

    def forward(self, x, attention_mask):
        b, s, _ = x.shape

        def split(t):
            return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

        mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        out = F.scaled_dot_product_attention(split(self.q_proj(x)), split(self.k_proj(x)),
                                             split(self.v_proj(x)), attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


def test_transformers_style_attention_on_the_device(matrix_device):
    torch.manual_seed(0)
    x = torch.randn(2, 27, 80)
    attention_mask = torch.ones(2, 27, dtype=torch.long)
    attention_mask[1, 20:] = 0  # the second sequence padded
    cm = run_accelerated(matrix_device, SelfAttention(), [x, attention_mask])
    assert sum(k.key.startswith("matmul_coop") for k in cm.plan.kernels) >= 2


def test_other_settings_on_the_device(matrix_device):
    """Two matrices of query rows per subgroup, and one subgroup with 16-key blocks,
    forced through the chooser: the same attention."""
    unit = compiler.device_matrix(matrix_device)
    torch.manual_seed(2)
    inputs = qkv(1, 2, 50, 70, 24)
    for knobs in ({"NSG": 2, "WQ": 2 * unit.m, "BK": 32}, {"NSG": 1, "WQ": unit.m, "BK": 16}):
        cm = run_accelerated(
            matrix_device,
            Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
            inputs, choose=lambda r, k=knobs: k if r.kind == "attention_coop" else None)
        assert [k.knobs for k in cm.plan.kernels] == [knobs]
