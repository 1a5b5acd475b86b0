"""Reductions, softmax and log_softmax against PyTorch eager."""

import pytest
import torch
from conftest import Fn, check

import kernelwright


@pytest.mark.slow
@pytest.mark.parametrize("shape,dims", [
    ((7, 33), (1,)), ((7, 33), (0,)), ((5, 300), (1,)), ((3, 4, 5), (0, 2)), ((3, 4, 5), ()),
    ((2, 3, 17, 9), (2, 3)), ((1100, 3), (1,))])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_max_min(shape, dims, keepdim):
    x = torch.randn(*shape)
    d = list(dims) if dims else list(range(len(shape)))
    check(Fn(lambda x: (x.sum(d, keepdim=keepdim), x.mean(d, keepdim=keepdim),
                        x.amax(d, keepdim=keepdim), x.amin(d, keepdim=keepdim))), x)


def test_argmax_argmin_max_dim():
    x = torch.randn(6, 41)
    check(Fn(lambda x: (x.argmax(1), x.argmin(0), x.max(1).values, x.max(1).indices,
                        x.argmax())), x)


def test_prod_var_std():
    x = torch.rand(4, 13) + 0.5
    check(Fn(lambda x: (x.prod(1), x.var(1), x.std(0), x.var(1, unbiased=False))), x)


@pytest.mark.slow
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(dim):
    x = torch.randn(9, 21, 5) * 4
    check(Fn(lambda x: (torch.softmax(x, dim), torch.log_softmax(x, dim))), x)


def test_softmax_long_rows():
    x = torch.randn(3, 2000)
    check(Fn(lambda x: torch.softmax(x, -1)), x)


def test_softmax_recomputes_exp_instead_of_storing_it():
    # rows too long for one row kernel (schedule.ROW_FUSION_MAX): max, sum of
    # exp(x - max), and exp(x - max) / sum: three kernels, no stored exp
    from kernelwright.schedule.schedule import ROW_FUSION_MAX

    compiled = check(Fn(lambda x: torch.softmax(x, -1)), torch.randn(2, ROW_FUSION_MAX + 5))
    assert len(compiled.plan.kernels) == 3, compiled.plan.summary()


@pytest.mark.slow
def test_nan_propagates_through_max_min_and_their_indices():
    # As PyTorch: a NaN is both the max and the min, and the first NaN (or the first of
    # equal values) gives the index; rows long enough for the workgroup tree ("row")
    # and short ones folded by one invocation ("thread").
    nan = float("nan")
    for rows, cols in ((6, 300), (1100, 5)):
        x = torch.randn(rows, cols)
        x[0, 7 % cols] = x[0, 3] = x[2, cols - 1] = x[3, :] = nan
        x[4, :] = 1.0  # all equal: index 0
        check(Fn(lambda x: (x.amax(1), x.amin(1), x.max(1), x.min(1), x.argmax(1), x.argmin(1),
                            x.max(), x.amin(0), torch.max(x, 0).indices)), x, equal_nan=True)


def test_nan_propagates_through_elementwise_max_min():
    # torch.max(a, b) / torch.min(a, b) are aten.maximum / minimum: NaN if either is NaN,
    # while fmax / fmin take the other operand.
    nan = float("nan")
    a = torch.tensor([[nan, 1.0, -2.0, 3.0, nan], [0.5, nan, 2.0, -1.0, 4.0]])
    b = torch.tensor([[0.0, nan, 0.5, 1.0, nan], [1.5, 2.0, nan, -3.0, 4.0]])
    check(Fn(lambda a, b: (torch.max(a, b), torch.min(a, b), torch.maximum(a, 0.25 * b),
                           torch.fmax(a, b), torch.fmin(a, b))), a, b, equal_nan=True)


@pytest.mark.slow
def test_few_long_rows_reduce_in_two_steps():
    """A few long rows are split (ir.reduce_split): partials first, then the partials;
    a row length with no suitable divisor (a prime) stays one step."""
    import kernelwright as kw
    from kernelwright.ir.ir import reduce_split

    assert reduce_split(1, 1 << 28) == 2048 and reduce_split(4, 1 << 20) == 256
    assert reduce_split(1, 65537) == 1 and reduce_split(1024, 1 << 20) == 1
    x, y = torch.randn(3, 8192 * 3), torch.randn(2, 40000) * 0.01 + 1
    fn = Fn(lambda x, y: (torch.nn.functional.mse_loss(x[0], x[1]), x.sum(), x.amax(1),
                          x.amin(), y.prod(1), x.mean(0)))
    check(fn, x, y)
    kernels = [k.name for k in kw.compile(fn, [x, y]).plan.kernels]
    assert len(kernels) == 11  # five reductions in two steps, and mean(0) in one
    assert kernels[:2] == ["slice+sub+pow+reduce", "reduce+mul"]  # the loss's 1/N at the end
    one = kw.compile(Fn(lambda x: x.sum()), [torch.randn(65537)])
    assert [k.name for k in one.plan.kernels] == ["reduce"]


def test_column_reductions_split_into_pieces_side_by_side(monkeypatch):
    """A reduction over a leading dim with few rows (ir.COL_SPLIT_ROWS) is split too, its
    pieces laid side by side so that both steps read neighbouring rows together ("col"
    order); NaN still propagates through the split max, and a row length with no
    divisor into pieces of COL_MIN_PIECE stays one step."""
    import kernelwright as kw
    from kernelwright.ir import ir

    monkeypatch.setattr(ir, "COL_SPLIT_MIN", 1)  # small enough for the software driver
    assert ir.reduce_split(96, 16384, col=True) == 4 and ir.reduce_split(96, 9001, col=True) == 1
    assert ir.reduce_split(1 << 14, 16384, col=True) == 1
    monkeypatch.setattr(ir, "COL_MIN_PIECE", 1024)
    x = torch.randn(4096, 96)
    x[1000, 5] = x[3000, 70] = float("nan")
    fn = Fn(lambda x: (x.amax(0), x.sum(0), x.amin(0), (x.abs() + 0.5).prod(0)))
    compiled = check(fn, x, equal_nan=True)
    plan = compiled.plan.kernels
    assert len(plan) == 8 and all(k.knobs["ORDER"] == "col" for k in plan), plan
    first = plan[0].knobs  # 4 pieces of each of 96 rows, WG / TPR rows per workgroup
    assert plan[0].grid[0] * (first["WG"] // first["TPR"]) == 4 * 96
    odd = kw.compile(Fn(lambda x: x.amax(0)), [torch.randn(3001, 8)])
    assert [k.name for k in odd.plan.kernels] == ["reduce"]


def test_many_strided_rows_take_one_invocation_each():
    """A column reduction of COL_MANY_ROWS rows or more reduces each row in one invocation
    (TPR 1): 12 elements per row left one of four invocations idle at TPR 4."""
    from kernelwright.kernels.rows import COL_MANY_ROWS, rows_knobs

    assert rows_knobs(COL_MANY_ROWS, 12, col=True)["TPR"] == 1
    assert rows_knobs(COL_MANY_ROWS // 2, 12, col=True)["TPR"] == 4
    assert rows_knobs(16384, 8192, col=True)["TPR"] == 8
    x = torch.rand(3, 12, 5) + 0.5
    check(Fn(lambda x: x.prod(1)), x)


@pytest.mark.parametrize("x,bins,lo,hi", [
    (torch.randint(0, 4, (24,)).float(), 4, 0, 3),  # transformers' tokens per expert
    (torch.randn(3, 50), 7, -1.5, 2.0),  # outside the range: not counted
    (torch.tensor([0.0, 0.1, 0.2, 0.3, 0.7, 1.0, float("nan"), -0.1, 1.1]), 10, 0, 1),
    (torch.linspace(-1, 1, 1001), 13, -1, 1),  # elements on the edges
    (torch.randn(100), 10, 0, 0),  # the data's range
    (torch.full((5,), 2.0), 3, 0, 0),  # the data's range, widened
])
def test_histc(x, bins, lo, hi):
    got = check(Fn(lambda x: torch.histc(x, bins, lo, hi)), x)
    # one kernel counts; the data's range first takes its minimum and maximum
    assert len(got.plan.kernels) == (3 if lo == hi else 1), got.plan.summary()


def test_histc_refuses_an_empty_range():
    with pytest.raises(kernelwright.CompileError, match="max"):
        kernelwright.compile(Fn(lambda x: torch.histc(x, 4, 3, 1)), [torch.randn(8)])
