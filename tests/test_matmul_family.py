"""The matmul family beyond plain mm/bmm: tensors times matrices, vectors, scalars,
diagonal and triangular operands, irregular shapes, very deep and very shallow K
(split-K and the elementwise path), and einsum in the forms models use."""

import re

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check

from kernelwright.kernels import cuts
from kernelwright.kernels import matmul as matmul_kernels
from kernelwright.lower.linalg import SMALL_K, product_plan


def _templates(compiled):
    return [k.name for k in compiled.plan.kernels]


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(2, 5, 7), (2, 3, 5, 7), (1, 4, 1, 7)])
def test_tensor_times_matrix(shape):
    x, w = torch.randn(*shape), torch.randn(7, 6)
    check(Fn(lambda x, w: (x @ w, torch.matmul(x, w) + 1.0)), x, w)


@pytest.mark.slow
def test_a_shared_weight_folds_the_batch_into_rows():
    """A weight shared by every batch entry (ATen's bmm of an expanded linear weight, as
    in nn.MultiheadAttention's input projection, or a size-1 batch) multiplies a
    transposed batched input as one matmul over all its rows: one M x N grid, no batch
    dim of the grid."""
    x, w, bias = torch.randn(6, 9, 20), torch.randn(20, 12), torch.randn(12)
    for fn in (lambda x, w, bias: torch.bmm(x.transpose(0, 1), w.expand(9, 20, 12)) + bias,
               lambda x, w, bias: x.transpose(0, 1) @ w[None] + bias):
        compiled = check(Fn(fn), x, w, bias)
        (matmul,) = [k for k in compiled.plan.kernels if "matmul" in k.name]
        assert matmul.grid[2] == 1, compiled.plan.summary()
    check(torch.nn.MultiheadAttention(20, 4), x, x, x)  # sequence first: [L, B, E]
    a, b = torch.randn(3, 2, 4, 5), torch.randn(1, 1, 5, 6)  # batch dims of size 1 on y
    check(Fn(torch.matmul), a, b)


# an invocation's fetch of four consecutive k (A) or n (B) in one loader call, at its
# row r.. and K offset q.. in the tile (kernels.matmul._matmul_tile_code)
A_ALONG_K = r"load_a4\(b, m0 \+ ra\d+, kb \+ qa\d+ \+ 0\)"
B_ALONG_N = r"load_b4\(b, kb \+ qb\d+, n0 \+ rb\d+ \* 4 \+ 0\)"


def test_operands_with_prologues_are_staged_along_their_data():
    """A loader with an elementwise prologue is staged along the contiguous dim of the
    largest buffer it reads: tril(A) along A's K (it was staged along M, each
    invocation's loads 16 KB apart at K = 4096), and a per-channel scale times the
    input along the input's positions, not along the scale's channels."""
    a, b = torch.randn(40, 48), torch.randn(48, 36)
    compiled = check(Fn(lambda a, b: torch.tril(a) @ torch.triu(b)), a, b)
    (src,) = [k.source for k in compiled.plan.kernels if "matmul" in k.name]
    assert re.search(A_ALONG_K, src)  # consecutive k per invocation
    assert re.search(B_ALONG_N, src)  # consecutive n
    conv = torch.nn.Conv2d(16, 32, 1)
    scale = torch.randn(16, 1, 1)
    compiled = check(Fn(lambda x: conv(torch.relu(scale * x))), torch.randn(2, 16, 6, 8))
    (src,) = [k.source for k in compiled.plan.kernels if "matmul" in k.name]
    assert re.search(B_ALONG_N, src), src  # along the positions
    # through a cat (the unrolled RNNs' outputs, Swin's shifted windows): the piece
    # holding the element answers; rows one per piece are not a contiguous dim
    rows = [torch.randn(1, 48) for _ in range(3)] + [torch.randn(37, 48)]
    compiled = check(Fn(lambda a, b, c, d, w: torch.relu(torch.cat([a, b, c, d])) @ w),
                     *rows, torch.randn(48, 36))
    (src,) = [k.source for k in compiled.plan.kernels if "matmul" in k.name]
    assert re.search(A_ALONG_K, src), src


def test_batched_broadcast_both_sides():
    a, b = torch.randn(3, 1, 4, 5), torch.randn(2, 5, 6)
    check(Fn(torch.matmul), a, b)


def test_matrix_vector_forms():
    m, v, u = torch.randn(6, 9), torch.randn(9), torch.randn(6)
    x3 = torch.randn(2, 6, 9)
    check(Fn(lambda m, v, u, x3: (torch.mv(m, v), m @ v, u @ m, x3 @ v, torch.dot(v, v),
                                  u @ x3)), m, v, u, x3)


def test_addmm_addmv_baddbmm_alpha_beta():
    bias, a, b = torch.randn(4, 6), torch.randn(4, 5), torch.randn(5, 6)
    v, bb = torch.randn(5), torch.randn(4)
    x, y, z = torch.randn(2, 4, 5), torch.randn(2, 5, 6), torch.randn(2, 4, 6)
    check(Fn(lambda bias, a, b, v, bb, x, y, z: (
        torch.addmm(bias, a, b, beta=0.5, alpha=2.0), torch.addmm(bias, a, b, beta=0),
        torch.addmv(bb, a, v, alpha=-1.5), torch.baddbmm(z, x, y, beta=2.0, alpha=0.25))),
        bias, a, b, v, bb, x, y, z)


def test_matrix_times_scalar():
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    s = torch.tensor(1.5)
    check(Fn(lambda a, b, s: (a * 2.5, a * s, (a @ b) * -0.5, torch.mul(a, 3))), a, b, s)


def test_diag_times_matrix():
    d, m = torch.randn(5), torch.randn(5, 4)
    d2, m2 = torch.randn(2, 5), torch.randn(2, 5, 3)
    check(Fn(lambda d, m, d2, m2: (torch.diag(d) @ m, m.t() @ torch.diag(d),
                                   torch.diag_embed(d2) @ m2, torch.diag(d, 1))),
          d, m, d2, m2)


def test_diagonal_of_matrix():
    a, b = torch.randn(5, 7), torch.randn(2, 4, 3, 6)
    check(Fn(lambda a, b: (torch.diag(a), torch.diag(a, 2), torch.diag(a, -3),
                           torch.diagonal(b, 1, 1, 3), torch.diagonal(b, -1, -1, 0),
                           torch.diag(a @ a.t()).sum())), a, b)


@pytest.mark.slow
@pytest.mark.parametrize("k", [0, 1, -2])
def test_triangular_inputs_and_outputs(k):
    a, b = torch.randn(6, 6), torch.randn(6, 4)
    x = torch.randn(2, 5, 7)
    check(Fn(lambda a, b, x: (torch.tril(a, k) @ b, torch.triu(a, k) @ b,
                              torch.tril(a @ a.t(), k), torch.triu(x, k), torch.tril(x, k) * 2)),
          a, b, x)


# settings with several tiles and K steps at the shapes below: two staged buffers with
# two steps per pass (16 accumulators) and with one (64), and one staged buffer
BAND_SETTINGS = [dict(BM=32, BN=32, TM=4, TN=4, BK=8, VEC=4, DB=2, ROWS=0, UNROLL=1, GROUP=0),
                 dict(BM=64, BN=64, TM=8, TN=8, BK=16, VEC=4, DB=2, ROWS=0, UNROLL=0, GROUP=0),
                 dict(BM=32, BN=64, TM=4, TN=4, BK=16, VEC=4, DB=1, ROWS=0, UNROLL=1, GROUP=0)]


@pytest.mark.slow
@pytest.mark.parametrize("knobs", BAND_SETTINGS)
def test_triangular_operands_bound_each_tiles_k_loop(knobs):
    """A tril / triu operand bounds each output tile's K loop to the band both operands
    can be non-zero in (lower/linalg.k_range): tiles past the band run no step, or a
    range starting mid-K; offsets on both sides of the diagonal, shapes no tile
    divides, a batch."""
    torch.manual_seed(0)
    a, b = torch.randn(100, 150), torch.randn(150, 90)
    a3, b3 = torch.randn(2, 70, 40), torch.randn(2, 40, 130)
    module = Fn(lambda a, b, a3, b3: (
        torch.tril(a) @ torch.triu(b), torch.triu(a, 3) @ b, a @ torch.tril(b, -5),
        torch.tril(a, -40) @ torch.triu(b, 20), torch.triu(a, 200) @ b,
        torch.triu(a3, -7) @ torch.triu(b3, 9), (torch.tril(a3) @ b3).relu()))
    compiled = check(module, a, b, a3, b3, choose=lambda r: knobs if r.kind == "matmul" else None)
    kernels = [k for k in compiled.plan.kernels if "matmul" in k.name]
    assert len(kernels) == 7 and all(k.knobs == knobs for k in kernels)
    assert all("let khi = " in k.source for k in kernels)
    # a lower bound where a triu of A or a tril of B keeps k >= row + c
    assert sum("let klo = 0;" not in k.source for k in kernels) == 4


@pytest.mark.slow
@pytest.mark.parametrize("knobs", BAND_SETTINGS)
def test_outputs_a_band_mask_replaces_skip_the_product(knobs):
    """A product whose epilogue ends in where(band mask, value, scalar) (causal
    attention's scores) runs no K step in tiles the band misses: the scalar fills
    them; with the mask on either side of the diagonal and offset."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 100, 40), torch.randn(2, 90, 40)

    def rows_cols():
        return torch.arange(100)[:, None], torch.arange(90)[None, :]

    def causal(q, k):
        i, j = rows_cols()
        return torch.where(j <= i, q @ k.transpose(1, 2), float("-inf"))

    def upper(q, k):
        i, j = rows_cols()
        return torch.where(j - i >= 37, (q @ k.transpose(1, 2)) * 0.5, 0.0)

    def below(q, k):
        i, j = rows_cols()
        return torch.where(i - 50 > j, q @ k.transpose(1, 2), 2.0)

    for fn in (causal, upper, below):
        compiled = check(Fn(fn), q, k, choose=lambda r: knobs if r.kind == "matmul" else None)
        (kernel,) = compiled.plan.kernels
        assert "let khi = select(" in kernel.source, kernel.name


def test_diagonal_operands_scale_rows_or_columns():
    """A diagonal operand (diag, diag_embed, any offset) turns the product into a
    scaling of the other operand's rows or columns: no matmul kernel."""
    d, m, m11 = torch.randn(9), torch.randn(9, 7), torch.randn(11, 7)
    d2, m2, w, m7 = (torch.randn(3, 6), torch.randn(3, 6, 5), torch.randn(5, 6),
                     torch.randn(3, 7, 4))
    module = Fn(lambda d, m, m11, d2, m2, w, m7: (
        torch.diag(d) @ m, m.t() @ torch.diag(d), torch.diag(d, 2) @ m11,
        torch.diag(d[:7], -2) @ m, m11.t() @ torch.diag(d, -2), m11.t() @ torch.diag(d, 2),
        torch.diag_embed(d2) @ m2, w @ torch.diag_embed(d2), torch.diag_embed(d2, -1) @ m7))
    compiled = check(module, d, m, m11, d2, m2, w, m7)
    assert not any("matmul" in k.name for k in compiled.plan.kernels), compiled.plan.summary()


@pytest.mark.slow
def test_factors_constant_along_k_scale_the_output():
    """A scalar, per-row or per-column factor of an operand (attention's q * scale,
    softmax rows times 1 / sum) scales the product's output in its epilogue: the
    operand is read as stored (vec4 loads of the buffer, two staged buffers). A factor
    varying along K stays in the loader."""
    a, b = torch.randn(2, 40, 48), torch.randn(2, 48, 36)
    r, c, kv = torch.rand(2, 40, 1) + 0.5, torch.rand(36) + 0.5, torch.rand(48)
    for fn in (lambda a, b, r, c, kv: (a * 0.125) @ b, lambda a, b, r, c, kv: (r * a) @ b,
               lambda a, b, r, c, kv: a @ (b * c), lambda a, b, r, c, kv: (2 * r * a) @ (c * b)):
        compiled = check(Fn(fn), a, b, r, c, kv)
        (kernel,) = compiled.plan.kernels
        assert kernel.knobs["DB"] == 2, kernel.knobs
        assert len(set(re.findall(r"in\d+v4\[", kernel.source))) == 2  # both operands
    compiled = check(Fn(lambda a, b, r, c, kv: (a * kv) @ b), a, b, r, c, kv)
    (kernel,) = compiled.plan.kernels
    assert kernel.knobs["DB"] == 1 and "fn load_a4" in kernel.source  # computed loads


def test_arange_forms():
    x = torch.randn(7)
    check(Fn(lambda x: (x + torch.arange(7), x * torch.arange(1.0, 2.4, 0.2),
                        torch.arange(3, 17, 3), torch.arange(10, 0, -3).float())), x)


@pytest.mark.slow
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 17, 1), (1, 100, 1), (31, 5, 63), (33, 47, 29),
                                   (129, 4, 5), (2, 300, 65)])
def test_irregular_shapes(m, k, n):
    check(Fn(torch.mm), torch.randn(m, k), torch.randn(k, n))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_very_small_k_is_one_elementwise_kernel(k):
    assert k <= SMALL_K
    lin = torch.nn.Sequential(torch.nn.Linear(k, 9), torch.nn.ReLU())
    compiled = check(lin, torch.randn(13, k))
    assert len(compiled.plan.kernels) == 1 and "matmul" not in _templates(compiled)[0]
    check(Fn(torch.bmm), torch.randn(2, 5, k), torch.randn(2, k, 7))


def split_k_chunks(x_shape, y_shape, window=False) -> int:
    return product_plan(x_shape, y_shape, window).chunks


@pytest.mark.parametrize("m,k,n", [(16, 65536, 16), (3, 100000, 2)])
def test_very_large_k_uses_split_k(m, k, n):
    """(3 rows take the gemv, which cuts K only where its loop over K is long and its
    grid small: kernels/gemv.gemv_chunks)"""
    assert split_k_chunks((m, k), (k, n)) > 1
    a, b = torch.rand(m, k) - 0.5, torch.rand(k, n) - 0.5
    bias = torch.randn(n)
    compiled = check(Fn(lambda a, b, bias: torch.addmm(bias, a, b)), a, b, bias, atol=2e-4)
    names = _templates(compiled)
    assert "matmul" in names[0] and names[1].startswith("reduce"), names
    assert len(names) == 2, names  # the bias add fuses into the reduction's epilogue


def test_split_k_needs_two_chunks_of_its_least_depth(monkeypatch):
    monkeypatch.setattr(cuts, "SPLIT_K_MIN", 16)  # below SPLIT_K_CHUNK: K 100 has no chunks
    assert split_k_chunks((16, 100), (100, 4)) == 1  # (16 rows: the matmul, not the gemv)
    assert split_k_chunks((16, 2 * cuts.SPLIT_K_CHUNK), (2 * cuts.SPLIT_K_CHUNK, 4)) == 2


def test_split_k_batched_and_heuristic_off_for_big_outputs():
    assert split_k_chunks((2048, 4096), (4096, 2048)) == 1  # enough tiles already
    assert split_k_chunks((256, 4096), (4096, 256)) > 1  # 16 tiles: too few
    assert split_k_chunks((16, 256), (256, 16)) == 1  # shallow enough
    assert split_k_chunks((32, 1024), (1024, 4096)) == 8  # a recurrent step: 64 tiles
    # a GRU's step: 96 tiles of 128 x 64 (kernels.matmul.MATMUL_TALL_MIN_WORKGROUPS_PLAIN); as
    # a convolution's implicit GEMM 192 tiles of 64 x 64, more than 128
    assert split_k_chunks((256, 1024), (1024, 3072)) == 4
    assert split_k_chunks((256, 1024), (1024, 3072), window=True) == 1
    assert split_k_chunks((64, 672), (672, 16)) == 3  # 5 wanted: 3 cut K into whole tiles
    a, b = torch.rand(2, 3, 4100) - 0.5, torch.rand(4100, 5) - 0.5
    check(Fn(torch.matmul), a, b, atol=2e-4)


@pytest.mark.slow
def test_split_k_sum_is_added_by_the_kernels_that_read_it():
    """A split-K product of a few chunks read by an elementwise kernel away from the
    element it stores (a recurrent step's gates: slices of one product) or by a row
    kernel is summed in their loads (ir.inline_sum): no reduce kernel, no buffer of the
    sum. A product that is returned keeps its reduce kernel."""
    from kernelwright.ir.ir import INLINE_SUM_MAX

    # (16 rows: the matmul; up to 8 take the gemv, K in one piece)
    assert 1 < split_k_chunks((16, 512), (512, 64)) <= INLINE_SUM_MAX
    a, b, bias = torch.rand(16, 512) - 0.5, torch.rand(512, 64) - 0.5, torch.randn(64)

    def gates(y):
        return torch.sigmoid(y[:, :32]) * torch.tanh(y[:, 32:])

    compiled = check(Fn(lambda a, b, bias: gates(a @ b + bias)), a, b, bias, atol=2e-4)
    assert _templates(compiled) == ["matmul", "slice+sigmoid+tanh+mul"], _templates(compiled)
    # an LSTM step's gates add the input's projection (a buffer of its own) too: three
    # buffers, over RECOMPUTE_MAX_READS, so the sum keeps its kernel (measured faster)
    lstm = check(Fn(lambda xp, a, b, bias: gates(xp + a @ b + bias)),
                 torch.randn(16, 64), a, b, bias, atol=3e-4)
    assert _templates(lstm) == ["matmul", "reduce+add", "slice+sigmoid+tanh+mul"], _templates(lstm)
    rows = check(Fn(lambda a, b: torch.softmax(a @ b, -1)), a, b, atol=2e-4)
    assert _templates(rows) == ["matmul", "div+reduce"], _templates(rows)  # a row kernel
    both = check(Fn(lambda a, b: (a @ b, torch.relu(a @ b)[:, 1:])), a, b, atol=2e-4)
    assert any(n.startswith("reduce") for n in _templates(both)), _templates(both)


@pytest.mark.slow
@pytest.mark.parametrize("eq,shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 5, 6), (2, 3, 6, 4)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bi,bj->bij", [(2, 3), (2, 4)]),
    ("ij,kj->ik", [(5, 4), (6, 4)]),
    ("bi,bi->b", [(3, 7), (3, 7)]),
    ("bld,de->ble", [(2, 5, 4), (4, 3)]),
])
def test_einsum(eq, shapes):
    check(Fn(lambda *xs: torch.einsum(eq, *xs)), *[torch.randn(*s) for s in shapes])


def test_outer():
    check(Fn(torch.outer), torch.randn(4), torch.randn(6))


def test_epilogue_takes_a_value_read_twice():
    """A template's result read by several elementwise ops that meet again in one node
    (mish: y * tanh(softplus(y))) is computed in the template's epilogue, not stored and
    read back; when something else reads one of them (a reduction), the value is stored."""

    lin = torch.nn.Linear(24, 40)
    x = torch.randn(37, 24)
    mish = check(Fn(lambda x: (lambda y: y * torch.tanh(F.softplus(y)))(lin(x))), x)
    assert len(mish.plan.kernels) == 1, mish.plan.summary()
    gate = check(Fn(lambda x: (lambda y: torch.sigmoid(y) * y + y.abs() * 0.5)(lin(x))), x)
    assert len(gate.plan.kernels) == 1, gate.plan.summary()
    both = check(Fn(lambda x: (lambda y: torch.sigmoid(y) * y + y.sum(1, keepdim=True))(lin(x))),
                 x)
    assert len(both.plan.kernels) == 2, both.plan.summary()
    # two outputs: no one node where the readers meet, so y is stored and read back
    out = check(Fn(lambda x: (lambda y: (torch.relu(y), torch.relu(y) + y))(lin(x))), x)
    assert len(out.plan.kernels) == 3, out.plan.summary()


@pytest.mark.slow
def test_transcendental_prologues_recomputed_per_tile_are_materialized(monkeypatch):
    """An operand's elementwise prologue with exp, tanh, ... is written once by a kernel
    of its own when the loader would compute each of its elements at least
    schedule.PROLOGUE_RECOMPUTE_MIN times (A: one per tile column, ceil(N / BN); B: one
    per tile row): the matmul then reads a buffer, its views (a transpose) still
    inlined. Under the threshold, and for cheap prologues (a LayerNorm's arithmetic)
    at any tile count, the prologue stays in the loader."""

    from kernelwright.schedule import schedule

    def kernels(compiled):
        return [k.name for k in compiled.plan.kernels]

    x, y, w = torch.randn(40, 32), torch.randn(40, 32), torch.randn(32, 256)
    gate = Fn(lambda x, y, w: torch.sigmoid(x) * torch.tanh(y) @ w)  # 4 tile columns
    assert kernels(check(gate, x, y, w)) == ["sigmoid+tanh+mul", "matmul"]
    narrow = check(gate, x, y, w[:, :64].contiguous())  # one tile column: computed once anyway
    assert kernels(narrow) == ["sigmoid+tanh+mul+matmul"]
    monkeypatch.setattr(schedule, "PROLOGUE_RECOMPUTE_MIN", 5)  # 4 loads an element
    assert kernels(check(gate, x, y, w)) == ["sigmoid+tanh+mul+matmul"]
    monkeypatch.undo()
    # B [K, N] computed once per tile row (M = 256: four rows of 64), read transposed
    b = Fn(lambda a, v: a @ F.silu(v).t())
    names = kernels(check(b, torch.randn(256, 32), torch.randn(24, 32)))
    assert names == ["sigmoid+mul", "matmul"], names
    # a LayerNorm in the A loader stays fused with 4 tile columns
    norm_linear = torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.Linear(32, 256))
    names = kernels(check(norm_linear, x))
    assert names[-1] == "sub+mul+add+matmul", names  # the statistics: row kernels
    assert all("reduce" in n for n in names[:-1]), names
    # a convolution's windows of an activation: each element read by 9 taps
    conv = torch.nn.Conv2d(8, 16, 3, padding=1)
    names = kernels(check(Fn(lambda x: conv(torch.tanh(x))), torch.randn(2, 8, 10, 10)))
    assert names[0] == "tanh", names


def test_cats_read_per_tile_are_materialized(monkeypatch):
    """A cat of several pieces in an operand (a recurrent network's output sequence) is
    written by a kernel of its own when the loader would read each element
    PROLOGUE_RECOMPUTE_MIN times or more, not read through a branch over the pieces at
    every load; with one tile column, or with PROLOGUE_CAT_PIECES raised, it stays in
    the loader."""
    from kernelwright.schedule import schedule

    def kernels(fn, *xs):
        return [k.name for k in check(Fn(fn), *xs).plan.kernels]

    steps = [torch.randn(8, 32) for _ in range(3)]
    w = torch.randn(32, 256)  # 4 tile columns
    assert kernels(lambda a, b, c, w: torch.cat([a, b, c]) @ w, *steps, w) == ["cat", "matmul"]
    narrow = w[:, :64].contiguous()
    assert kernels(lambda a, b, c, w: torch.cat([a, b, c]) @ w, *steps, narrow) == ["cat+matmul"]
    monkeypatch.setattr(schedule, "PROLOGUE_CAT_PIECES", 3)
    assert kernels(lambda a, b, c, w: torch.cat([a, b, c]) @ w, *steps, w) == ["cat+matmul"]


def test_sums_of_a_product_reduce_its_operands():
    """A product's output summed over N (or M), through scalar factors, becomes two
    reductions of its operands (linalg.summed_product): no matmul kernel, the same
    values; anything between the product and the sum but scalars keeps the product."""
    x, w = torch.randn(9, 40), torch.randn(24, 40)
    a, c = torch.randn(3, 7, 20), torch.randn(3, 20, 11)
    fn = Fn(lambda x, w, a, c: (torch.sum(x @ w.t() / 2.0, dim=1, keepdim=True) * 1.5,
                                (a @ c).sum(-2), (3.0 * torch.bmm(a, c)).mean(-1),
                                (x @ w.t()).sum(0)))
    compiled = check(fn, x, w, a, c, atol=1e-4)
    assert not any("matmul" in n for n in _templates(compiled)), _templates(compiled)
    # a ReLU between them, or the product also returned: the product stays (and is right)
    kept = check(Fn(lambda x, w: (torch.relu(x @ w.t()).sum(1), (x @ w.t()).sum(1) + 1.0)),
                 x, w, atol=1e-4)
    assert sum("matmul" in n for n in _templates(kept)) == 1, _templates(kept)
    both = check(Fn(lambda x, w: (x @ w.t(), (x @ w.t()).sum(1))), x, w, atol=1e-4)
    assert any("matmul" in n for n in _templates(both))


@pytest.mark.slow
def test_sums_through_reshapes_and_biases_reduce_the_operands():
    """The same through reshapes (a linear layer over a 3-d input, a convolution's
    implicit GEMM) and added terms that expand something smaller (a bias, a scalar):
    a convolution averaged over all its positions becomes the sums of its input's
    windows times the weights, plus the bias; a sum over some of the positions, or over
    rows that are only part of the product's M, keeps the product."""
    torch.manual_seed(3)
    x, w, bias = torch.randn(2, 6, 13, 11), torch.randn(36, 6, 3, 3), torch.randn(36)
    conv = F.conv2d
    for fn in (lambda x, w, c: torch.sigmoid(conv(x, w, c, padding=1).mean(dim=(2, 3))),
               lambda x, w, c: conv(x, w[:, :3], c, stride=2, groups=2).sum(
                   dim=(2, 3), keepdim=True) - 1.5):
        compiled = check(Fn(fn), x, w, bias, atol=1e-3)
        assert not any("matmul" in n or "conv" in n for n in _templates(compiled)), \
            _templates(compiled)
    x3, w3 = torch.randn(2, 4, 5, 6, 7), torch.randn(17, 4, 2, 3, 3)
    compiled = check(Fn(lambda x, w: F.conv3d(x, w, padding=(1, 0, 1), dilation=(1, 2, 1))
                        .mean(dim=(2, 3, 4))), x3, w3, atol=1e-3)
    assert not any("matmul" in n for n in _templates(compiled)), _templates(compiled)
    xl, wl, bl = torch.randn(4, 9, 40), torch.randn(24, 40), torch.randn(24)
    compiled = check(Fn(lambda x, w, c: (0.5 + F.linear(x, w, c)).sum(-1)), xl, wl, bl,
                     atol=1e-3)
    assert not any("matmul" in n for n in _templates(compiled)), _templates(compiled)
    for fn, args in ((lambda x, w, c: conv(x, w, c, padding=1).sum(dim=3), (x, w, bias)),
                     (lambda x, w, c: F.linear(x, w, c).sum(1), (xl, wl, bl))):
        kept = check(Fn(fn), *args, atol=1e-3)
        assert sum("matmul" in n for n in _templates(kept)) == 1, _templates(kept)
    # read again after the sum (an instance norm written out, the product returned too):
    # the finished graph keeps the product, and the sum reduces it as it is
    # (GraphBuilder.settle): one reduction, not the operands' two
    for fn in (lambda x, w, c: (lambda y: y - y.mean((2, 3), keepdim=True))(
                   conv(x, w, c, padding=1)),
               lambda x, w, c: (lambda y: (y.mean((2, 3)), y))(conv(x, w, c, padding=1))):
        names = _templates(check(Fn(fn), x, w, bias, atol=1e-3))
        assert sum("matmul" in n for n in names) == 1 and len(names) == 2, names


def test_a_product_with_one_tile_column_computes_its_operand(monkeypatch):
    """exp(x - max) read by a product with v of at most kernels.matmul.MATMUL_ONCE_SIDE
    columns and by a sum: the product loads each exponential once, so it computes them
    in its loader as the sum does in its own (no kernel stores them); with wider v, or
    the side set to 0, they are stored once and read by both."""

    def stored_exp(compiled):
        return [k.name for k in compiled.plan.kernels if k.name.startswith("sub+exp")]

    def f(x, v):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e @ v, e.sum(-1)

    x, v = torch.randn(3, 40, 50), torch.randn(3, 50, 24)
    compiled = check(Fn(f), x, v)
    assert not stored_exp(compiled), [k.name for k in compiled.plan.kernels]
    assert stored_exp(check(Fn(f), x, torch.randn(3, 50, 100)))
    monkeypatch.setattr(matmul_kernels, "MATMUL_ONCE_SIDE", 0)
    assert stored_exp(check(Fn(f), x, v))


@pytest.mark.slow
def test_a_large_products_prologue_is_written_once(monkeypatch):
    """A LayerNorm read by a large product (512 a side and more) is written by its own
    row kernel, and the product loads it plain on the tiles of stored operands (the
    wide ones, or the plain 128 x 64 where K is under 512; schedule.heavy_prologues); a
    smaller product computes it in its loader. (Split-K's small grids rule set aside:
    one product, K whole.)"""
    from kernelwright.kernels import MATMUL_LARGE_TILES, MATMUL_PLAIN_TILES

    monkeypatch.setattr(cuts, "SPLIT_K_MAX_TILES", 0)
    torch.manual_seed(7)
    for rows, features, out, tiles in ((512, 512, 512, MATMUL_LARGE_TILES),
                                       (512, 192, 768, MATMUL_PLAIN_TILES),
                                       (256, 512, 512, None)):
        model = torch.nn.Sequential(torch.nn.LayerNorm(features), torch.nn.Linear(features, out))
        with torch.no_grad():
            model[0].weight.uniform_(0.5, 1.5)
            model[0].bias.uniform_(-0.5, 0.5)
        compiled = check(model, torch.randn(rows, features), atol=1e-3)
        (mm,) = [k for k in compiled.plan.kernels if "matmul" in k.name]
        assert mm.name.startswith("matmul") == (tiles is not None), _templates(compiled)
        got = (mm.knobs["BM"], mm.knobs["BN"], mm.knobs["TM"], mm.knobs["TN"])
        assert tiles is None or got == tiles, (got, _templates(compiled))


def test_a_prologue_loaded_once_over_a_long_k_takes_the_plain_tiles(monkeypatch):
    """The product by V of attention's probabilities computed in its loader (one tile
    column: each element loaded once) takes the plain tiles (two staged buffers) from
    kernels.matmul.MATMUL_ONCE_PLAIN_MIN_K keys on; a shorter K keeps the prologue's (one)."""
    from kernelwright import kernels

    monkeypatch.setattr(cuts, "SPLIT_K_MAX_TILES", 0)  # one product, not K in chunks

    for keys in (40, kernels.matmul.MATMUL_ONCE_PLAIN_MIN_K + 8):
        x, v = torch.randn(1, 64, keys), torch.randn(1, keys, 64)
        compiled = check(Fn(lambda x, v: torch.softmax(x, -1) @ v), x, v)
        (product,) = [k for k in compiled.plan.kernels if k.name.endswith("matmul")]
        long_k = keys >= kernels.matmul.MATMUL_ONCE_PLAIN_MIN_K
        assert "exp(" in product.source, compiled.plan.summary()
        assert product.knobs["DB"] == (2 if long_k else 1), product.knobs


def test_softmax_by_a_product_reads_its_rows_once():
    """softmax(x) along K as operand A (explicit attention) becomes exp(x - lse): one row
    kernel for the max and the log-sum-exp, the product computing the probabilities in
    its loader (linalg.softmax_rows); through torch.matmul's reshape of 4-d operands
    too, with scores of a large magnitude, and with the probabilities also returned (the
    softmax then keeps its own kernels for them)."""
    def kinds(compiled):
        return [k.key.split()[0] for k in compiled.plan.kernels]

    x, v = torch.randn(2, 3, 20, 36) * 30, torch.randn(2, 3, 36, 12)
    for f in (lambda x, v: torch.softmax(x, -1) @ v,
              lambda x, v: torch.bmm(torch.softmax(x.flatten(0, 1), -1), v.flatten(0, 1))):
        compiled = check(Fn(f), x, v)
        assert kinds(compiled) == ["rows", "matmul"], compiled.plan.summary()
    both = check(Fn(lambda x, v: (torch.softmax(x, -1) @ v, torch.softmax(x, -1))), x, v)
    assert "matmul" in kinds(both), both.plan.summary()
    # along another dim than K: not a softmax of the product's rows
    check(Fn(lambda x, v: torch.softmax(x, -2) @ v), x, v)


def test_64_rows_take_one_tile_row_of_64_by_256(monkeypatch):
    """A convolution's 64 output channels take 64 x 256 tiles of 8 x 16 blocks staged 8
    deep along the rows, where K is at least 512 and the grid has 2048 tiles (set aside
    here); through the real kernels, with an epilogue, on a K that is no multiple of 8."""
    from kernelwright import kernels

    assert kernels.matmul_tiles(64, 16384, 32, window=True) == kernels.matmul.MATMUL_ROWS64_TILES
    assert kernels.matmul_tiles(64, 16384, 32, prologue=True) != kernels.matmul.MATMUL_ROWS64_TILES
    assert kernels.matmul_tiles(64, 16384, 32, window=True, wide=False) == (64, 64, 4, 4)
    assert kernels.matmul_tiles(64, 3136, 32, window=True) == (64, 64, 4, 4)  # 416 tiles
    monkeypatch.setattr(matmul_kernels, "MATMUL_ROWS64_MIN_WORKGROUPS", 1)
    monkeypatch.setattr(matmul_kernels, "MATMUL_TALL_MIN_WORKGROUPS", 1)
    monkeypatch.setattr(cuts, "SPLIT_K_MAX_TILES", 0)  # no split-K for the small grid
    conv = torch.nn.Sequential(torch.nn.Conv2d(60, 64, 3, padding=1), torch.nn.ReLU())
    compiled = check(conv, torch.randn(2, 60, 12, 20), atol=2e-4)  # K = 540
    (kernel,) = [k for k in compiled.plan.kernels if "matmul" in k.name]
    assert {k: kernel.knobs[k] for k in ("BM", "BN", "TM", "TN", "BK", "ROWS")} == dict(
        BM=64, BN=256, TM=8, TN=16, BK=8, ROWS=1)


def test_192_rows_take_one_tile_row_of_192(monkeypatch):
    """A convolution's 192 output channels (and a product of 192 rows) take 192 x 128 tiles
    of 12 x 8 blocks, staged 8 deep, where K is at least 512 and the grid is large enough
    (set aside here, with split-K's small grids); through the real kernels, with an
    epilogue."""
    from kernelwright import kernels

    assert kernels.matmul_tiles(192, 4096, 32, window=True) == kernels.matmul.MATMUL_ROWS192_TILES
    assert kernels.matmul_tiles(192, 4096, 32, prologue=True) != kernels.matmul.MATMUL_ROWS192_TILES
    # K under 512 (matmul_wide false: MobileNetV2's 32-deep expansions) keeps 64 x 64
    assert kernels.matmul_tiles(192, 4096, 32, window=True, wide=False) == (64, 64, 4, 4)
    assert kernels.matmul_tiles(192, 256, 1, window=True) == (64, 64, 4, 4)  # 2 tiles
    monkeypatch.setattr(matmul_kernels, "MATMUL_TALL_MIN_WORKGROUPS", 1)
    monkeypatch.setattr(cuts, "SPLIT_K_MAX_TILES", 0)  # no split-K for the small grid
    conv = torch.nn.Sequential(torch.nn.Conv2d(64, 192, 3, padding=1), torch.nn.ReLU())
    compiled = check(conv, torch.randn(2, 64, 12, 20), atol=2e-4)  # K = 576
    (kernel,) = [k for k in compiled.plan.kernels if "matmul" in k.name]
    assert {k: kernel.knobs[k] for k in ("BM", "BN", "TM", "TN", "BK")} == dict(
        BM=192, BN=128, TM=12, TN=8, BK=8)
