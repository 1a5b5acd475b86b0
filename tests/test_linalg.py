"""Matmul family, convolution and pooling against PyTorch eager."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check


@pytest.mark.parametrize("m,k,n", [(1, 7, 5), (17, 33, 65), (70, 16, 3), (64, 64, 64), (5, 200, 9)])
def test_mm(m, k, n):
    check(Fn(torch.mm), torch.randn(m, k), torch.randn(k, n))


def test_transposed_operands_and_batched():
    a, b = torch.randn(19, 11), torch.randn(23, 11)
    check(Fn(lambda a, b: (a @ b.t(), a.t() @ a)), a, b)
    x, y = torch.randn(3, 9, 13), torch.randn(3, 13, 6)
    check(Fn(lambda x, y: (torch.bmm(x, y), torch.matmul(x, y.transpose(1, 2).transpose(1, 2)))),
          x, y)


def test_matmul_broadcast_batch_and_vectors():
    x, w = torch.randn(2, 3, 5, 7), torch.randn(7, 4)
    check(Fn(lambda x, w: (x @ w, x @ w[:, 0], w[:, 0] @ w)), x, w)


def test_linear_bias_activation_is_one_kernel():
    m = torch.nn.Sequential(torch.nn.Linear(21, 35), torch.nn.GELU())
    compiled = check(m, torch.randn(6, 21))
    assert len(compiled.plan.kernels) == 1, compiled.plan.summary()


@pytest.mark.parametrize("cfg", [
    dict(cin=3, cout=5, k=3, stride=1, padding=0, dilation=1, groups=1, bias=True),
    dict(cin=4, cout=6, k=3, stride=2, padding=1, dilation=1, groups=1, bias=False),
    dict(cin=4, cout=4, k=3, stride=1, padding=2, dilation=2, groups=1, bias=True),
    dict(cin=6, cout=4, k=(1, 3), stride=(1, 2), padding=(0, 1), dilation=1, groups=2, bias=True),
    dict(cin=5, cout=5, k=3, stride=1, padding=1, dilation=1, groups=5, bias=True),
    dict(cin=7, cout=3, k=1, stride=1, padding=0, dilation=1, groups=1, bias=True),
])
def test_conv2d(cfg):
    conv = torch.nn.Conv2d(cfg["cin"], cfg["cout"], cfg["k"], stride=cfg["stride"],
                           padding=cfg["padding"], dilation=cfg["dilation"], groups=cfg["groups"],
                           bias=cfg["bias"])
    check(conv, torch.randn(2, cfg["cin"], 11, 9))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, ceil_mode=True),
                                dict(kernel_size=(2, 3), stride=1, dilation=2)])
def test_max_pool(kw):
    check(Fn(lambda x: F.max_pool2d(x, **kw)), torch.randn(2, 3, 11, 10))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
                                dict(kernel_size=3, stride=2, ceil_mode=True),
                                dict(kernel_size=2, divisor_override=3)])
def test_avg_pool(kw):
    check(Fn(lambda x: F.avg_pool2d(x, **kw)), torch.randn(2, 3, 11, 10))
