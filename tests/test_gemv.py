"""The matrix-vector template (kernels/gemv.py): products of few rows per batch entry,
against PyTorch, and the rule that gives it those products and no split-K."""

from __future__ import annotations

import pytest
import torch
from conftest import Fn, check
from test_half import check_half

from kernelwright.ir.ir import GraphBuilder
from kernelwright.kernels import cuts, gemv, template_kind
from kernelwright.options import CompileOptions, Waves
from kernelwright.schedule.schedule import fuse, live_nodes

H100 = Waves(264, 132)  # decode_plan's waves: 132 SMs


def gemv_kernels(compiled) -> list:
    """The plan's kernels of the gemv template (its knobs are CT and KS)."""
    return [k for k in compiled.plan.kernels if "CT" in k.knobs]


def one_gemv(compiled) -> None:
    """The plan is one kernel, a gemv: prologues, epilogues and K in it."""
    assert len(compiled.plan.kernels) == 1 and gemv_kernels(compiled), compiled.plan.summary()


@pytest.mark.parametrize("m,k,n", [(1, 37, 50), (2, 130, 67), (5, 70, 33), (1, 96, 200),
                                   (5, 3000, 9)])
def test_matches_torch_for_few_rows(m, k, n):
    """M 1, 2, 5; N and K multiples of 4 or not (scalar and 16-byte fragments of B, K
    tails), K longer than one staged chunk of A (5 x 3000: chunks of 408)."""
    a, b = torch.rand(m, k) - 0.5, torch.rand(k, n) - 0.5
    one_gemv(check(Fn(torch.matmul), a, b, atol=2e-4))


@pytest.mark.parametrize("xs,ys", [((3, 2, 45), (3, 45, 70)), ((2, 1, 5, 36), (3, 36, 20)),
                                   ((4, 1, 64), (64, 30))])
def test_batch_dims_broadcast(xs, ys):
    """Batched operands, a broadcast batch on either side, a matrix shared by a batch
    of single rows (folded into 4 rows by lower/linalg.product)."""
    a, b = torch.rand(*xs) - 0.5, torch.rand(*ys) - 0.5
    one_gemv(check(Fn(torch.matmul), a, b, atol=2e-4))


def test_bias_and_residual_epilogues():
    """A linear's bias and a residual add are the gemv's epilogue: one kernel."""
    lin = torch.nn.Linear(75, 42)
    one_gemv(check(Fn(lambda x, r: lin(x) + r), torch.randn(2, 75), torch.randn(2, 42)))


def test_a_scaled_by_a_vector_is_the_loader_prologue():
    """RMSNorm's scaling of A (by its statistic per row and a weight along K) is
    computed in A's loader as A is staged: one kernel, whatever stores the statistic."""
    w, g = torch.randn(64, 48), torch.randn(64)

    def scaled(x, r):
        return (x * r * g) @ w

    one_gemv(check(Fn(scaled), torch.randn(3, 64), torch.rand(3, 1) + 0.5, atol=2e-4))


@pytest.mark.parametrize("k", [64, 45])
def test_b_transposed_is_read_along_k(k):
    """B read through a transpose (a [N, K] input: contiguous along K, layout K; a vec4
    view where K is a multiple of 4, else scalar lanes), and through a computed view
    (relu: the loader's four lanes)."""
    a, w = torch.rand(2, k) - 0.5, torch.rand(70, k) - 0.5
    one_gemv(check(Fn(lambda a, w: a @ w.t()), a, w, atol=2e-4))
    one_gemv(check(Fn(lambda a, w: a @ torch.relu(w.t() - 0.1)), a, w, atol=2e-4))


def test_integer_products_are_exact():
    """An integer product (int64 held as int32) is summed in f32 and rounded back."""
    a, b = torch.randint(-50, 50, (2, 37)), torch.randint(-50, 50, (37, 21))
    one_gemv(check(Fn(torch.matmul), a, b))
    one_gemv(check(Fn(lambda a, b: a @ b.t()), a, b.t().contiguous()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_weights_and_activations(dtype):
    """A and B stored as packed halves: read through their loaders, widened to f32."""
    lin = torch.nn.Linear(72, 40).to(dtype)
    compiled = check_half(lin, torch.randn(1, 72, dtype=dtype))
    assert gemv_kernels(compiled), compiled.plan.summary()


def test_every_setting_of_the_space_computes_the_product():
    """The tuner's settings (gemv_space), each generated and run: layout N and K."""
    a, b = torch.rand(3, 52) - 0.5, torch.rand(52, 44) - 0.5
    builder = GraphBuilder()
    x, y = builder.input((3, 52), "f32", "x"), builder.input((52, 44), "f32", "y")
    node = builder.matmul(x, y).node.inputs[0].node
    space = gemv.gemv_space(node.out, node, CompileOptions())
    assert {"CT": 1, "KS": 8} in space and {"CT": 16, "KS": 16} in space
    for knobs in space[::3]:
        for fn in (torch.matmul, lambda a, b: a @ b.t().contiguous().t()):
            got = check(Fn(fn), a, b, atol=2e-4,
                        choose=lambda r, kn=knobs: kn if r.kind == "gemv" else None)
            assert gemv_kernels(got)[0].knobs == knobs


def test_the_rule_gives_few_rows_the_gemv_and_no_split_k():
    """Up to GEMV_MAX_M rows per batch entry (not a convolution's windows): the gemv,
    K in one piece (a decoding step's products: 90 reduce kernels of the full SmolLM2
    decode plan gone); from 9 rows the matmul and its split-K as before."""
    assert gemv.takes_gemv(1) and gemv.takes_gemv(gemv.GEMV_MAX_M)
    assert not gemv.takes_gemv(gemv.GEMV_MAX_M + 1) and not gemv.takes_gemv(1, window=True)
    for m, k, n in [(1, 576, 960), (1, 1536, 576), (1, 576, 3072), (1, 576, 49152),
                    (8, 4096, 64)]:
        assert cuts.product_plan((m, k), (k, n), waves=H100).chunks == 1
    assert cuts.product_plan((16, 1536), (1536, 576), waves=H100).chunks > 1
    # a long K over few columns: too few workgroups, too long a loop: chunks
    assert cuts.product_plan((1, 1 << 20), (1 << 20, 4), waves=H100).chunks > 1
    for m, kind in [(1, "gemv"), (8, "gemv"), (9, "matmul")]:
        builder = GraphBuilder()
        out = builder.matmul(builder.input((m, 32), "f32", "x"),
                             builder.input((32, 16), "f32", "y"))
        assert template_kind(out.node.inputs[0].node) == kind


def test_knobs_cover_the_device_by_the_waves():
    """The columns per workgroup fall until the grid makes GEMV_WAVES workgroups per
    slot: the LM head keeps 64 (768 workgroups), a 960-column projection takes 8 (120:
    the fewest), each invocation's loop a few quads of K."""
    assert gemv.gemv_knobs(49152, 576, 1, "N", H100) == {"CT": 16, "KS": 16}
    assert gemv.gemv_knobs(960, 576, 1, "N", H100) == {"CT": 2, "KS": 128}
    assert gemv.gemv_knobs(3072, 576, 1, "N", H100) == {"CT": 2, "KS": 128}
    # attention's scores at decode: 3 KV heads of 3 queries over 544 cached keys
    assert gemv.gemv_knobs(544, 64, 3, "K", H100) == {"CT": 4, "KS": 16}


class SwiGLU(torch.nn.Module):
    """A gated MLP as decoders have it: down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(hidden, inner, bias=False)
        self.up = torch.nn.Linear(hidden, inner, bias=False)
        self.down = torch.nn.Linear(inner, hidden, bias=False)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


@pytest.mark.parametrize("m,kernels", [(1, 2), (4, 2), (64, 3)])
def test_swiglu_is_the_down_projections_prologue_at_few_rows(m, kernels):
    """At few rows silu(gate) * up is computed in the down projection's gemv loader
    (256 columns: 32 workgroups, each 128 sigmoids, a few thousand over a stored
    SwiGLU's launch): gate/up merged, then down, two kernels. At 64 rows the matmul
    would compute each sigmoid once per 64-column tile: the SwiGLU keeps its kernel."""
    mlp = SwiGLU(256, 128)
    compiled = check(mlp, torch.randn(m, 256), atol=2e-4)
    assert len(compiled.plan.kernels) == kernels, compiled.plan.summary()
    assert len(gemv_kernels(compiled)) == (kernels if m <= gemv.GEMV_MAX_M else 0)


@pytest.mark.parametrize("n,stored", [(256, False), (4096, True)])
def test_a_gemv_prologue_is_stored_when_its_recomputation_outweighs_a_launch(n, stored):
    """sigmoid(x) of one row of 8192 in a gemv's loader: over 256 columns (32
    workgroups) 254 Ki extra sigmoids, inline; over 4096 (512 workgroups) 4 Mi, more
    than GEMV_RECOMPUTE_MAX: a kernel of its own."""
    builder = GraphBuilder()
    x, w = builder.input((1, 8192), "f32", "x"), builder.input((8192, n), "f32", "w")
    a = builder.ew("sigmoid", x)
    builder.graph.outputs.append(builder.matmul(a, w))
    groups = fuse(builder.graph, live_nodes(builder.graph))
    assert (a in {g.root for g in groups}) == stored


def _norm_linear(norm: str, k: int, n: int) -> torch.nn.Module:
    """An RMSNorm or LayerNorm over K (weights away from one) before a linear."""
    layer = torch.nn.RMSNorm(k) if norm == "rms" else torch.nn.LayerNorm(k)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
    return torch.nn.Sequential(layer, torch.nn.Linear(k, n))


@pytest.mark.parametrize("norm", ["rms", "layer"])
@pytest.mark.parametrize("m,k", [(1, 96), (4, 45), (8, 2100)])
def test_row_statistics_of_a_are_computed_in_the_gemv(norm, m, k):
    """A norm before a product of few rows: each gemv workgroup computes its rows'
    statistics (the mean and variance, or the mean square) before staging the normalized
    A: one kernel, not a row kernel and the gemv. K a multiple of 4 or not (16-byte or
    scalar reads of the row), longer than one staged chunk."""
    compiled = check(_norm_linear(norm, k, 70), torch.randn(m, k), atol=2e-4)
    one_gemv(compiled)
    assert "reduce" in compiled.plan.kernels[0].name


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_row_statistics_of_many_rows_keep_their_kernel(norm):
    """At 64 rows the product is the matmul's: the statistics keep their kernels (the
    mean square; the mean and the variance), the matmul's loader reading them."""
    compiled = check(_norm_linear(norm, 48, 70), torch.randn(64, 48), atol=2e-4)
    names = [k.name for k in compiled.plan.kernels]
    assert not gemv_kernels(compiled) and len(names) == (2 if norm == "rms" else 3), names
    assert "reduce" not in names[-1] and all("reduce" in n for n in names[:-1]), names


def test_row_statistics_past_gemv_row_max_keep_their_kernel(monkeypatch):
    """Rows longer than GEMV_ROW_MAX keep the statistic's row kernel."""
    from kernelwright.schedule import schedule

    monkeypatch.setattr(schedule, "GEMV_ROW_MAX", 32)
    compiled = check(_norm_linear("rms", 48, 20), torch.randn(1, 48), atol=2e-4)
    assert len(compiled.plan.kernels) == 2, compiled.plan.summary()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_row_statistics_over_half_rows(dtype):
    """Half activations and weights: the gemv's statistics read the packed row (the
    product's half output is then narrowed by a copy, as any gemv's)."""
    compiled = check_half(_norm_linear("rms", 64, 40).to(dtype), torch.randn(2, 64, dtype=dtype))
    names = [k.name for k in compiled.plan.kernels]
    (product,) = gemv_kernels(compiled)
    assert "reduce" in product.name and sum("reduce" in n for n in names) == 1, names


@pytest.mark.parametrize("m", [1, 4])
def test_a_decoder_mlp_at_few_rows_is_two_kernels(m):
    """RMSNorm, the merged gate/up product, SwiGLU, the down product and the residual at
    1 and 4 rows: the norm's statistic in the gate/up gemv, the SwiGLU in the down
    gemv's loader, the residual its epilogue: two kernels (four before)."""
    norm, mlp = torch.nn.RMSNorm(256), SwiGLU(256, 128)
    block = Fn(lambda x: x + mlp(norm(x)))
    compiled = check(block, torch.randn(m, 256), atol=2e-4)
    assert len(compiled.plan.kernels) == 2 == len(gemv_kernels(compiled)), \
        compiled.plan.summary()
