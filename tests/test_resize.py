"""Interpolation against PyTorch eager: F.interpolate / nn.Upsample in modes nearest,
nearest-exact, (bi/tri)linear and bicubic over 1 to 3 dims, up and down, integer and
non-integer scales, sizes and scale factors (recompute_scale_factor both ways),
align_corners both ways; the ops torch.export leaves whole (2-d nearest and bilinear),
those it decomposes, and every upsample op kept whole (lower/resize.py's lowering of each)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check

from kernelwright.frontend import capture
from kernelwright.ir.ir import GraphBuilder
from kernelwright.lower.registry import lookup
from kernelwright.lower.resize import index_formula, nearest_index, source_scale

A = torch.ops.aten
UPSAMPLE_OPS = (A.upsample_nearest1d, A.upsample_nearest2d, A.upsample_nearest3d,
                A._upsample_nearest_exact1d, A._upsample_nearest_exact2d,
                A._upsample_nearest_exact3d, A.upsample_linear1d, A.upsample_bilinear2d,
                A.upsample_trilinear3d, A.upsample_bicubic2d)
SIZE = {1: (2, 3, 7), 2: (2, 3, 5, 6), 3: (1, 2, 4, 5, 3)}
LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}


def interp(**kw):
    return Fn(lambda x: F.interpolate(x, **kw))


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(scale_factor=3),
                                dict(scale_factor=1.7), dict(scale_factor=0.5),
                                dict(scale_factor=0.6), dict(scale_factor=(2, 1.5)),
                                dict(scale_factor=1.7, recompute_scale_factor=True),
                                dict(size=(3, 7)), dict(size=(8, 13)), dict(size=(5, 6))])
def test_nearest_2d(kw):
    check(interp(mode="nearest", **kw), torch.randn(*SIZE[2]))


@pytest.mark.slow
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(scale_factor=1.7),
                                dict(scale_factor=0.6), dict(scale_factor=(0.5, 2.3)),
                                dict(scale_factor=1.3, recompute_scale_factor=True),
                                dict(size=(3, 9)), dict(size=(1, 1)), dict(size=(5, 11))])
def test_bilinear_2d(kw, align_corners):
    check(interp(mode="bilinear", align_corners=align_corners, **kw), torch.randn(*SIZE[2]))


def test_upsample_module():
    check(torch.nn.Upsample(scale_factor=2.5, mode="bilinear"), torch.randn(*SIZE[2]))


@pytest.mark.slow
@pytest.mark.parametrize("nd,mode,kw", [
    (1, "nearest", dict(scale_factor=1.7)),
    (1, "nearest-exact", dict(size=4)),
    (1, "linear", dict(scale_factor=0.6, align_corners=False)),
    (2, "nearest-exact", dict(scale_factor=1.7)),
    (2, "bicubic", dict(scale_factor=1.7, align_corners=False)),
    (2, "bicubic", dict(size=(3, 8), align_corners=True)),
    (3, "nearest", dict(scale_factor=(2, 0.5, 1.7))),
    (3, "trilinear", dict(scale_factor=1.5, align_corners=True)),
])
def test_decomposed_modes(nd, mode, kw):
    """Each mode through the default capture (the upsample ops kept whole)."""
    check(interp(mode=mode, **kw), torch.randn(*SIZE[nd]))


@pytest.fixture
def whole():
    """Capture keeps every upsample op whole (capture.KEEP_WHOLE; lower/resize.py lowers
    each): the test checks that the op it names reached the exported graph."""
    table = capture.decomposition_table()
    assert not any(getattr(op, name) in table for op in UPSAMPLE_OPS for name in op.overloads())

    def exported(module, x, op):
        ep = capture.export_graph(module, [x])
        targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
        assert op in targets, targets
    return exported


WHOLE_CASES = [
    (nd, mode, kw)
    for nd in (1, 2, 3)
    for mode, kw in [
        ("nearest", dict(scale_factor=2)), ("nearest", dict(scale_factor=1.6)),
        ("nearest", dict(scale_factor=0.6)),
        ("nearest-exact", dict(scale_factor=1.7)), ("nearest-exact", dict(scale_factor=0.5)),
        (LINEAR[nd], dict(scale_factor=2.0, align_corners=False)),
        (LINEAR[nd], dict(scale_factor=1.6, align_corners=True)),
        (LINEAR[nd], dict(scale_factor=0.6, align_corners=False)),
        (LINEAR[nd], dict(scale_factor=0.7, align_corners=True)),
    ]
] + [
    (1, "nearest", dict(size=11)), (2, "nearest-exact", dict(size=(3, 11))),
    (3, "nearest-exact", dict(size=(7, 2, 4))), (1, "linear", dict(size=3, align_corners=True)),
    (2, "bilinear", dict(size=(9, 4), align_corners=False)),
    (3, "trilinear", dict(size=(2, 7, 3), align_corners=False)),
    (2, "bicubic", dict(scale_factor=2, align_corners=False)),
    (2, "bicubic", dict(scale_factor=1.7, align_corners=True)),
    (2, "bicubic", dict(scale_factor=(0.6, 1.4), align_corners=False)),
    (2, "bicubic", dict(size=(3, 13), align_corners=True)),
    (2, "bicubic", dict(size=(2, 2), align_corners=False)),
]
OP_NAME = {"nearest": "upsample_nearest{}d", "nearest-exact": "_upsample_nearest_exact{}d",
           "linear": "upsample_linear1d", "bilinear": "upsample_bilinear2d",
           "trilinear": "upsample_trilinear3d", "bicubic": "upsample_bicubic2d"}


@pytest.mark.slow
@pytest.mark.parametrize("nd,mode,kw", WHOLE_CASES)
def test_kept_whole(whole, nd, mode, kw):
    x = torch.randn(*SIZE[nd])
    module = interp(mode=mode, **kw)
    whole(module, x, "aten." + OP_NAME[mode].format(nd) + ".vec")
    check(module, x)


def test_nearest_exact_rounding(whole):
    """2 -> 41 nearest-exact: output 20's source position 20.5 * f32(2 / 41) - 0.5 lies
    just below 0.5; PyTorch rounds it to f32 before adding 0.5 back and picks source 1,
    where floor of the f32 product 20.5 * f32(2 / 41) gives 0 (the lowering's index
    comes from a nudged scale, or a constant)."""
    x = torch.randn(1, 2, 2)
    module = interp(mode="nearest-exact", size=41)
    whole(module, x, "aten._upsample_nearest_exact1d.vec")
    check(module, x)


def test_nearest_index_is_pytorchs():
    """nearest_index against PyTorch's CPU kernel, and its iota formula against it, over
    sizes and scale factors (host only)."""
    for mode in ("nearest", "nearest-exact"):
        for i in range(1, 24):
            x = torch.arange(float(i)).reshape(1, 1, i)
            cases = [(o, None) for o in range(1, 60)]
            cases += [(int(i * f), f) for f in (0.3, 0.7, 1.3, 1.7, 2.0, 7 / 3, 4.01)
                      if int(i * f) >= 1]
            for o, f in cases:
                kw = dict(size=o) if f is None else dict(scale_factor=f)
                want = F.interpolate(x, mode=mode, **kw)[0, 0].long().numpy()
                idx = nearest_index(i, o, f, mode == "nearest-exact")
                assert np.array_equal(idx, want), (mode, i, o, f)
                formula = index_formula(idx, i, source_scale(i, o, False, f))
                if formula is not None:
                    off, s = formula
                    d = np.arange(o, dtype=np.float32) + np.float32(off)
                    assert np.array_equal(np.minimum(np.floor(d * s), i - 1), idx)


def lowered(name: str, x_shape, *args):
    """The primitive ops the registered lowering of `name` builds for an input of x_shape."""
    b = GraphBuilder()
    x = b.input(x_shape, "f32", "x")
    lookup(name)(b, x, *args)
    return [n.op for n in b.graph.nodes]


def test_nearest_views():
    """Integer up- and downscaling are views (no gather); 5 -> 8 gathers from an iota."""
    assert "gather" not in lowered("aten.upsample_nearest2d.vec", (1, 2, 4, 5), None, [2.0, 3.0])
    assert "gather" not in lowered("aten.upsample_nearest2d.vec", (1, 2, 8, 6), None, [0.5, 0.5])
    assert "gather" not in lowered("aten.upsample_nearest2d.vec", (1, 2, 4, 5), [8, 10], None)
    ops = lowered("aten.upsample_nearest2d.vec", (1, 2, 5, 5), None, [1.7, 1.7])
    assert ops.count("gather") == 2 and "iota" in ops


class UpBlock(torch.nn.Module):
    """A diffusers-style up block: nearest 2x upsampling, then a 3x3 convolution."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def test_up_block():
    torch.manual_seed(0)
    check(UpBlock(4), torch.randn(2, 4, 5, 6))
    up = torch.nn.Sequential(torch.nn.Upsample(scale_factor=2), torch.nn.Conv2d(3, 5, 3, padding=1),
                             torch.nn.SiLU())
    check(up, torch.randn(1, 3, 4, 4))
