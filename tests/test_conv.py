"""Convolution against PyTorch eager: conv1d/2d/3d and conv_transpose1d/2d/3d with
stride, padding, output_padding, dilation, groups (depthwise, pointwise), asymmetric
kernels and inputs, with and without bias, batch > 1 and odd sizes."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check
from torch import nn

from kernelwright.ir import CompileError, GraphBuilder

CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
CONV_T = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}
SIZE = {1: (13,), 2: (11, 9), 3: (5, 7, 6)}  # no multiples of any tile


def _module(cls, cin, cout, k, **kw):
    torch.manual_seed(0)
    return cls(cin, cout, k, **kw)


@pytest.mark.parametrize("cfg", [
    dict(cin=3, cout=5, k=3),
    dict(cin=4, cout=6, k=3, stride=2, padding=1, bias=False),
    dict(cin=4, cout=4, k=3, padding=2, dilation=2),
    dict(cin=6, cout=4, k=(1, 3), stride=(1, 2), padding=(0, 1), groups=2),
    dict(cin=5, cout=5, k=3, padding=1, groups=5),  # depthwise
    dict(cin=4, cout=8, k=3, stride=2, groups=4, bias=False),  # depthwise, multiplier 2
    dict(cin=7, cout=3, k=1),  # pointwise
    dict(cin=3, cout=4, k=(2, 5), stride=(3, 1), padding=(1, 2), dilation=(2, 1)),
    dict(cin=2, cout=3, k=(4, 2), stride=(2, 3), padding=(0, 1), dilation=(1, 3), bias=False),
])
def test_conv2d(cfg):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.Conv2d, cin, cout, k, **cfg), torch.randn(2, cin, *SIZE[2]))


@pytest.mark.parametrize("cfg", [
    dict(cin=3, cout=5, k=3),
    dict(cin=4, cout=6, k=4, stride=3, padding=2, bias=False),
    dict(cin=4, cout=2, k=3, padding=3, dilation=3, groups=2),
    dict(cin=3, cout=3, k=5, padding=2, groups=3),  # depthwise
    dict(cin=5, cout=2, k=1, stride=2),  # pointwise, strided
])
def test_conv1d(cfg):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.Conv1d, cin, cout, k, **cfg), torch.randn(3, cin, *SIZE[1]))


@pytest.mark.parametrize("cfg", [
    dict(cin=2, cout=3, k=3),
    dict(cin=2, cout=4, k=(2, 3, 1), stride=(1, 2, 3), padding=(1, 0, 1), bias=False),
    dict(cin=4, cout=2, k=2, dilation=(2, 1, 2), padding=1, groups=2),
    dict(cin=3, cout=3, k=3, stride=2, padding=1, groups=3),  # depthwise
    dict(cin=3, cout=5, k=1),  # pointwise
])
def test_conv3d(cfg):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.Conv3d, cin, cout, k, **cfg), torch.randn(2, cin, *SIZE[3]))


@pytest.mark.parametrize("cfg", [
    dict(cin=3, cout=4, k=3),
    dict(cin=4, cout=3, k=3, stride=2, padding=1, output_padding=1),
    dict(cin=2, cout=3, k=(3, 4), stride=(2, 3), padding=(1, 0), output_padding=(0, 2),
         bias=False),
    dict(cin=4, cout=6, k=3, stride=2, dilation=2, groups=2, output_padding=1),  # gcd(S, DIL) 2
    dict(cin=3, cout=2, k=4, stride=3, dilation=2, padding=2),  # gcd 1, taps 3 apart
    dict(cin=2, cout=2, k=(5, 3), stride=(4, 2), dilation=(6, 3), padding=(3, 1)),  # gcd 2, 1
    dict(cin=4, cout=4, k=4, stride=2, padding=1, groups=4),  # depthwise upsampling
    dict(cin=5, cout=3, k=1, stride=2),  # pointwise, strided: holes in the output
])
def test_conv_transpose2d(cfg):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.ConvTranspose2d, cin, cout, k, **cfg), torch.randn(2, cin, 5, 4))


@pytest.mark.parametrize("cfg", [
    dict(cin=3, cout=2, k=3),
    dict(cin=2, cout=4, k=5, stride=3, padding=2, output_padding=2, bias=False),
    dict(cin=4, cout=2, k=3, stride=2, dilation=3, groups=2, output_padding=1),
])
def test_conv_transpose1d(cfg):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.ConvTranspose1d, cin, cout, k, **cfg), torch.randn(3, cin, 7))


@pytest.mark.parametrize("cfg", [
    dict(cin=2, cout=3, k=2, stride=2),
    dict(cin=2, cout=2, k=(3, 2, 3), stride=(1, 2, 2), padding=(1, 0, 1),
         output_padding=(0, 1, 1), dilation=(2, 1, 1), bias=False),
    dict(cin=4, cout=2, k=3, stride=2, padding=1, groups=2),
])
def test_conv_transpose3d(cfg):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.ConvTranspose3d, cin, cout, k, **cfg), torch.randn(2, cin, 3, 4, 3))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_unbatched_input(nd):
    check(_module(CONV[nd], 2, 3, 3, padding=1), torch.randn(2, *SIZE[nd]))
    check(_module(CONV_T[nd], 2, 3, 2, stride=2), torch.randn(2, *[3] * nd))


def test_string_padding():
    x = torch.randn(2, 3, 8, 7)
    check(_module(nn.Conv2d, 3, 4, (3, 4), padding="same", dilation=(1, 2)), x)
    check(_module(nn.Conv1d, 3, 2, 4, padding="valid"), torch.randn(1, 3, 9))


def test_conv_bias_activation_is_one_kernel():
    m = nn.Sequential(_module(nn.Conv2d, 3, 4, 3, padding=1), nn.ReLU())
    compiled = check(m, torch.randn(2, 3, 6, 5))
    assert len(compiled.plan.kernels) == 1, compiled.plan.summary()
    m = nn.Sequential(_module(nn.ConvTranspose1d, 3, 4, 3, stride=2), nn.Tanh())
    compiled = check(m, torch.randn(2, 3, 6))
    assert len(compiled.plan.kernels) == 1, compiled.plan.summary()


def test_prologue_fuses_into_the_loaders():
    w = torch.randn(4, 3, 3, 3)
    f = Fn(lambda x: F.conv2d(torch.sigmoid(x).transpose(2, 3) * 2.0, w, stride=2))
    compiled = check(f, torch.randn(2, 3, 9, 7))
    assert len(compiled.plan.kernels) == 1, compiled.plan.summary()


def test_weights_as_inputs():
    check(Fn(lambda x, w, b: F.conv3d(x, w, b, padding=1)), torch.randn(1, 2, 3, 4, 5),
          torch.randn(3, 2, 3, 3, 3), torch.randn(3))
    check(Fn(lambda x, w: F.conv_transpose2d(x, w, stride=2, groups=2)), torch.randn(2, 4, 3, 3),
          torch.randn(4, 1, 3, 3))


def test_bad_configurations_raise():
    b = GraphBuilder()
    x = b.input((1, 4, 5, 5), "f32", "x")
    with pytest.raises(CompileError, match="channels"):
        b.conv(x, b.input((2, 3, 3, 3), "f32", "w"), [1, 1], [0, 0], [1, 1], 1)
    with pytest.raises(CompileError, match="empty"):
        b.conv(x, b.input((2, 4, 7, 7), "f32", "w2"), [1, 1], [0, 0], [1, 1], 1)
    with pytest.raises(CompileError, match="spatial dims"):
        b.conv(b.input((1, 4, 2, 2, 2, 2), "f32", "x6"), b.input((1, 4, 1, 1, 1, 1), "f32", "w6"),
               [1] * 4, [0] * 4, [1] * 4, 1)
