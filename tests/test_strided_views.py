"""Tensor.unfold and as_strided as views (lower/movement.py) against PyTorch eager: windows
and patches along one dim, as_strided over contiguous, permuted and channels-last
tensors, the as_strided that adaptive pooling to 1 x 1 of a permuted tensor exports, and
Swin's window partition."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check

import kernelwright
from kernelwright.ir.ir import CompileError


@pytest.mark.parametrize("dim,size,step", [
    (2, 3, 1),   # overlapping windows
    (2, 3, 2),   # overlapping, a tail left over
    (-1, 2, 3),  # gaps between windows
    (1, 4, 4),   # patches, the remainder dropped
    (0, 2, 2),   # the batch dim
    (3, 5, 5),   # one window of the whole dim
])
def test_unfold(dim, size, step):
    x = torch.randn(4, 5, 9, 5)
    check(Fn(lambda x: x.unfold(dim, size, step) * 2.0), x)


def test_unfold_is_a_view():
    """No copy kernel: the windows are read by the kernel that uses them."""
    compiled = check(Fn(lambda x: x.unfold(1, 3, 2) + 1.0), torch.randn(3, 10, 4))
    (kernel,) = compiled.plan.kernels
    assert "window" in kernel.name.split("+"), kernel.name


def test_unfold_of_a_permuted_tensor_and_a_vector():
    check(Fn(lambda x: x.permute(0, 2, 1).unfold(2, 3, 1).sum(-1)), torch.randn(2, 7, 3))
    check(Fn(lambda x: x.unfold(0, 4, 3)), torch.randn(11))


def test_vit_patches_by_unfold():
    """A vision transformer cutting patches with unfold twice, then embedding them."""
    p, c, d = 4, 3, 8

    class Patches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(c * p * p, d)

        def forward(self, x):
            n = x.shape[0]
            t = x.unfold(2, p, p).unfold(3, p, p)  # [N, C, H/p, W/p, p, p]
            t = t.permute(0, 2, 3, 1, 4, 5).reshape(n, -1, c * p * p)
            return self.proj(t)

    check(Patches(), torch.randn(2, c, 12, 8))


@pytest.mark.parametrize("case", [
    ((2, 5, 3), (7, 1, 1), None),         # sliding windows of 3 along rows of 7
    ((2, 3, 2, 2), (16, 4, 4, 1), 1),     # 2-d windows of a 4 x 4 image, an offset
    ((3, 2), (5, 2), 0),                  # gaps: every other element of rows of 5
    ((2, 3, 4), (12, 0, 1), None),        # a stride 0: an expand
    ((4, 2), (1, 4), None),               # a transposed read
    ((2, 2, 2), (1, 1, 1), 3),            # all dims overlapping
    ((1, 6, 1), (0, 2, 5), 2),            # unit dims of any stride
])
def test_as_strided_of_a_contiguous_tensor(case):
    size, stride, offset = case
    check(Fn(lambda x: x.as_strided(size, stride, offset) + 0.5), torch.randn(2, 16))


def test_as_strided_of_permuted_tensors():
    """The strides address the input's memory as PyTorch laid it out: a transpose's, and
    a channels-last example input's."""
    check(Fn(lambda x: x.t().as_strided((3, 2), (1, 3)) * 2.0), torch.randn(2, 3))
    check(Fn(lambda x: x.t().as_strided((2, 2, 2), (1, 2, 1), 1) * 2.0), torch.randn(2, 3))
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    check(Fn(lambda x: x.as_strided((2, 4, 5, 3), (60, 15, 3, 1)) + 0.0), x)


def test_as_strided_errors_name_the_layout():
    """A strided input (its storage holds more than its elements) or an as_strided that
    reads past the elements is a CompileError naming the sizes and strides."""
    with pytest.raises(CompileError, match=r"stride=\[2, 1\].*strides \[8, 2\]"):
        kernelwright.compile(Fn(lambda x: x[:, ::2].as_strided((2, 2), (2, 1)) + 1.0),
                             [torch.randn(3, 8)])
    with pytest.raises(CompileError, match=r"sizes \[3, 3\], strides \[3, 1\].*\[2, 11\)"):
        kernelwright.compile(Fn(lambda x: x.as_strided((3, 3), (3, 1), 2) + 1.0),
                             [torch.randn(2, 4)])


@pytest.mark.parametrize("case", [
    (lambda x: F.adaptive_avg_pool2d(x.permute(0, 3, 1, 2), 1), torch.randn(2, 4, 6, 3)),
    (lambda x: F.adaptive_avg_pool2d(x.permute(0, 3, 1, 2), 1).flatten(1) * 2.0,
     torch.randn(2, 4, 6, 3)),
    (lambda x: F.adaptive_avg_pool1d(x.permute(0, 2, 1), 1), torch.randn(2, 6, 3)),
    (lambda x: F.adaptive_avg_pool3d(x.permute(0, 4, 1, 2, 3), 1), torch.randn(2, 3, 4, 2, 3)),
    (lambda x: F.adaptive_avg_pool2d(x, 1) + 1.0,
     torch.randn(2, 3, 4, 6).to(memory_format=torch.channels_last)),
])
def test_global_pooling_of_channels_last(case):
    """Pooling to one output of a channels-last tensor exports as a mean and an
    as_strided giving the mean channels-last strides."""
    check(Fn(case[0]), case[1])


def test_convnext_head():
    """A ConvNeXt-like stage: a depthwise convolution, LayerNorm over channels between
    permutes, then the head pools the permuted result (mean + as_strided), normalizes
    and classifies."""

    class Head(torch.nn.Module):
        def __init__(self, c=8):
            super().__init__()
            self.dw = torch.nn.Conv2d(c, c, 3, padding=1, groups=c)
            self.norm = torch.nn.LayerNorm(c)
            self.head_norm = torch.nn.LayerNorm(c)
            self.fc = torch.nn.Linear(c, 5)

        def forward(self, x):
            x = self.norm(self.dw(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            x = F.adaptive_avg_pool2d(x, 1).flatten(1)
            return self.fc(self.head_norm(x))

    check(Head(), torch.randn(2, 8, 6, 6))


def test_swin_window_partition_and_reverse():
    """Swin's shifted windows: roll, partition into w x w windows (view, permute,
    contiguous, view: torch.export emits no as_strided for it), attention-like mixing
    inside each window, then the windows put back and rolled back."""
    w, s = 2, 1

    class Windows(torch.nn.Module):
        def __init__(self, c=3):
            super().__init__()
            self.mix = torch.nn.Linear(c, c)

        def forward(self, x):
            b, h, wd, c = x.shape
            x = torch.roll(x, (-s, -s), (1, 2))
            t = x.view(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5).contiguous()
            t = t.view(-1, w * w, c)
            t = torch.softmax(t @ t.transpose(1, 2), -1) @ self.mix(t)
            t = t.view(b, h // w, wd // w, w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, wd, c)
            return torch.roll(t, (s, s), (1, 2))

    check(Windows(), torch.randn(2, 4, 6, 3))
