"""Pooling against PyTorch eager: max (with indices), average and adaptive pooling in
1, 2 and 3 dims with stride, padding, dilation, ceil_mode, count_include_pad and
divisor_override, batch > 1, unbatched inputs and sizes no tile divides."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check

import kernelwright
from kernelwright.ir import CompileError, GraphBuilder

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


@pytest.mark.parametrize("nd,kw", [
    (1, dict(kernel_size=3)),
    (1, dict(kernel_size=4, stride=3, padding=2, dilation=2, ceil_mode=True)),
    (3, dict(kernel_size=2)),
    (3, dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=1, ceil_mode=True)),
    (3, dict(kernel_size=2, stride=1, dilation=(2, 1, 2))),
])
def test_max_pool_1d_3d(nd, kw):
    check(Fn(lambda x: MAX[nd](x, **kw)), torch.randn(*SIZE[nd]))


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


@pytest.mark.parametrize("nd,size", [(1, 4), (1, 5), (1, 13), (2, (4, 3)), (2, 7), (2, (1, 6)),
                                     (3, (3, 4, 2)), (3, 1), (2, 1), (2, 12)])
def test_adaptive_avg_pool(nd, size):
    check(Fn(lambda x: ADAPTIVE_AVG[nd](x, size)), torch.randn(*SIZE[nd]))


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
