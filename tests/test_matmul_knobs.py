"""Every setting of the matmul template's knobs (kernels.matmul_space: tile shapes,
BK, vec4 fragments, double buffering) against PyTorch, at shapes no tile divides:
operands stored plain and transposed (so that both staged layouts and the vec4 global
loads are used), batched, with an elementwise prologue (scalar loads) and a fused
bias + relu epilogue."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import Fn

import kernelwright
from kernelwright import kernels
from kernelwright.compiler import CompiledModule
from kernelwright.kernels import cuts
from kernelwright.plan import Plan

# The scalar settings of small products (VEC = 1, DB = 1) are run by test_tune's
# test_every_knob_setting_matches_pytorch; here every other setting of the space.
SETTINGS = list({tuple(sorted(s.items())): s for s in
                 kernels.matmul_space(1 << 12, 1 << 12, 1 << 12)
                 + kernels.matmul_space(64, 64, 64) + kernels.matmul_space(512, 64, 64)
                 + kernels.matmul_space(64, 512, 64)
                 if s["VEC"] != 1 or s["DB"] != 1 or s["BM"] * s["BN"] >= 128 * 128}.values())


def _products(a, b, at, w, bias):
    """Batched relu(A @ B^T + bias) (both operands read along K: K-major vec4 tiles);
    (2 A)^T @ W (A through a prologue, read along M; W along N); A^T @ B[1]^T (A along M,
    B along K at an offset)."""
    return (torch.relu(torch.bmm(a, b.transpose(1, 2)) + bias), (at * 2).t() @ w,
            at.t() @ b[1].t())


CASES = {  # (batch, M, N, K), products: M, N, K multiples of 4 (vec4 loads), then none
    "aligned": ((2, 68, 44, 36), 3),
    "irregular": ((2, 37, 29, 33), 2),  # the third product's paths are the first two's here
    # multiples of most tiles: fetches and stores without bounds tests, an odd number of
    # K steps at BK 16 (two steps per pass end on a guarded one), an even one at BK 8
    "tile_multiples": ((2, 128, 128, 48), 3),
}


def _retarget(plan: Plan, requests, knobs: dict) -> Plan:
    """The plan with every matmul kernel generated with `knobs` (bindings recomputed:
    a setting may bind vec4 views of the operands)."""
    gens = {str(r.key): (r, r.generate(knobs)) for r in requests}
    kernels = []
    for k in plan.kernels:
        if k.key in gens:
            r, gen = gens[k.key]
            assert gen.key == r.key and gen.knobs == knobs
            reads = k.bindings[:len(r.default.reads)]
            k = dataclasses.replace(k, source=gen.source, grid=gen.grid, knobs=gen.knobs,
                                    bindings=gen.binding_ids(reads, k.bindings[-1]),
                                    workgroup_bytes=gen.workgroup_bytes)
        kernels.append(k)
    return dataclasses.replace(plan, kernels=kernels)


def _compile_with_requests(module, inputs):
    """The compiled module and the knob requests of its matmul kernels."""
    requests = []

    def keep(request):
        if request.kind == "matmul":
            requests.append(request)
        return None

    compiled = kernelwright.compile(module, inputs, choose=keep)
    return compiled, requests


def _settings_of(case: str) -> list[dict]:
    """The settings a case runs: all of them, but at tile multiples only those whose
    tiles divide M, N and K. A bounds test is written or not per operand and per dim
    (M, N, K: kernels.matmul._matmul_tile_code, the stores), each on its own: where a tile
    crosses a dim here, that setting's test of it is the one "aligned" runs (there every
    dim is crossed; BK 32 takes two K steps there as here)."""
    if case != "tile_multiples":
        return SETTINGS
    _, m, n, k = CASES[case][0]
    return [s for s in SETTINGS if m % s["BM"] == 0 and n % s["BN"] == 0 and k % s["BK"] == 0]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_every_matmul_setting_matches_pytorch(case):
    (nb, m, n, k), products = CASES[case]
    torch.manual_seed(0)
    inputs = [torch.randn(nb, m, k), torch.randn(nb, n, k), torch.randn(k, m),
              torch.randn(k, n), torch.randn(n)]
    module = Fn(lambda *xs: _products(*xs)[:products]).eval()
    with torch.no_grad():
        want = module(*inputs)
    compiled, requests = _compile_with_requests(module, inputs)
    assert len(requests) == products
    vec_loads = 0
    for knobs in _settings_of(case):
        plan = _retarget(compiled.plan, requests, knobs)
        vec_loads += sum("v4[" in kern.source for kern in plan.kernels)
        got = CompiledModule(plan)(*inputs, poison=True)
        for g, w in zip(got, want):
            try:
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
            except AssertionError as exc:
                raise AssertionError(f"matmul with knobs {knobs}: {exc}") from None
    # the aligned cases exercise the vec4 global loads, the irregular one never can
    assert (vec_loads > 0) == (case != "irregular")


def test_bounds_are_tested_only_where_a_tile_can_cross_them():
    """The matmul's fetches and stores test M, N and K only where they are not multiples
    of the tile; the next tile is fetched without a branch, and an invocation's fetch
    set-up (its row, K offset, address) is computed before the K loop."""
    def source(m, n, k):
        module = Fn(lambda a, b: a @ b)
        compiled = kernelwright.compile(module, [torch.randn(m, k), torch.randn(k, n)])
        (src,) = [kern.source for kern in compiled.plan.kernels if "matmul" in kern.name]
        return src, [kern.knobs for kern in compiled.plan.kernels if "matmul" in kern.name][0]

    src, knobs = source(128, 128, 64)
    assert (128 % knobs["BM"], 128 % knobs["BN"], 64 % knobs["BK"]) == (0, 0, 0), knobs
    loop = src[src.index("for (var k0"):]
    assert "if (" not in loop.split("workgroupBarrier")[0], loop[:2000]  # no test, no branch
    assert "let ia0 = " in src and "in0v4[ia0 + " in src  # the address before the loop
    assert "m < 128" not in src and "n < 128" not in src  # stores untested
    src, _ = source(100, 120, 40)
    assert "let va0 = m0 + " in src and "< 100;" in src  # the row test, once
    assert "kb + qa0 + 0 < 40" in src and "if (m < 100 && n < 120)" in src


def test_default_tiles_follow_the_product_shape():
    """128 x 128 tiles of 8 x 16 blocks staged 8 deep along the rows for large products
    (kernels.matmul_wide: M, N and K multiples of 4, K of MATMUL_WIDE_MIN_K or more, no
    convolution windows), else 128 x 64 tiles of 8 x 4 blocks; 128 x 128 of 8 x 8 where an
    operand's loader computes (one staged buffer); under 512 rows, 128 x 64 tiles only where the
    rows are a multiple of 128 and the grid keeps MATMUL_TALL_MIN_WORKGROUPS workgroups
    (a convolution's 128 output channels over many positions; other products
    MATMUL_TALL_MIN_WORKGROUPS_PLAIN), else 64 x 64; thin
    products get thin tiles, 17-32 rows 32 x 128 tiles staged 8 deep where the grid
    keeps MATMUL_TALL_MIN_WORKGROUPS workgroups; many rows and 17-511 columns 128 x 64
    tiles where the grid keeps as many (a tall, skinny product)."""
    tall = kernels.matmul.MATMUL_TALL_MIN_WORKGROUPS
    plain = kernels.matmul.MATMUL_TALL_MIN_WORKGROUPS_PLAIN
    assert kernels.matmul_tiles(4096, 4096) == (128, 128, 8, 16)
    wide = kernels.matmul_knobs(4096, 4096)
    assert (wide["BK"], wide["ROWS"], wide["DB"], wide["VEC"]) == (8, 1, 2, 4), wide
    assert kernels.matmul_wide(4096, 4096, kernels.matmul.MATMUL_WIDE_MIN_K)
    for m, n, k in ((3001, 2999, 4093), (4096, 4096, 4093),
                    (4096, 4096, kernels.matmul.MATMUL_WIDE_MIN_K - 4)):
        assert not kernels.matmul_wide(m, n, k)
        assert kernels.matmul_tiles(m, n, wide=False) == (128, 64, 8, 4)
        assert kernels.matmul_knobs(m, n, wide=False)["BK"] == kernels.MATMUL_BK
    assert kernels.matmul_tiles(4096, 4096, window=True) == (128, 64, 8, 4)
    assert kernels.matmul_tiles(4096, 4096, prologue=True) == (128, 128, 8, 8)
    assert kernels.matmul_knobs(512, 512, prologue=True)["BN"] == 128

    def tiles(*args, window=True):
        return kernels.matmul_tiles(*args, window=window)

    assert tiles(128, 64 * tall) == (128, 64, 8, 4)
    assert tiles(256, 64 * tall // 4, 2) == (128, 64, 8, 4)
    assert tiles(256, 64 * tall // 4 - 64, 2) == (64, 64, 4, 4)
    assert tiles(256, 64 * plain // 4, 2, window=False) == (128, 64, 8, 4)  # not windows
    assert tiles(256, 64 * plain // 4 - 64, 2, window=False) == (64, 64, 4, 4)
    assert tiles(64, 64 * tall) == (64, 64, 4, 4)
    assert tiles(192, 64 * tall) == (64, 64, 4, 4)
    assert tiles(8, 4096) == (16, 64, 1, 4)
    assert tiles(32, 128 * tall) == (32, 128, 4, 4)  # 32 channels
    assert kernels.matmul_knobs(32, 128 * tall, window=True)["BK"] == 8
    assert tiles(32, 128 * tall - 128) == (64, 64, 4, 4)  # too few workgroups
    assert tiles(32, 128 * plain, window=False) == (32, 128, 4, 4)
    assert tiles(32, 128 * plain - 128, window=False) == (64, 64, 4, 4)
    knobs = kernels.matmul_knobs(128, 3136, 64, window=True)
    assert (knobs["BM"], knobs["BN"], knobs["VEC"], knobs["DB"]) == (128, 64, 4, 2)
    assert tiles(262144, 384) == (128, 64, 8, 4)  # tall and skinny
    assert tiles(128 * tall // 6, 384) == (128, 64, 8, 4)
    assert tiles(128 * tall // 6 - 128, 384) == (64, 64, 4, 4)
    assert kernels.matmul_tiles(262144, 384, prologue=True) == (64, 64, 4, 4)
    assert kernels.matmul_tiles(49152, 50) == (128, 64, 8, 4)  # a classifier's 50
    assert kernels.matmul_tiles(49152, 16) == (64, 16, 4, 1)  # thin tiles still


@pytest.mark.slow
def test_large_products_take_the_wide_tiles(monkeypatch):
    """Products of 512 x 512 and more over K of MATMUL_WIDE_MIN_K take the wide tiles
    (128 x 128, 8 x 16 blocks, staged 8 deep along the rows) and match PyTorch: a plain
    product whose M and N no tile divides, a linear (B stored [N, K], staged along its
    rows too) with bias and ReLU, a batched product of a transposed A with a residual;
    K of 4093 keeps the 128 x 64 tiles. (Split-K is
    off: it would cut these small grids' K.)"""
    from conftest import check

    monkeypatch.setattr(cuts, "SPLIT_K_MAX_TILES", 0)

    def knobs_of(compiled):
        (knobs,) = [k.knobs for k in compiled.plan.kernels if k.key.startswith("matmul")]
        return (knobs["BM"], knobs["BN"], knobs["TM"], knobs["TN"], knobs["BK"],
                knobs["ROWS"])

    k = kernels.matmul.MATMUL_WIDE_MIN_K
    wide = (*kernels.MATMUL_LARGE_TILES, 8, 1)
    assert knobs_of(check(Fn(torch.matmul), torch.randn(516, k), torch.randn(k, 520),
                          atol=1e-3)) == wide
    linear = Fn(lambda x, w, b: torch.relu(x @ w.t() + b))
    assert knobs_of(check(linear, torch.randn(520, k), torch.randn(644, k), torch.randn(644),
                          atol=1e-3)) == wide
    # batched, A read along its rows (stored [K, M]), a residual read by the epilogue
    batched = Fn(lambda a, b, r: torch.bmm(a.transpose(1, 2), b) + r)
    assert knobs_of(check(batched, torch.randn(2, k, 520), torch.randn(2, k, 516),
                          torch.randn(2, 520, 516), atol=1e-3)) == wide
    compiled = kernelwright.compile(Fn(torch.matmul), [torch.randn(512, 4093),
                                                       torch.randn(4093, 512)])
    assert knobs_of(compiled) == (128, 64, 8, 4, kernels.MATMUL_BK, 0)



@pytest.mark.slow
def test_a_weight_read_along_k_is_stored_transposed():
    """nn.Linear's weight [N, K] is transposed once at compile time (a permute of a
    constant is a constant: ir.GraphBuilder.permute), so the plan holds W^T [K, N]
    and the product loads B 16 bytes at a time along N and stages it without
    transposing stores; a weight also read as it is keeps both layouts; inputs are
    never copied."""
    from conftest import check

    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 40)
    compiled = check(lin, torch.randn(24, 96))
    consts = list(compiled.plan.constants.values())
    assert any(c.shape == (96, 40) and np.array_equal(c, lin.weight.detach().numpy().T)
               for c in consts)
    assert not any(c.shape == (40, 96) for c in consts)
    (src,) = [k.source for k in compiled.plan.kernels if "matmul" in k.name]
    assert "[lb0] = " not in src  # no scalar stores into B's vec4 fragments

    class Tied(torch.nn.Module):  # the same weight read along K and along its rows
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(32, 48))

        def forward(self, x, y):
            return x @ self.w.t(), y @ self.w

    compiled = check(Tied(), torch.randn(8, 48), torch.randn(8, 32))
    shapes = sorted(c.shape for c in compiled.plan.constants.values())
    assert shapes == [(32, 48), (48, 32)], shapes
    # an input read along K stays one buffer, staged along its rows
    compiled = check(Fn(lambda x, w: x @ w.t()), torch.randn(24, 96), torch.randn(40, 96))
    assert not compiled.plan.constants

    class Repeated(torch.nn.Module):  # one Linear read at every step: one W^T in the plan
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):
            for _ in range(4):
                x = torch.tanh(self.lin(x))
            return x

    compiled = check(Repeated(), torch.randn(8, 16))
    shapes = sorted(c.shape for c in compiled.plan.constants.values())
    assert shapes.count((16, 16)) == 1, shapes


def test_vec4_tiles_write_the_k_step_out():
    """With vec4 fragments the default K step is written out (UNROLL 1): no inner loop
    over the tile's vec4 steps, BK / 4 blocks with constant offsets instead; scalar
    fragments keep theirs; the rolled loop stays in the search space."""
    def source(m, n, k):
        module = Fn(lambda a, b: a @ b)
        compiled = kernelwright.compile(module, [torch.randn(m, k), torch.randn(k, n)])
        (kern,) = [kern for kern in compiled.plan.kernels if "matmul" in kern.name]
        return kern.source, kern.knobs

    src, knobs = source(64, 64, 64)
    assert (knobs["VEC"], knobs["UNROLL"]) == (4, 1), knobs
    assert "for (var kq" not in src
    assert all(f"let kq = {q};" in src for q in range(0, knobs["BK"], 4))
    _, knobs = source(16, 4096, 16)  # (up to 8 rows take the gemv)
    assert (knobs["VEC"], knobs["UNROLL"]) == (1, 0), knobs
    space = kernels.matmul_space(4096, 4096, 4096)
    default = kernels.matmul_knobs(4096, 4096)
    assert default["UNROLL"] == 1 and {**default, "UNROLL": 0} in space


@pytest.mark.slow
def test_products_of_32_rows_take_32_row_tiles():
    """17-32 rows over a grid of at least MATMUL_TALL_MIN_WORKGROUPS_PLAIN workgroups (a
    product of no convolution windows): 32 x 128
    tiles staged 8 deep, plain (two staged buffers) and with a prologue (one, ROWS 1),
    both against PyTorch; a small grid keeps 64 x 64 tiles."""
    from conftest import check

    def knobs_of(compiled):
        (knobs,) = [k.knobs for k in compiled.plan.kernels if k.key.startswith("matmul")]
        return knobs

    nb = kernels.matmul.MATMUL_TALL_MIN_WORKGROUPS_PLAIN
    a, w = torch.randn(nb, 20, 37), torch.randn(nb, 37, 128)
    knobs = knobs_of(check(Fn(torch.bmm), a, w))
    assert (knobs["BM"], knobs["BN"], knobs["BK"], knobs["DB"]) == (32, 128, 8, 2), knobs
    knobs = knobs_of(check(Fn(lambda a, w: torch.bmm(torch.relu(a), w)), a, w))
    assert (knobs["BM"], knobs["DB"], knobs["ROWS"]) == (32, 1, 1), knobs
    knobs = knobs_of(check(Fn(torch.bmm), a[:4], w[:4]))
    assert (knobs["BM"], knobs["BN"]) == (64, 64), knobs


@pytest.mark.slow
def test_operands_computed_on_their_loads_take_one_staged_buffer():
    """A matmul whose A loader computes a LayerNorm (or any elementwise prologue) defaults
    to DB 1 with operands read along K staged along their rows (ROWS 1); plain operands,
    transposed views and a convolution's windows, even over a prologue, keep DB 2 and
    ROWS 0."""
    from conftest import check

    def matmul_knobs(compiled):
        return [k.knobs for k in compiled.plan.kernels if k.key.startswith("matmul")]

    x = torch.randn(40, 32)
    norm_linear = torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.Linear(32, 48))
    (knobs,) = matmul_knobs(check(norm_linear, x))
    assert (knobs["VEC"], knobs["DB"], knobs["ROWS"]) == (4, 1, 1), knobs
    odd = torch.nn.Sequential(torch.nn.LayerNorm(30), torch.nn.Linear(30, 50))
    (knobs,) = matmul_knobs(check(odd, torch.randn(37, 30)))  # no side a tile's multiple
    assert (knobs["DB"], knobs["ROWS"]) == (1, 1), knobs
    (knobs,) = matmul_knobs(check(Fn(lambda x, w: torch.relu(x) @ w.t()), x,
                                  torch.randn(48, 32)))
    assert (knobs["DB"], knobs["ROWS"]) == (1, 1), knobs
    (knobs,) = matmul_knobs(check(Fn(lambda x, w: x @ w.t()), x, torch.randn(48, 32)))
    assert (knobs["VEC"], knobs["DB"], knobs["ROWS"]) == (4, 2, 0), knobs
    conv = torch.nn.Conv2d(8, 32, 3, padding=1)
    for module in (conv, torch.nn.Sequential(torch.nn.ReLU(), conv)):
        (knobs,) = matmul_knobs(check(module, torch.randn(2, 8, 12, 12)))
        assert knobs["DB"] == 2, knobs


@pytest.mark.slow
def test_rows_2_stages_only_a_along_its_rows():
    """ROWS 1 stages every operand read along K along its rows (four scalar stores a
    load); ROWS 2 only A: a linear's activations, not its weight."""
    module = Fn(lambda x, w: x @ w.t())
    inputs = [torch.randn(64, 32), torch.randn(64, 32)]
    sources = {}
    for rows in (0, 1, 2):
        knobs = {**kernels.matmul_knobs(64, 64), "ROWS": rows}
        compiled = kernelwright.compile(module, inputs,
                                        choose=lambda r, k=knobs: k if r.kind == "matmul" else None)
        torch.testing.assert_close(compiled(*inputs), inputs[0] @ inputs[1].t(),
                                   atol=1e-4, rtol=1e-4)
        (sources[rows],) = [k.source for k in compiled.plan.kernels if "matmul" in k.name]
    staged = {rows: ("][la0] = " in src, "][lb0] = " in src) for rows, src in sources.items()}
    assert staged == {0: (False, False), 1: (True, True), 2: (True, False)}, staged


@pytest.mark.slow
@pytest.mark.parametrize("group", [1, 3, 8])
def test_grouped_tile_order_covers_every_tile(group):
    """GROUP > 0 walks bands of GROUP tile rows column by column: every tile is still
    computed exactly once, with a last band shorter than the others (5 tile rows of
    64 x 64 tiles in bands of 3), a band taller than the grid (8) and bands of one row,
    batched; against PyTorch with poisoned outputs."""
    nb, m, n, k = 2, 300, 200, 40
    torch.manual_seed(0)
    inputs = [torch.randn(nb, m, k), torch.randn(nb, k, n)]
    module = Fn(torch.bmm).eval()
    want = module(*inputs)
    compiled, requests = _compile_with_requests(module, inputs)
    (request,) = requests
    knobs = {**request.default.knobs, "GROUP": group}
    assert (knobs["BM"], knobs["BN"]) == (64, 64), knobs
    plan = _retarget(compiled.plan, requests, knobs)
    (src,) = [kern.source for kern in plan.kernels if kern.key == str(request.key)]
    assert "let first = " in src and ("min(5 - first" in src) == (group == 3)
    got = CompiledModule(plan)(*inputs, poison=True)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
