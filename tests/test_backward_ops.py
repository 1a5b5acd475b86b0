"""Backward ATen ops (lower/backward.py) against torch.autograd on random inputs: each op
is compiled on its own (the ATen op called directly, as a joint graph calls it) and its
results compared with the gradients autograd computes for the forward op."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn

import kernelwright
from kernelwright.lower import conv as conv_ops

aten = torch.ops.aten
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _compiled(fn, *inputs):
    return kernelwright.compile(Fn(fn), list(inputs), progress=None)(*inputs, poison=True)


@pytest.mark.parametrize("lowering", ["gemm", "direct", "folded"])
@pytest.mark.parametrize("nd,cfg", [
    (2, dict(cin=3, cout=5, k=3)),
    (2, dict(cin=4, cout=6, k=3, stride=2, padding=1)),
    (2, dict(cin=4, cout=4, k=3, padding=2, dilation=2)),
    (2, dict(cin=6, cout=4, k=(1, 3), stride=(1, 2), padding=(0, 1), groups=2)),
    (2, dict(cin=5, cout=5, k=3, padding=1, groups=5)),  # depthwise
    (2, dict(cin=3, cout=4, k=(2, 5), stride=(3, 1), padding=(1, 2), dilation=(2, 1))),
    (1, dict(cin=3, cout=4, k=4, stride=3, padding=1)),
    (3, dict(cin=2, cout=3, k=2, stride=2, padding=1)),
])
def test_convolution_backward(nd, cfg, lowering, monkeypatch):
    if lowering == "direct":  # every convolution (the input's gradient included) direct
        monkeypatch.setattr(conv_ops, "GEMM_MIN_COUT", 1 << 30)
    if lowering == "folded":  # every one an implicit GEMM, the batch in its columns
        monkeypatch.setattr(conv_ops, "GEMM_MIN_COUT", 1)
        monkeypatch.setattr(conv_ops, "GEMM_MIN_K", 1)
        monkeypatch.setattr(conv_ops, "FOLD_MIN_PADDING", -1.0)
    cfg = dict(cfg)
    cin, cout, k, groups = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k"), cfg.get("groups", 1)
    k = (k,) * nd if isinstance(k, int) else k
    torch.manual_seed(0)
    x = torch.randn(3 if lowering == "folded" else 2, cin, *(11, 9, 7)[:nd],
                    requires_grad=True)
    w = torch.randn(cout, cin // groups, *k, requires_grad=True)
    bias = torch.randn(cout, requires_grad=True)
    y = CONV[nd](x, w, bias, **cfg)
    gy = torch.randn_like(y)
    want = torch.autograd.grad(y, (x, w, bias), gy)
    s, p, d = (cfg.get(n, dflt) for n, dflt in (("stride", 1), ("padding", 0),
                                                 ("dilation", 1)))
    s, p, d = ([v] * nd if isinstance(v, int) else list(v) for v in (s, p, d))

    def backward(gy, x, w):
        return aten.convolution_backward.default(gy, x, w, [cout], s, p, d, False, [0] * nd,
                                                 groups, [True, True, True])
    got = _compiled(backward, gy, x.detach(), w.detach())
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("nd,cfg", [
    (2, dict(cin=4, cout=6, k=3, stride=2, padding=1, output_padding=1)),
    (2, dict(cin=4, cout=6, k=3, stride=1, padding=1, groups=2)),
    (1, dict(cin=3, cout=2, k=4, stride=3, dilation=2)),
])
def test_transposed_convolution_backward(nd, cfg):
    cfg = dict(cfg)
    cin, cout, k, groups = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k"), cfg.get("groups", 1)
    torch.manual_seed(1)
    x = torch.randn(2, cin, *(7, 6)[:nd], requires_grad=True)
    w = torch.randn(cin, cout // groups, *(k,) * nd, requires_grad=True)
    y = CONV_T[nd](x, w, None, **cfg)
    gy = torch.randn_like(y)
    want = torch.autograd.grad(y, (x, w), gy)
    s, p, d, op = ([cfg.get(n, dflt)] * nd for n, dflt in (
        ("stride", 1), ("padding", 0), ("dilation", 1), ("output_padding", 0)))

    def backward(gy, x, w):
        gx, gw, _ = aten.convolution_backward.default(gy, x, w, None, s, p, d, True, op,
                                                      groups, [True, True, False])
        return gx, gw
    got = _compiled(backward, gy, x.detach(), w.detach())
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("nd,cfg", [
    (2, dict(kernel_size=2)),
    (2, dict(kernel_size=3, stride=2, padding=1)),  # overlapping windows
    (2, dict(kernel_size=(3, 2), stride=1, dilation=(1, 2))),
    (2, dict(kernel_size=3, stride=2, ceil_mode=True)),
    (3, dict(kernel_size=2, stride=(1, 2, 2), padding=(1, 0, 1))),
])
def test_max_pool_backward(nd, cfg):
    torch.manual_seed(2)
    x = torch.randn(2, 3, *(9, 8, 6)[:nd], requires_grad=True)
    pool = F.max_pool2d if nd == 2 else F.max_pool3d
    y, idx = pool(x, return_indices=True, **cfg)
    gy = torch.randn_like(y)
    (want,) = torch.autograd.grad(y, (x,), gy)
    k = cfg["kernel_size"]
    args = [cfg.get("stride", k), cfg.get("padding", 0), cfg.get("dilation", 1),
            cfg.get("ceil_mode", False)]
    op = aten.max_pool2d_with_indices_backward if nd == 2 else \
        aten.max_pool3d_with_indices_backward
    ks = [k] * nd if isinstance(k, int) else list(k)
    args = [[a] * nd if isinstance(a, int) and not isinstance(a, bool) else
            (list(a) if isinstance(a, tuple) else a) for a in args]

    def backward(gy, x, idx):
        return op.default(gy, x, ks, *args[:3], args[3], idx)
    got = _compiled(backward, gy, x.detach(), idx)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("nd,cfg", [
    (2, dict(kernel_size=2)),
    (2, dict(kernel_size=3, stride=2, padding=1)),
    (2, dict(kernel_size=3, stride=2, padding=1, count_include_pad=False, ceil_mode=True)),
    (2, dict(kernel_size=(3, 2), stride=(1, 2), divisor_override=5)),
    (3, dict(kernel_size=2, stride=(1, 2, 2), padding=(1, 0, 1))),
])
def test_avg_pool_backward(nd, cfg):
    torch.manual_seed(3)
    x = torch.randn(2, 3, *(9, 8, 6)[:nd], requires_grad=True)
    pool = F.avg_pool2d if nd == 2 else F.avg_pool3d
    y = pool(x, **cfg)
    gy = torch.randn_like(y)
    (want,) = torch.autograd.grad(y, (x,), gy)
    k = cfg["kernel_size"]
    ks = [k] * nd if isinstance(k, int) else list(k)
    s = cfg.get("stride", ks)
    s = [s] * nd if isinstance(s, int) else list(s)
    p = cfg.get("padding", 0)
    p = [p] * nd if isinstance(p, int) else list(p)
    op = aten.avg_pool2d_backward if nd == 2 else aten.avg_pool3d_backward

    def backward(gy, x):
        return op.default(gy, x, ks, s, p, cfg.get("ceil_mode", False),
                          cfg.get("count_include_pad", True), cfg.get("divisor_override"))
    torch.testing.assert_close(_compiled(backward, gy, x.detach()), want, atol=1e-5,
                               rtol=1e-5)


@pytest.mark.parametrize("nd,size,out", [(2, (9, 8), (4, 3)), (2, (7, 7), (7, 2)),
                                         (3, (5, 6, 4), (2, 4, 3))])
def test_adaptive_avg_pool_backward(nd, size, out):
    torch.manual_seed(4)
    x = torch.randn(2, 3, *size, requires_grad=True)
    pool = F.adaptive_avg_pool2d if nd == 2 else F.adaptive_avg_pool3d
    y = pool(x, out)
    gy = torch.randn_like(y)
    (want,) = torch.autograd.grad(y, (x,), gy)
    op = aten._adaptive_avg_pool2d_backward if nd == 2 else aten._adaptive_avg_pool3d_backward
    got = _compiled(lambda gy, x: op.default(gy, x), gy, x.detach())
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dim,start,end,step", [
    (2, 0, 4, 1), (2, 4, None, 1), (1, 1, 5, 2), (0, -2, None, 1), (2, 1, 7, 3)])
def test_slice_scatter(dim, start, end, step):
    """The backward of slice (a rotary embedding's halves), against autograd's; the
    positions written are index arithmetic, not a constant mask the plan holds."""
    torch.manual_seed(3)
    x = torch.randn(3, 5, 8, requires_grad=True)
    y = x.narrow(0, 0, 3)[(slice(None),) * dim + (slice(start, end, step),)]
    gy = torch.randn_like(y)
    (want,) = torch.autograd.grad(y, x, gy)
    base = torch.randn(3, 5, 8)

    def scatter(base, gy):
        return (aten.slice_scatter.default(torch.zeros_like(base), gy, dim, start, end, step),
                aten.slice_scatter.default(base, gy, dim, start, end, step))
    got, over = _compiled(scatter, base, gy)
    torch.testing.assert_close(got, want)
    assert not kernelwright.plan_module(Fn(scatter), [base, gy]).constants
    torch.testing.assert_close(over, aten.slice_scatter.default(base, gy, dim, start, end, step))


@pytest.mark.parametrize("dim,index", [(0, 1), (2, -1)])
def test_select_scatter(dim, index):
    torch.manual_seed(4)
    x = torch.randn(3, 4, 5, requires_grad=True)
    y = x.select(dim, index)
    gy = torch.randn_like(y)
    (want,) = torch.autograd.grad(y, x, gy)

    def scatter(base, gy):
        return aten.select_scatter.default(base, gy, dim, index)
    base = torch.randn(3, 4, 5)
    torch.testing.assert_close(_compiled(scatter, torch.zeros(3, 4, 5), gy), want)
    torch.testing.assert_close(_compiled(scatter, base, gy),
                               aten.select_scatter.default(base, gy, dim, index))
