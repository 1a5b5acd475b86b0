"""Pooling against PyTorch eager: max (with indices), average and adaptive pooling in
1, 2 and 3 dims with stride, padding, dilation, ceil_mode, count_include_pad and
divisor_override, batch > 1, unbatched inputs and sizes no tile divides."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check

import kernelwright
from kernelwright.ir.ir import CompileError, GraphBuilder
from kernelwright.lower import pool as pool_ops

MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
ADAPTIVE_AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
ADAPTIVE_MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}
SIZE = {1: (2, 3, 13), 2: (2, 3, 11, 10), 3: (2, 2, 7, 6, 5)}


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, ceil_mode=True),
                                dict(kernel_size=(2, 3), stride=1, dilation=2),
                                dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1),
                                     dilation=(2, 1), ceil_mode=True)])
def test_max_pool2d(kw):
    check(Fn(lambda x: F.max_pool2d(x, **kw)), torch.randn(*SIZE[2]))


@pytest.mark.slow
@pytest.mark.parametrize("nd,kw", [
    (1, dict(kernel_size=3)),
    (1, dict(kernel_size=4, stride=3, padding=2, dilation=2, ceil_mode=True)),
    (3, dict(kernel_size=2)),
    (3, dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=1, ceil_mode=True)),
    (3, dict(kernel_size=2, stride=1, dilation=(2, 1, 2))),
])
def test_max_pool_1d_3d(nd, kw):
    check(Fn(lambda x: MAX[nd](x, **kw)), torch.randn(*SIZE[nd]))


@pytest.mark.slow
@pytest.mark.parametrize("nd,kw", [
    (1, dict(kernel_size=3, stride=2, padding=1, dilation=2)),
    (2, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (2, dict(kernel_size=(2, 3), dilation=(2, 1))),
    (3, dict(kernel_size=3, stride=2, padding=1)),
])
def test_max_pool_indices(nd, kw):
    x = torch.randn(*SIZE[nd])
    check(Fn(lambda x: MAX[nd](x, return_indices=True, **kw)), x)
    # ties (relu's zeros): PyTorch keeps the first maximum in window order
    check(Fn(lambda x: MAX[nd](torch.relu(x - 1.0), return_indices=True, **kw)[1]), x)


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
                                dict(kernel_size=3, stride=2, ceil_mode=True),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                     count_include_pad=False),
                                dict(kernel_size=2, divisor_override=3),
                                dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0),
                                     divisor_override=5)])
def test_avg_pool2d(kw):
    check(Fn(lambda x: F.avg_pool2d(x, **kw)), torch.randn(*SIZE[2]))


@pytest.mark.slow
@pytest.mark.parametrize("nd,kw", [
    (1, dict(kernel_size=3)),
    (1, dict(kernel_size=4, stride=3, padding=2, ceil_mode=True, count_include_pad=False)),
    (3, dict(kernel_size=2)),
    (3, dict(kernel_size=3, stride=2, padding=1)),
    (3, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    (3, dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0), ceil_mode=True)),
    (3, dict(kernel_size=2, divisor_override=7)),
])
def test_avg_pool_1d_3d(nd, kw):
    check(Fn(lambda x: AVG[nd](x, **kw)), torch.randn(*SIZE[nd]))


@pytest.mark.slow
@pytest.mark.parametrize("nd,size", [(1, 4), (1, 5), (1, 13), (2, (4, 3)), (2, 7), (2, (1, 6)),
                                     (3, (3, 4, 2)), (3, 1), (2, 1), (2, 12)])
def test_adaptive_avg_pool(nd, size):
    check(Fn(lambda x: ADAPTIVE_AVG[nd](x, size)), torch.randn(*SIZE[nd]))


@pytest.mark.slow
@pytest.mark.parametrize("nd,size", [(1, 5), (2, (4, 3)), (2, 1), (2, 12), (3, (3, 4, 2)), (3, 1)])
def test_adaptive_max_pool(nd, size):
    x = torch.randn(*SIZE[nd])
    check(Fn(lambda x: ADAPTIVE_MAX[nd](x, size)), x)
    check(Fn(lambda x: ADAPTIVE_MAX[nd](x, size, return_indices=True)), x)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_unbatched_input(nd):
    x = torch.randn(*SIZE[nd][1:])
    check(Fn(lambda x: (*MAX[nd](x, 2, return_indices=True), AVG[nd](x, 3, 1, 1),
                        ADAPTIVE_AVG[nd](x, 3), ADAPTIVE_MAX[nd](x, 2))), x)


@pytest.mark.slow
def test_an_average_of_a_convolution_is_one_convolution():
    """avg_pool(conv(x, w) + bias) with a stride-1 convolution and an unpadded pool is
    one convolution by the averaged shifted weights at the pool's stride (lower/conv.
    pooled_convolution): no pool kernel, the same values, in 2 and 3 dims, with groups,
    a divisor_override and an exact ceil_mode; a ReLU between them, a padded pool, a
    1 x 1 convolution (no fewer multiplications) or a strided one keep the pool."""
    def names(compiled):
        return [k.name for k in compiled.plan.kernels]

    torch.manual_seed(5)
    x, w, b = torch.randn(2, 6, 14, 12), torch.randn(20, 6, 3, 3), torch.randn(20)
    x3, w3 = torch.randn(2, 4, 6, 7, 8), torch.randn(17, 4, 3, 3, 3)
    cases = [
        (lambda x, w, b: torch.sigmoid(F.avg_pool2d(F.conv2d(x, w, b, padding=1), 2)),
         (x, w, b)),
        (lambda x, w: F.avg_pool2d(F.conv2d(x, w, padding=(0, 1)), (3, 2), stride=(2, 3)),
         (x, w)),
        (lambda x, w: F.avg_pool2d(F.conv2d(x, w[:4, :3], groups=2), 2, ceil_mode=True,
                                   divisor_override=3), (x, w)),
        (lambda x, w: F.avg_pool3d(F.conv3d(x, w, padding=1), 2), (x3, w3)),
    ]
    for fn, args in cases:
        compiled = check(Fn(fn), *args, atol=1e-4)
        assert not any("pool" in n for n in names(compiled)), names(compiled)
        assert sum("matmul" in n or "conv" in n for n in names(compiled)) == 1, names(compiled)
    kept = [lambda x, w: F.avg_pool2d(torch.relu(F.conv2d(x, w)), 2),
            lambda x, w: F.avg_pool2d(F.conv2d(x, w), 2, padding=1),
            lambda x, w: F.avg_pool2d(F.conv2d(x, w[:, :, :1, :1]), 2),
            lambda x, w: F.avg_pool2d(F.conv2d(x, w, stride=2), 2)]
    for fn in kept:
        assert any("pool" in n for n in names(check(Fn(fn), x, w, atol=1e-4)))
    # the convolution read after the pool (returned too, with or without its bias):
    # GraphBuilder.settle puts the plain pool back, one convolution in all
    for fn, args in [(lambda x, w: (F.avg_pool2d(c := F.conv2d(x, w), 2), c), (x, w)),
                     (lambda x, w, b: (F.avg_pool2d(c := F.conv2d(x, w, b), 2), c * 2.0),
                      (x, w, b))]:
        got = names(check(Fn(fn), *args, atol=1e-4))
        assert any("pool" in n for n in got), got
        assert sum("matmul" in n or "conv" in n for n in got) == 1, got


def test_pool_fuses_prologue_and_epilogue():
    compiled = check(Fn(lambda x: torch.sigmoid(F.max_pool2d(torch.relu(x * 3.0), 3, 2) + 1.0)),
                     torch.randn(*SIZE[2]))
    assert len(compiled.plan.kernels) == 1, compiled.plan.summary()
    compiled = check(Fn(lambda x: F.avg_pool3d(x.transpose(2, 4), 2, padding=1) * 2.0),
                     torch.randn(*SIZE[3]))
    assert len(compiled.plan.kernels) == 1, compiled.plan.summary()


def test_max_pool_nan_and_infinite_windows():
    x = torch.randn(2, 1, 6, 6)
    x[0, 0, 1, 1] = x[0, 0, 4, 4] = x[0, 0, 4, 5] = float("nan")  # NaN wins, first or not
    x[1, 0, 1:5, 1:5] = float("-inf")  # windows of -inf: the first tap's index
    for f in (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
              lambda x: F.adaptive_max_pool2d(x, 4, return_indices=True)):
        got, expected = kernelwright.compile(Fn(f), [x])(x, poison=True), f(x)
        torch.testing.assert_close(got[0], expected[0], equal_nan=True)
        assert torch.equal(got[1], expected[1]), (got[1], expected[1])


def test_unused_indices_cost_nothing():
    compiled = check(Fn(lambda x: F.max_pool2d(x, 2, return_indices=True)[0]),
                     torch.randn(*SIZE[2]))
    assert len(compiled.plan.kernels) == 1, compiled.plan.summary()


def test_bad_configurations_raise():
    b = GraphBuilder()
    x = b.input((2, 3, 5, 5), "f32", "x")
    with pytest.raises(CompileError, match="empty"):
        b.pool(x, "max", [7, 7], [1, 1], [0, 0], [1, 1])
    with pytest.raises(CompileError, match="f32 only"):
        b.pool(b.input((2, 5), "i32", "xi"), "max", [2], [2], [0], [1])
    with pytest.raises(CompileError, match="pooling"):
        b.pool(x, "max", [2] * 4, [1] * 4, [0] * 4, [1] * 4)


# -- outputs per invocation (the OPT knob) and vec4 loads (VEC) --------------------------
def _forced(knobs: dict, f, x: torch.Tensor):
    """f compiled with the pool kernels' knobs forced (the knob chooser hook), checked
    against PyTorch (NaN where PyTorch has NaN, indices exactly); asserts that every pool
    kernel took the knobs (a refused setting falls back to the defaults silently)."""
    compiled = check(Fn(f), x, equal_nan=True, choose=lambda r: knobs if r.kind == "pool" else None)
    used = [k.knobs for k in compiled.plan.kernels if k.key.startswith("pool ")]
    assert used and all(u == knobs for u in used), used
    return compiled


# OPT > 1 is one code path (pool.wgsl's unrolled columns, _pool_columns), OPT only its
# count: OPT 2 and 8 give output rows of partial last groups and of whole ones, and rows
# narrower than one group (8); OPT 4 would repeat them (it is run with VEC 4 below).
OPT_CASES = [  # output widths 3 to 10: few are multiples of OPT
    (2, dict(kernel_size=3, stride=2, padding=1)),
    (2, dict(kernel_size=3, stride=1, padding=1)),
    (2, dict(kernel_size=(2, 3), stride=(1, 2), dilation=(1, 2), padding=(0, 1))),
    (2, dict(kernel_size=2, stride=3, ceil_mode=True)),  # windows apart: columns skipped
    (2, dict(kernel_size=(3, 4), stride=(2, 3), padding=(1, 2), ceil_mode=True)),
    (1, dict(kernel_size=4, stride=3, padding=2, dilation=2, ceil_mode=True)),
    (3, dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=1, ceil_mode=True)),
    (3, dict(kernel_size=2, stride=1, dilation=(2, 1, 2))),
]


@pytest.mark.slow
@pytest.mark.parametrize("opt", [1, 2, 8])
@pytest.mark.parametrize("nd,kw", OPT_CASES)
def test_max_pool_outputs_per_invocation(opt, nd, kw):
    """Max and its indices with OPT outputs per invocation; NaNs (a NaN wins, the last
    one's index as PyTorch) and ties (the first maximum) in columns that neighbouring
    outputs share."""
    x = torch.randn(*SIZE[nd])
    x[0, 1, ..., 3] = float("nan")  # a column, and scattered NaNs
    x.view(-1)[torch.arange(5, x.numel(), 17)] = float("nan")
    x[1, -1] = x[1, -1].round()  # ties within windows
    _forced({"WG": 64, "OPT": opt, "VEC": 1},
            lambda x: MAX[nd](x, return_indices=True, **kw), x)


@pytest.mark.slow
@pytest.mark.parametrize("opt", [2, 8])
@pytest.mark.parametrize("nd,kw", [
    (2, dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    (2, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (2, dict(kernel_size=(3, 2), stride=1, padding=(1, 1), divisor_override=5)),
    (1, dict(kernel_size=4, stride=3, padding=2, ceil_mode=True, count_include_pad=False)),
    (3, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (3, dict(kernel_size=3, stride=(1, 2, 1), padding=1, count_include_pad=False)),
])
def test_avg_pool_outputs_per_invocation(opt, nd, kw):
    _forced({"WG": 64, "OPT": opt, "VEC": 1}, lambda x: AVG[nd](x, **kw), torch.randn(*SIZE[nd]))


@pytest.mark.slow
@pytest.mark.parametrize("opt", [2, 4])
@pytest.mark.parametrize("nd,size", [(1, 13), (2, (4, 5)), (2, (3, 2)), (3, (2, 3, 5))])
def test_adaptive_pool_outputs_per_invocation(opt, nd, size):
    """Adaptive pooling whose output size divides the input's along the last dim has
    static windows there (13 -> 13, 10 -> 5 and 2, 5 -> 5): OPT > 1 applies."""
    x = torch.randn(*SIZE[nd])
    knobs = {"WG": 64, "OPT": opt, "VEC": 1}
    _forced(knobs, lambda x: ADAPTIVE_MAX[nd](x, size, return_indices=True), x)
    _forced(knobs, lambda x: ADAPTIVE_AVG[nd](x, size), x)


def test_default_takes_four_outputs_in_vec4_loads_where_rows_allow():
    """Rows of whole vec4s and a stride whose 4 outputs span whole vec4s: 4 outputs per
    invocation, vec4 loads (the H200's fastest max pool); else one output each."""
    cases = {(2, 3, 8, 16): (3, 2, 1, 4), (2, 3, 9, 12): (2, 1, 0, 4),
             (2, 3, 8, 18): (3, 2, 1, 1), (2, 3, 8, 8): (3, 3, 0, 1)}  # 18: rows; 8: 2 outputs
    for shape, (k, stride, pad, opt) in cases.items():
        compiled = check(Fn(lambda x, k=k, s=stride, p=pad: F.max_pool2d(x, k, s, p)),
                         torch.randn(*shape))
        (knobs,) = [kern.knobs for kern in compiled.plan.kernels]
        assert (knobs["OPT"], knobs["VEC"]) == (opt, opt), (shape, knobs)


def test_varying_adaptive_windows_take_one_output_per_invocation():
    """10 -> 4 columns: windows of 3 and 4 taps, not a static union. The space has OPT 1
    only and a forced OPT 2 is refused (the compile keeps the default knobs)."""
    x = torch.randn(*SIZE[2])
    requests = []
    compiled = check(Fn(lambda x: F.adaptive_avg_pool2d(x, (3, 4))), x,
                     choose=lambda r: (requests.append(r), {"WG": 64, "OPT": 2, "VEC": 1})[1]
                                 if r.kind == "pool" else None)
    assert {k["OPT"] for k in requests[0].space} == {1}
    assert [k.knobs for k in compiled.plan.kernels] == [{"WG": 256, "OPT": 1, "VEC": 1}]
    with pytest.raises(CompileError, match="OPT > 1"):
        requests[0].generate({"OPT": 2})


VEC_CASES = [  # (pooling, its stride along the last dim, loaded through a vec4 view)
    (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), 2, True),
    (lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), 2, True),
    (lambda x: F.max_pool2d(x[:, :, 1:], (2, 3), 2, (1, 1), dilation=(1, 2)), 2, True),
    (lambda x: F.max_pool2d(torch.relu(x) * 2.0, 3, 2, 1), 2, False),  # computed
    (lambda x: F.avg_pool2d(x.transpose(2, 3), 2, 2, 1), 2, False),  # strided
    (lambda x: F.max_pool2d(x, (3, 4), 1, (1, 2), return_indices=True), 1, True),
    (lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True), 4, True),
]


@pytest.mark.slow
@pytest.mark.parametrize("opt,case", [(opt, i) for i, (_, s, _) in enumerate(VEC_CASES)
                                      for opt in (2, 4, 8) if opt * s % 4 == 0])
def test_vec4_loads(opt, case):
    """VEC 4 (the union's columns 16 bytes at a time) where OPT * stride is a multiple of
    4, against PyTorch, with a NaN: through a vec4 view of the input, and through
    load_x4 where the input is computed or strided."""
    x = torch.randn(2, 3, 8, 16)
    x[1, 1, 2, 5] = float("nan")
    f, _, view = VEC_CASES[case]
    compiled = _forced({"WG": 64, "OPT": opt, "VEC": 4}, f, x)
    for source in [k.source for k in compiled.plan.kernels if k.key.startswith("pool ")]:
        assert ("v4[" in source, "load_x4(" in source) == (view, not view), source


# -- adaptive pooling of long windows: a reduction over the windows (lower/pool.adaptive) --
def _kinds(compiled) -> list[str]:
    return [k.key.split()[0] for k in compiled.plan.kernels]


def _long_windows_input(shape) -> torch.Tensor:
    """randn with ties (a run of equal maxima, +0 and -0), several NaNs in one window (the
    last one's index, as PyTorch) and a window of -inf only (the first tap's index)."""
    x = torch.randn(*shape)
    x[0, 0, ..., 2:5] = 7.0  # ties: the first maximum
    x[0, 1] = -x[0, 1].abs()
    x[0, 1, ..., 3], x[0, 1, ..., 6] = 0.0, -0.0  # 0 ties -0: the first
    x[0, 1, ..., 0] = -0.0
    x[1, 0, ..., 1], x[1, 0, ..., 4], x[1, 0, ..., 5] = (float("nan"),) * 3
    x[1, 1, ..., -1] = float("nan")  # in the last window only
    x[-1, -1] = float("-inf")
    return x


LONG_CASES = [  # (input shape, output size); the threshold is 8 taps
    ((2, 3, 50), 3),  # 50 -> 3: windows of 17 and 18 taps, overlapping
    ((2, 3, 47), 5),  # 10 and 11 taps
    ((2, 3, 50), 7),  # 8 taps each, starts 7 apart: a gather, no tap masked
    ((2, 3, 50), 5),  # 10 taps each: a reshape
    ((2, 3, 50), 1),
    ((2, 3, 5, 47), (5, 5)),  # 2-d, one tap along H
    ((2, 3, 10, 47), (4, 5)),  # both pooled: windows of 3 or 4 x 10 or 11 taps
    ((2, 3, 6, 40), (2, 5)),  # both pooled, static windows
    ((2, 3, 9, 33), (1, 3)),
    ((2, 2, 5, 4, 47), (3, 4, 5)),  # 3-d: 5 -> 3 takes 2 or 3 taps
]


@pytest.mark.slow
@pytest.mark.parametrize("shape,size", LONG_CASES)
def test_long_adaptive_windows_reduce(monkeypatch, shape, size):
    """Windows of at least ADAPTIVE_REDUCE_TAPS along the last dim: max (values and
    indices: the flat index within the pooled dims), avg, and max alone (no indices: one
    kernel), against PyTorch; one reduce kernel per result, no pool kernel."""
    monkeypatch.setattr(pool_ops, "ADAPTIVE_REDUCE_TAPS", 8)
    nd = len(shape) - 2
    x = _long_windows_input(shape)
    compiled = check(Fn(lambda x: ADAPTIVE_MAX[nd](x, size, return_indices=True)), x,
                     equal_nan=True)
    assert sorted(_kinds(compiled)) == ["reduce", "reduce"], compiled.plan.summary()
    compiled = check(Fn(lambda x: ADAPTIVE_MAX[nd](x, size)), x, equal_nan=True)
    assert _kinds(compiled) == ["reduce"], compiled.plan.summary()
    compiled = check(Fn(lambda x: ADAPTIVE_AVG[nd](x, size)), torch.randn(*shape))
    assert _kinds(compiled) == ["reduce"], compiled.plan.summary()


def test_long_adaptive_windows_unbatched_and_fused(monkeypatch):
    monkeypatch.setattr(pool_ops, "ADAPTIVE_REDUCE_TAPS", 8)
    x = _long_windows_input((2, 3, 47))[1]  # [3, 47]: no batch dim
    check(Fn(lambda x: F.adaptive_max_pool1d(x, 5, return_indices=True)), x, equal_nan=True)
    compiled = check(Fn(lambda x: F.adaptive_avg_pool1d(torch.relu(x) * 2.0, 5) + 1.0),
                     torch.randn(2, 3, 47))
    assert _kinds(compiled) == ["reduce"], compiled.plan.summary()


@pytest.mark.slow
@pytest.mark.parametrize("length,size,kind", [
    (20, 2, "reduce"), (18, 2, "pool"),  # windows of 10 and 9 taps
    (19, 2, "reduce"), (17, 2, "pool"),  # [0, 10) and [9, 19); [0, 9) and [8, 17)
    (29, 3, "reduce"), (27, 3, "pool"),  # 10, 11 and 10 taps; 9 each
    (21, 4, "pool"), (10, 1, "reduce"), (9, 1, "pool"),  # 21 -> 4: 6 taps at most
])
def test_adaptive_reduce_threshold(monkeypatch, length, size, kind):
    """The rule: the widest window along the last dim against the threshold (10 here),
    either side of it, against PyTorch."""
    monkeypatch.setattr(pool_ops, "ADAPTIVE_REDUCE_TAPS", 10)
    x = _long_windows_input((2, 3, length))
    fs = [lambda x: F.adaptive_max_pool1d(x, size, return_indices=True)]
    if size > 1:  # (adaptive average pooling to 1 arrives as aten.mean)
        fs.append(lambda x: F.adaptive_avg_pool1d(torch.nan_to_num(x, 0.0), size))
    for f in fs:
        compiled = check(Fn(f), x, equal_nan=True)
        kinds = set(_kinds(compiled))  # (the 1-d max pool kernel's input is copied first)
        other = {"pool": "reduce", "reduce": "pool"}[kind]
        assert kind in kinds and other not in kinds, compiled.plan.summary()


def test_adaptive_reduce_default_threshold():
    """64 taps by default: 200 -> 3 (windows of 67) reduces, 126 -> 2 (63) pools; the
    suite's level1/081 at a small batch (8191 -> 12) is one reduce kernel."""
    assert pool_ops.ADAPTIVE_REDUCE_TAPS == 64
    for length, size, kind in [(200, 3, "reduce"), (126, 2, "pool")]:
        compiled = check(Fn(lambda x, s=size: F.adaptive_max_pool1d(x, s)),
                         torch.randn(2, 3, length))
        assert _kinds(compiled) == [kind], compiled.plan.summary()
    x = torch.randn(2, 3, 8191)
    x[1, 2, 5000] = float("nan")
    compiled = check(torch.nn.AdaptiveMaxPool1d(12), x, equal_nan=True)
    assert _kinds(compiled) == ["reduce"], compiled.plan.summary()
    check(torch.nn.AdaptiveMaxPool1d(12, return_indices=True), x, equal_nan=True)
