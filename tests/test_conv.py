"""Convolution against PyTorch eager: conv1d/2d/3d and conv_transpose1d/2d/3d with
stride, padding, output_padding, dilation, groups (depthwise, pointwise), asymmetric
kernels and inputs, with and without bias, batch > 1 and odd sizes. Each family runs
through both lowerings (lower/conv.py): the implicit GEMM (window view + matmul) and the
direct kernel, forced by the `lowering` fixture; further tests check the default
choice, fusion, and the window view itself (F.unfold)."""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check
from torch import nn

from kernelwright.ir.ir import CompileError, GraphBuilder
from kernelwright.lower import conv as conv_ops


@pytest.fixture(params=["gemm", "direct"])
def lowering(request, monkeypatch):
    """Every convolution through one lowering: all implicit GEMM, or all direct."""
    gemm = request.param == "gemm"
    monkeypatch.setattr(conv_ops, "GEMM_MIN_COUT", 1 if gemm else 1 << 30)
    monkeypatch.setattr(conv_ops, "GEMM_MIN_K", 1 if gemm else 1 << 30)
    return request.param


def _kernels(compiled) -> list[str]:
    return [k.name for k in compiled.plan.kernels]

CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
CONV_T = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}
SIZE = {1: (13,), 2: (11, 9), 3: (5, 7, 6)}  # no multiples of any tile


def _module(cls, cin, cout, k, **kw):
    torch.manual_seed(0)
    return cls(cin, cout, k, **kw)


@pytest.mark.slow
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
def test_conv2d(cfg, lowering):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.Conv2d, cin, cout, k, **cfg), torch.randn(2, cin, *SIZE[2]))


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [
    dict(cin=3, cout=5, k=3),
    dict(cin=4, cout=6, k=4, stride=3, padding=2, bias=False),
    dict(cin=4, cout=2, k=3, padding=3, dilation=3, groups=2),
    dict(cin=3, cout=3, k=5, padding=2, groups=3),  # depthwise
    dict(cin=5, cout=2, k=1, stride=2),  # pointwise, strided
])
def test_conv1d(cfg, lowering):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.Conv1d, cin, cout, k, **cfg), torch.randn(3, cin, *SIZE[1]))


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [
    dict(cin=2, cout=3, k=3),
    dict(cin=2, cout=4, k=(2, 3, 1), stride=(1, 2, 3), padding=(1, 0, 1), bias=False),
    dict(cin=4, cout=2, k=2, dilation=(2, 1, 2), padding=1, groups=2),
    dict(cin=3, cout=3, k=3, stride=2, padding=1, groups=3),  # depthwise
    dict(cin=3, cout=5, k=1),  # pointwise
])
def test_conv3d(cfg, lowering):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.Conv3d, cin, cout, k, **cfg), torch.randn(2, cin, *SIZE[3]))


@pytest.mark.slow
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
def test_conv_transpose2d(cfg, lowering):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.ConvTranspose2d, cin, cout, k, **cfg), torch.randn(2, cin, 5, 4))


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [
    dict(cin=3, cout=2, k=3),
    dict(cin=2, cout=4, k=5, stride=3, padding=2, output_padding=2, bias=False),
    dict(cin=4, cout=2, k=3, stride=2, dilation=3, groups=2, output_padding=1),
])
def test_conv_transpose1d(cfg, lowering):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.ConvTranspose1d, cin, cout, k, **cfg), torch.randn(3, cin, 7))


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [
    dict(cin=2, cout=3, k=2, stride=2),
    dict(cin=2, cout=2, k=(3, 2, 3), stride=(1, 2, 2), padding=(1, 0, 1),
         output_padding=(0, 1, 1), dilation=(2, 1, 1), bias=False),
    dict(cin=4, cout=2, k=3, stride=2, padding=1, groups=2),
])
def test_conv_transpose3d(cfg, lowering):
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    check(_module(nn.ConvTranspose3d, cin, cout, k, **cfg), torch.randn(2, cin, 3, 4, 3))


@pytest.mark.slow
@pytest.mark.parametrize("opt", [2, 4])
@pytest.mark.parametrize("cfg", [
    dict(nd=2, cin=5, cout=5, k=3, padding=1, groups=5),  # depthwise
    dict(nd=2, cin=4, cout=8, k=(2, 5), stride=(1, 3), padding=(1, 2), dilation=(2, 1),
         groups=4),
    dict(nd=1, cin=3, cout=3, k=5, padding=4, dilation=2, groups=3),
    dict(nd=3, cin=2, cout=2, k=3, stride=2, padding=1, groups=2),
    dict(nd=2, cin=3, cout=2, k=3, stride=2),  # 2 output channels: direct
])
def test_direct_kernel_with_several_outputs_per_invocation(cfg, opt):
    """The direct kernel's OPT knob (outputs per invocation along the last dim), forced
    through the knob chooser, on widths that OPT does not divide."""
    cfg = dict(cfg)
    nd, cin, cout, k = cfg.pop("nd"), cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    module = _module(CONV[nd], cin, cout, k, **cfg)
    compiled = check(module, torch.randn(2, cin, *SIZE[nd]),
                     choose=lambda r: {"WG": 64, "OPT": opt} if r.kind == "conv" else None)
    (kernel,) = [k for k in compiled.plan.kernels if k.name.startswith("conv")]
    assert kernel.knobs == {"WG": 64, "OPT": opt}, kernel.knobs


@pytest.mark.slow
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_unbatched_input(nd, lowering):
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


@pytest.mark.slow
@pytest.mark.parametrize("cout,stride,shape", [(128, 1, (18, 4, 30, 31)),
                                               (256, 2, (32, 4, 29, 30))])
def test_128_multiple_channels_take_the_tall_tiles(cout, stride, shape):
    """An implicit GEMM of 128 or 256 output channels over enough positions takes the
    128 x 64 tiles (kernels.matmul_tiles; positions no tile divides), fused bias and
    ReLU included."""
    m = nn.Sequential(_module(nn.Conv2d, 4, cout, 3, stride=stride, padding=1), nn.ReLU())
    compiled = check(m, torch.randn(*shape))
    (kernel,) = compiled.plan.kernels
    assert (kernel.knobs["BM"], kernel.knobs["BN"], kernel.knobs["TM"], kernel.knobs["TN"]) \
        == (128, 64, 8, 4), compiled.plan.summary()


def _function(source: str, name: str) -> str:
    body = source[source.index(f"fn {name}("):]
    return body[:body.index("\n}\n")]


@pytest.mark.slow
def test_windows_load_four_positions_in_one_call():
    """An invocation's four consecutive output positions come from one loader call
    (load_b4) that divides the position by the image width once: when the width is no
    multiple of 4 a lane past the row's end wraps to the next row by a comparison
    (codegen.Emitter._lane_dims), even when the positions are no multiple of 4 (49: the
    last group's lanes past the end fill tile columns that are not stored), also with
    a stride; widths under 4 decode each lane."""
    m = _module(nn.Conv2d, 4, 64, 3, padding=1)
    for shape, w in (((2, 4, 6, 8), 8), ((2, 4, 8, 6), 6), ((2, 4, 7, 7), 7),
                     ((3, 4, 9, 11), 11)):
        (kernel,) = check(m, torch.randn(*shape)).plan.kernels
        body = _function(kernel.source, "load_b4")
        assert body.count(f"/ {w})") == 1 and body.count(f"% {w})") == 1, body
        assert body.count(f">= {w};") == (0 if w % 4 == 0 else 3), body
    strided = _module(nn.Conv2d, 5, 64, 3, stride=(1, 2))  # level1/060's form
    (kernel,) = check(strided, torch.randn(2, 5, 9, 23)).plan.kernels
    assert _function(kernel.source, "load_b4").count("% 11)") == 1
    (kernel,) = check(m, torch.randn(2, 4, 12, 2)).plan.kernels
    assert _function(kernel.source, "load_b4").count("% 2)") == 4


@pytest.mark.slow
def test_prologue_fuses_into_the_loaders():
    """A cheap prologue (a view, relu, a scale) is computed in the loader; a sigmoid,
    which the direct kernel would compute about 7 times per element (4 output channels,
    27 taps an output), is written once by a kernel of its own
    (schedule.heavy_prologues)."""
    w = torch.randn(4, 3, 3, 3)
    f = Fn(lambda x: F.conv2d(torch.relu(x).transpose(2, 3) * 2.0, w, stride=2))
    compiled = check(f, torch.randn(2, 3, 9, 7))
    assert len(compiled.plan.kernels) == 1, compiled.plan.summary()
    f = Fn(lambda x: F.conv2d(torch.sigmoid(x).transpose(2, 3) * 2.0, w, stride=2))
    compiled = check(f, torch.randn(2, 3, 9, 7))
    assert [k.name for k in compiled.plan.kernels] == ["sigmoid+mul", "conv"]


@pytest.mark.slow
def test_weights_as_inputs(lowering):
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


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [
    # (cin, cout, groups, kernel) and whether the default lowering is the implicit GEMM
    (dict(cin=8, cout=16, k=3, padding=1), True),
    (dict(cin=3, cout=16, k=7, stride=2, padding=3), True),  # a stem: 3 channels, K = 147
    (dict(cin=12, cout=16, k=1), True),  # pointwise: a plain matmul of the input
    (dict(cin=16, cout=16, k=3, padding=1, groups=2), False),  # 8 output channels a group
    (dict(cin=8, cout=8, k=3, padding=1, groups=8), False),  # depthwise
    (dict(cin=8, cout=16, k=3, padding=1, groups=8), False),  # depthwise, multiplier 2
    (dict(cin=3, cout=2, k=3), False),  # too few output channels for a tile
])
def test_default_lowering(cfg):
    cfg, gemm = cfg
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    compiled = check(nn.Sequential(_module(nn.Conv2d, cin, cout, k, **cfg), nn.ReLU()),
                     torch.randn(2, cin, 9, 10))
    names = _kernels(compiled)
    assert len(names) == 1, compiled.plan.summary()
    assert ("matmul" in names[0]) == gemm and ("conv" in names[0]) != gemm, names
    # a 1 x 1 kernel at unit stride reads the input as the matmul's B: no window
    assert ("window" in names[0]) == (gemm and k != 1), names


@pytest.mark.slow
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_gemm_bias_relu_is_one_kernel(nd):
    """Odd sizes (no tile multiples: 20 output channels, K = 5 * 3^nd, odd spatial
    sizes), stride, padding and dilation, bias and ReLU in the matmul's epilogue."""
    size = {1: (29,), 2: (13, 11), 3: (7, 6, 9)}[nd]
    conv = _module(CONV[nd], 5, 20, 3, stride=2, padding=2, dilation=2)
    compiled = check(nn.Sequential(conv, nn.ReLU()), torch.randn(3, 5, *size))
    assert _kernels(compiled) == ["window+matmul+add+relu"], compiled.plan.summary()


def test_gemm_grouped():
    compiled = check(_module(nn.Conv2d, 12, 48, (3, 2), padding=(1, 0), groups=3, stride=(1, 2)),
                     torch.randn(2, 12, 7, 9))
    assert _kernels(compiled) == ["window+matmul+add"], compiled.plan.summary()


def test_gemm_split_k():
    """A deep reduction (256 channels x 3 x 3) over few output tiles: split-K partial
    products summed by the reduce template, the bias fused into that kernel."""
    compiled = check(_module(nn.Conv2d, 256, 16, 3, padding=1), torch.randn(1, 256, 4, 3))
    names = _kernels(compiled)
    assert len(names) == 2 and "matmul" in names[0] and "reduce" in names[1], names


@pytest.mark.slow
def test_copies_store_16_bytes_at_a_time_their_lanes_sharing_the_index():
    """A copy kernel (materialize: here a pooled convolution's combined weights, 5 x 5
    taps, so a lane can wrap into the next row) computes four consecutive elements
    from one decoded index (the other lanes carried by selects, not divided again) and
    stores them as a vec4 (VEC 4, the default for f32); the same with VEC 1 forced; both
    against PyTorch through the real kernels."""
    m = nn.Sequential(_module(nn.Conv2d, 8, 64, 4), nn.AvgPool2d(2))
    x = torch.randn(2, 8, 9, 11)
    compiled = check(m, x)
    copies = [k for k in compiled.plan.kernels if "materialize" in k.name]
    assert copies and all(k.knobs["VEC"] == 4 and "fn load_x4" in k.source for k in copies)
    assert any(k.source.count(" / 5)") == 1 and " % 5)" in k.source for k in copies), [
        k.source for k in copies]
    scalar = check(m, x, choose=lambda r: {**r.default.knobs, "VEC": 1} if r.kind == "materialize"
                                 else None)
    copies = [k for k in scalar.plan.kernels if "materialize" in k.name]
    assert copies and all(k.knobs["VEC"] == 1 and "fn load_x(" in k.source for k in copies)


@pytest.mark.slow
def test_gemm_transposed_by_phases():
    """A strided transposed convolution is one matmul per phase over only its real taps,
    every phase's taps first copied K-contiguous by one kernel (so that the matmuls load
    them 16 bytes at a time), the bias in each phase's epilogue; each phase stores into
    the output in place, the ReLU after the interleaving computed there too (no kernel
    interleaves them: test_transposed_phases_stored_in_place); at stride 1 it is one
    kernel."""
    m = nn.Sequential(_module(nn.ConvTranspose2d, 6, 16, 3, stride=2, padding=1,
                              output_padding=1), nn.ReLU())
    compiled = check(m, torch.randn(2, 6, 5, 4))
    names = _kernels(compiled)
    matmuls = [n for n in names if "matmul" in n]
    assert names[0] == "slice+cat+materialize" and len(names) == 5, names
    assert len(matmuls) == 4 and all(n.endswith("matmul+add+relu") for n in matmuls), names
    compiled = check(_module(nn.ConvTranspose2d, 6, 16, 3, padding=1), torch.randn(2, 6, 5, 4))
    assert _kernels(compiled) == ["slice+window+matmul+add"], compiled.plan.summary()
    m = _module(nn.ConvTranspose2d, 8, 64, 3, stride=2, padding=1)
    compiled = check(m, torch.randn(2, 8, 5, 4))
    assert _kernels(compiled).count("slice+cat+materialize") == 1, compiled.plan.summary()
    for kernel in [k for k in compiled.plan.kernels if "matmul" in k.name]:
        assert re.search(r"pa0 = in\d+v4\[", kernel.source), kernel.source  # A as vec4
    # 6 channels by one tap per phase is below GEMM_MIN_K: the direct kernel's case
    compiled = check(_module(nn.ConvTranspose3d, 6, 16, 2, stride=2), torch.randn(1, 6, 2, 3, 2))
    assert _kernels(compiled) == ["conv+add"], compiled.plan.summary()


def test_transposed_phases_stored_in_place():
    """A strided transposed convolution's phases are not interleaved by a kernel: each
    phase's product stores its outputs into their strided places of the output (cropped
    to its size: the last outputs of a phase past it are stored nowhere), with the
    elementwise ops after the convolution (here a product with another input) computed
    there; in 3-d, grouped, with output padding too. Where a phase has no tap (a 1 x 1
    kernel at stride 2: zeros) no kernel stores it, and the interleaving kernel stays."""
    w, bias = torch.randn(8, 16, 3, 3), torch.randn(16)
    compiled = check(Fn(lambda x, z: F.conv_transpose2d(x, w, bias, stride=2, padding=1) * z),
                     torch.randn(2, 8, 5, 4), torch.randn(2, 16, 9, 7))
    names = _kernels(compiled)
    assert names[0] == "slice+cat+materialize" and len(names) == 5, compiled.plan.summary()
    for kernel in compiled.plan.kernels[1:]:
        assert kernel.name.endswith("matmul+add+mul"), names
        assert "fn place(gi: i32)" in kernel.source and "return -1;" in kernel.source
    compiled = check(_module(nn.ConvTranspose3d, 4, 32, 3, stride=2, padding=1, groups=2,
                             output_padding=1), torch.randn(2, 4, 3, 2, 3))
    assert not any("cat" in n for n in _kernels(compiled)[1:]), compiled.plan.summary()
    compiled = check(_module(nn.ConvTranspose2d, 16, 16, 1, stride=2), torch.randn(2, 16, 4, 5))
    assert "cat" in _kernels(compiled)[-1], compiled.plan.summary()


def test_cat_of_products_stored_in_place():
    """A cat of two products (through a reshape, a transpose and a slice, then an
    elementwise op): each matmul stores its rows into the cat, none copies them."""
    compiled = check(Fn(lambda a, b, c, d: torch.cat(
        [(a @ b).reshape(4, 8, 40)[:, :, 1:], (a @ c).reshape(4, 8, 20).transpose(1, 2)
         .reshape(4, 8, 20)[:, :, :7]], 2).sigmoid() + d),
        torch.randn(32, 24), torch.randn(24, 40), torch.randn(24, 20), torch.randn(4, 8, 46))
    assert _kernels(compiled) == ["matmul+sigmoid+add"] * 2, compiled.plan.summary()


def test_transposed_phases_cover_every_tap():
    """Each tap of a transposed convolution reaches exactly one phase, at the outputs
    o = i * stride - padding + k * dilation that the phase's window says."""
    for stride, dilation, kernel, padding in [(2, 1, 3, 1), (3, 2, 4, 2), (4, 6, 5, 3),
                                              (2, 3, 3, 1), (1, 2, 3, 0), (3, 1, 2, 0)]:
        seen = []
        for r in range(stride):
            phase = conv_ops.transposed_phase(r, 7, kernel, stride, padding, dilation)
            if phase is None:
                continue
            k0, taps, pad, dil = phase
            g = math.gcd(stride, dilation)
            for t in range(taps):
                k = k0 + t * (stride // g)
                seen.append(k)
                t_flip = taps - 1 - t
                for q in range(3):
                    i = q - pad + t_flip * dil  # the window's read of phase output q
                    assert i * stride - padding + k * dilation == stride * q + r
        assert sorted(seen) == list(range(kernel)), (stride, dilation, kernel, padding)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [
    dict(kernel_size=3),
    dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
    dict(kernel_size=(3, 1), padding=(2, 0), stride=3),
])
def test_unfold_is_the_window_view(cfg):
    """F.unfold (aten.im2col) is the window primitive reshaped: padding reads zeros."""
    compiled = check(Fn(lambda x: F.unfold(x, **cfg) * 2.0), torch.randn(2, 3, 7, 8))
    assert len(compiled.plan.kernels) == 1, compiled.plan.summary()
    check(Fn(lambda x: F.unfold(x, **cfg)), torch.randn(3, 7, 8))


def test_window_shape_rule():
    b = GraphBuilder()
    x = b.input((2, 3, 7, 8), "f32", "x")
    v = b.window(x, [2, 3], [2, 1], [1, 1], [1, 2])
    assert v.shape == (2, 3, 2, 3, 4, 6) and v.node.op == "window"
    # explicit output sizes, negative padding (a crop)
    v = b.window(x, [3, 3], [1, 1], [-1, 2], [1, 1], out=[4, 17])
    assert v.shape == (2, 3, 3, 3, 4, 17)
    assert b.window(x, [1, 1], [1, 1], [0, 0], [1, 1]).node.op == "reshape"  # a view of x
    with pytest.raises(CompileError, match="empty"):
        b.window(x, [9, 3], [1, 1], [0, 0], [1, 1])
    with pytest.raises(CompileError, match="below 1"):
        b.window(x, [3, 3], [0, 1], [0, 0], [1, 1])


@pytest.fixture
def folded(monkeypatch):
    """Every implicit GEMM of a batch of two or more with its batch folded into the
    columns (conv_ops.fold_batch), whatever the padding it saves."""
    monkeypatch.setattr(conv_ops, "GEMM_MIN_COUT", 1)
    monkeypatch.setattr(conv_ops, "GEMM_MIN_K", 1)
    monkeypatch.setattr(conv_ops, "FOLD_MIN_PADDING", -1.0)


@pytest.mark.parametrize("nd,batch,cfg", [
    (1, 3, dict(cin=4, cout=6, k=3, stride=2, padding=1)),
    (2, 3, dict(cin=6, cout=8, k=3, padding=1)),
    (2, 1, dict(cin=6, cout=8, k=3, padding=1)),  # batch 1: nothing to fold
    (2, 4, dict(cin=6, cout=8, k=(3, 2), stride=2, padding=(2, 0), dilation=(2, 1),
                groups=2, bias=False)),
    (3, 2, dict(cin=4, cout=6, k=2, stride=(1, 2, 1), padding=1)),
])
def test_batch_folded_into_the_columns(nd, batch, cfg, folded):
    """The batch folded into the GEMM's columns (one product of batch x positions
    columns per group, the output stored as NCHW by the matmul's store), plain and
    transposed, with the bias and a ReLU in the epilogue, against PyTorch."""
    cfg = dict(cfg)
    cin, cout, k = cfg.pop("cin"), cfg.pop("cout"), cfg.pop("k")
    x = torch.randn(batch, cin, *SIZE[nd])
    compiled = check(nn.Sequential(_module(CONV[nd], cin, cout, k, **cfg), nn.ReLU()), x)
    matmuls = [k for k in compiled.plan.kernels if "matmul" in k.name]
    assert matmuls and all(("(n / " in k.source) == (batch > 1) for k in matmuls), \
        compiled.plan.summary()
    t = _module(CONV_T[nd], cin, cout, k, **{**cfg, "padding": 1})
    compiled = check(nn.Sequential(t, nn.ReLU()), x)
    assert any("(n / " in k.source for k in compiled.plan.kernels) == (batch > 1)


def test_folded_split_k(folded):
    """A deep folded product over few tiles: its K chunks are batch entries of the
    folded matmul, summed by the reduce template (the bias in that kernel)."""
    compiled = check(_module(nn.Conv2d, 256, 16, 3, padding=1), torch.randn(2, 256, 4, 3))
    names = _kernels(compiled)
    assert len(names) == 2 and "matmul" in names[0] and "reduce" in names[1], names
    assert "(n / 12)" in compiled.plan.kernels[0].source


@pytest.mark.parametrize("n,m,positions,depth,fold", [
    (32, 512, 49, 4608, True),  # ResNet's 7 x 7: a quarter of each 64-wide tile padding
    (32, 256, 196, 2304, True),  # 14 x 14: 196 of 256 columns
    (32, 128, 784, 1152, False),  # 28 x 28: 784 of 832, too little to gain
    (32, 64, 3136, 576, False),  # 56 x 56: whole tiles
    (32, 512, 64, 4608, False),  # 8 x 8: whole tiles
    (1, 512, 49, 4608, False),  # one batch entry
    (8, 64, 4, 576, True),  # 2 x 2 positions on 16-wide tiles
])
def test_fold_batch_rule(n, m, positions, depth, fold):
    assert conv_ops.fold_batch(n, 1, m, positions, depth, None) == fold
