"""Interpolation (F.interpolate, nn.Upsample): nearest, nearest-exact, (bi/tri)linear and
bicubic resizing of the last 1 to 3 dims, as index arithmetic.

torch.export's decomposition (torch 2.13) leaves upsample_nearest2d.vec and
upsample_bilinear2d.vec whole (core ATen) and turns the other modes into aranges and
advanced indexing before capture sees them; every upsample op of the family is
registered here all the same (the .vec and the per-dim-scale overloads), for graphs
that keep them.

Each resized dim is handled on its own, one after the other (the modes are separable):
- nearest and nearest-exact pick one source index per output position. The index
  array is computed here as PyTorch's CPU kernel does (`nearest_index`: f32 scale, the
  f32 roundings of its source position), then expressed as cheaply as it allows
  (`_pick`): x itself, a strided slice (downscaling by an integer), a broadcast
  view (x[.., i, 1, ..] expanded to k copies: upscaling by an integer k, the usual 2x)
  or else a `gather` whose index floor((o + off) * s') is computed from an iota in the
  reading kernel, s' an f32 scale checked here to give exactly the array (one rounded
  product: the kernel computes it bit for bit); an i32 constant holds the array only
  where no such scale exists.
- linear and cubic weight 2 or 4 taps per output position, gathered at indices
  computed from iotas in the reading kernel (`_source`: the source position from the
  scale, `align_corners` and the scale factor as PyTorch's area_pixel_compute_scale /
  _source_index; the taps clamped into the dim by the gather). Their results are
  continuous in the source position, so f32 rounding of it moves them by an ulp only.
Nothing is copied: the gathers and weights are views and elementwise ops that fuse
into the kernel reading the result.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.ir import CompileError, GraphBuilder, Value
from .registry import register

CUBIC_A = -0.75  # the cubic convolution's parameter in PyTorch's bicubic mode


def output_sizes(spatial, output_size, scale_factors) -> tuple[list[int], list]:
    """The output sizes and per-dim scales of an upsample .vec op: `output_size` when
    given (no scales), else int(size * factor) per dim with the factors as scales."""
    nd = len(spatial)
    if output_size is not None:
        return [int(s) for s in output_size], [None] * nd
    if scale_factors is None or len(scale_factors) != nd:
        raise CompileError(f"upsample of {nd} dims needs an output size or {nd} scale factors")
    return [int(i * f) for i, f in zip(spatial, scale_factors)], list(scale_factors)


def source_scale(i: int, o: int, align_corners: bool, scale) -> np.float32:
    """PyTorch's area_pixel_compute_scale in f32: (I - 1) / (O - 1) with align_corners,
    else 1 / scale for a positive scale factor, else I / O."""
    if align_corners:
        return np.float32(i - 1) / np.float32(o - 1) if o > 1 else np.float32(0)
    if scale is not None and scale > 0:
        return np.float32(1.0 / scale)
    return np.float32(i) / np.float32(o)


def nearest_index(i: int, o: int, scale, exact: bool) -> np.ndarray:
    """The source index of each of `o` outputs of a dim of size `i`, as PyTorch's CPU
    kernel computes it: nearest floor(o * s) (one f32 product); nearest-exact
    floor(f32(t + 0.5)) of t = max(f32(s (o + 0.5) - 0.5), 0) (the product and
    difference exact, one rounding); both capped at I - 1."""
    s = source_scale(i, o, False, scale)
    d = np.arange(o)
    if exact:
        t = np.maximum((np.float64(s) * (d + 0.5) - 0.5).astype(np.float32), 0)
        src = np.floor((t.astype(np.float64) + 0.5).astype(np.float32))
    else:
        src = np.floor(d.astype(np.float32) * s)
    return np.minimum(src.astype(np.int64), i - 1)


def _nudged(s: np.float32, steps: int) -> np.float32:
    """The f32 `steps` representable values above s (below for negative steps)."""
    for _ in range(abs(steps)):
        s = np.nextafter(s, np.float32(np.inf if steps > 0 else -np.inf), dtype=np.float32)
    return s


def index_formula(idx: np.ndarray, i: int, s: np.float32) -> tuple[float, np.float32] | None:
    """(off, s') with min(floor(f32((o + off) * s')), I - 1) == idx[o] for every output
    o, s' within a few ulps of s, when there is one: a single rounded product that a
    kernel computes exactly as here."""
    d = np.arange(len(idx)).astype(np.float32)
    for off in (0.0, 0.5):
        for steps in (0, -1, 1, -2, 2, -3, 3, -4, 4):
            s2 = _nudged(np.float32(s), steps)
            got = np.minimum(np.floor((d + np.float32(off)) * s2), i - 1)
            if np.array_equal(got.astype(np.int64), idx):
                return off, s2
    return None


def _along(b: GraphBuilder, v: Value, rank: int, dim: int) -> Value:
    """A per-position vector v [O] of dim `dim` reshaped to broadcast against a tensor
    of `rank` dims: [1, .., O, .., 1]."""
    return b.reshape(v, [v.shape[0] if k == dim else 1 for k in range(rank)])


def _gather_dim(b: GraphBuilder, x: Value, dim: int, index: Value) -> Value:
    """x with dim `dim` replaced by x[.., index[o], ..] for an i32 vector index [O]
    (clamped into the dim by the gather)."""
    shape = [index.shape[0] if k == dim else s for k, s in enumerate(x.shape)]
    return b.gather(x, dim, b.expand(_along(b, index, len(x.shape), dim), shape))


def _pick(b: GraphBuilder, x: Value, dim: int, idx: np.ndarray, s: np.float32) -> Value:
    """x with dim `dim` replaced by x[.., idx[o], ..] for the host index array idx
    (non-decreasing, inside the dim), by the cheapest form that gives exactly it: a
    slice, a broadcast view, a gather at an iota formula (index_formula; s its scale
    to start from), else a gather at an i32 constant."""
    i, o = x.shape[dim], len(idx)
    d = np.arange(o)
    step = int(idx[1] - idx[0]) if o > 1 else 1
    if step >= 1 and np.array_equal(idx, idx[0] + step * d):  # x itself, or strided
        return b.slice(x, dim, int(idx[0]), int(idx[0]) + (o - 1) * step + 1, step)
    k = int(np.count_nonzero(idx == 0))
    if k > 1 and np.array_equal(idx, d // k):  # every source k times, in order
        lead, rest = x.shape[:dim], x.shape[dim + 1:]
        y = b.expand(b.reshape(x, (*lead, i, 1, *rest)), (*lead, i, k, *rest))
        return b.slice(b.reshape(y, (*lead, i * k, *rest)), dim, 0, o)
    formula = index_formula(idx, i, s)
    if formula is None:
        index = b.const(idx.astype(np.int32), "i32")
    else:
        off, s2 = formula
        pos = b.ew("mul", b.iota((o,), 0, start=off, step=1.0, dtype="f32"),
                   b.scalar(float(s2), "f32"))
        index = b.cast(b.ew("floor", pos), "i32")
    return _gather_dim(b, x, dim, index)


def _nearest(b: GraphBuilder, x: Value, sizes, scales, exact: bool) -> Value:
    nd = len(sizes)
    for k, (o, scale) in enumerate(zip(sizes, scales)):
        dim = len(x.shape) - nd + k
        i = x.shape[dim]
        x = _pick(b, x, dim, nearest_index(i, o, scale, exact),
                  source_scale(i, o, False, scale))
    return x


def _source(b: GraphBuilder, i: int, o: int, align_corners: bool, scale,
            cubic: bool) -> Value:
    """The f32 source position [O] of each output of a dim of size I resized to O, as
    PyTorch's area_pixel_compute_source_index: s * o with align_corners, else
    s * (o + 0.5) - 0.5, at least 0 unless cubic."""
    s = float(source_scale(i, o, align_corners, scale))
    if align_corners:
        return b.ew("mul", b.iota((o,), 0, dtype="f32"), b.scalar(s, "f32"))
    pos = b.ew("sub", b.ew("mul", b.iota((o,), 0, start=0.5, step=1.0, dtype="f32"),
                           b.scalar(s, "f32")), b.scalar(0.5, "f32"))
    return pos if cubic else b.ew("maximum", pos, b.scalar(0.0, "f32"))


def _floor_and_fraction(b: GraphBuilder, real: Value, i: int) -> tuple[Value, Value]:
    """PyTorch's guard_index_and_lambda: the index min(floor(real), I - 1) (i32) and the
    fraction real - index clamped to [0, 1]."""
    low = b.ew("minimum", b.ew("floor", real), b.scalar(float(i - 1), "f32"))
    frac = b.ew("clamp", b.ew("sub", real, low), lo=0.0, hi=1.0)
    return b.cast(low, "i32"), frac


def _weighted(b: GraphBuilder, x: Value, dim: int, taps: list[tuple[Value, Value]]) -> Value:
    """sum over taps (index [O], weight [O]) of weight * x gathered at index along dim."""
    out = None
    for index, weight in taps:
        term = b.ew("mul", _gather_dim(b, x, dim, index), _along(b, weight, len(x.shape), dim))
        out = term if out is None else b.ew("add", out, term)
    return out


def _cubic_weights(b: GraphBuilder, t: Value) -> list[Value]:
    """The four cubic convolution weights of taps -1, 0, 1, 2 at fraction t (A = -0.75):
    W2(t + 1), W1(t), W1(1 - t), W2(2 - t), W1(x) = ((A + 2) x - (A + 3)) x^2 + 1 for
    |x| <= 1 and W2(x) = ((A x - 5A) x + 8A) x - 4A for 1 < |x| < 2."""
    a = CUBIC_A

    def near(u: Value) -> Value:
        inner = b.ew("sub", b.ew("mul", u, b.scalar(a + 2, "f32")), b.scalar(a + 3, "f32"))
        return b.ew("add", b.ew("mul", inner, b.ew("mul", u, u)), b.scalar(1.0, "f32"))

    def far(u: Value) -> Value:
        inner = b.ew("sub", b.ew("mul", u, b.scalar(a, "f32")), b.scalar(5 * a, "f32"))
        inner = b.ew("add", b.ew("mul", inner, u), b.scalar(8 * a, "f32"))
        return b.ew("sub", b.ew("mul", inner, u), b.scalar(4 * a, "f32"))

    one = b.scalar(1.0, "f32")
    rest = b.ew("sub", one, t)
    return [far(b.ew("add", t, one)), near(t), near(rest), far(b.ew("add", rest, one))]


def _interpolate(b: GraphBuilder, x: Value, sizes, scales, align_corners: bool,
                 cubic: bool) -> Value:
    """Linear (2 taps) or cubic (4 taps) interpolation of the last len(sizes) dims."""
    if x.dtype != "f32":
        raise CompileError(f"{'cubic' if cubic else 'linear'} interpolation of a {x.dtype} "
                           "tensor (f32 only)")
    nd = len(sizes)
    for k, (o, scale) in enumerate(zip(sizes, scales)):
        dim = len(x.shape) - nd + k
        i = x.shape[dim]
        if o == i and not cubic:  # PyTorch copies a dim that keeps its size
            continue
        low, frac = _floor_and_fraction(b, _source(b, i, o, align_corners, scale, cubic), i)
        if cubic:
            weights = _cubic_weights(b, frac)
            taps = [(b.ew("add", low, b.scalar(j - 1, "i32")), w) for j, w in enumerate(weights)]
        else:
            high = b.ew("minimum", b.ew("add", low, b.scalar(1, "i32")), b.scalar(i - 1, "i32"))
            taps = [(low, b.ew("sub", b.scalar(1.0, "f32"), frac)), (high, frac)]
        x = _weighted(b, x, dim, taps)
    return x


def _check(x: Value, nd: int, sizes) -> None:
    if len(x.shape) < nd + 1 or len(sizes) != nd or min(sizes) < 1 or \
            math.prod(x.shape[len(x.shape) - nd:]) < 1:
        raise CompileError(f"upsampling {list(x.shape)} over {nd} dims to {list(sizes)}")


def _vec(nd: int, exact: bool | None = None, cubic: bool = False):
    """The lowering of a .vec op: (x, output_size, scale_factors) for nearest modes
    (`exact` set), (x, output_size, align_corners, scale_factors) for the others."""
    def nearest(b: GraphBuilder, x: Value, output_size, scale_factors) -> Value:
        sizes, scales = output_sizes(x.shape[len(x.shape) - nd:], output_size, scale_factors)
        _check(x, nd, sizes)
        return _nearest(b, x, sizes, scales, exact)

    def interpolating(b: GraphBuilder, x: Value, output_size, align_corners,
                      scale_factors) -> Value:
        sizes, scales = output_sizes(x.shape[len(x.shape) - nd:], output_size, scale_factors)
        _check(x, nd, sizes)
        return _interpolate(b, x, sizes, scales, bool(align_corners), cubic)

    return nearest if exact is not None else interpolating


def _default(nd: int, exact: bool | None = None, cubic: bool = False):
    """The lowering of a .default op: (x, output_size, [align_corners,] *scales), one
    scale (or None) per dim."""
    def nearest(b: GraphBuilder, x: Value, output_size, *scales) -> Value:
        scales = list(scales) + [None] * (nd - len(scales))
        _check(x, nd, list(output_size))
        return _nearest(b, x, list(output_size), scales, exact)

    def interpolating(b: GraphBuilder, x: Value, output_size, align_corners,
                      *scales) -> Value:
        scales = list(scales) + [None] * (nd - len(scales))
        _check(x, nd, list(output_size))
        return _interpolate(b, x, list(output_size), scales, bool(align_corners), cubic)

    return nearest if exact is not None else interpolating


for _nd in (1, 2, 3):
    register(f"aten.upsample_nearest{_nd}d.vec")(_vec(_nd, exact=False))
    register(f"aten.upsample_nearest{_nd}d.default")(_default(_nd, exact=False))
    register(f"aten._upsample_nearest_exact{_nd}d.vec")(_vec(_nd, exact=True))
    register(f"aten._upsample_nearest_exact{_nd}d.default")(_default(_nd, exact=True))
for _nd, _name in ((1, "upsample_linear1d"), (2, "upsample_bilinear2d"),
                   (3, "upsample_trilinear3d")):
    register(f"aten.{_name}.vec")(_vec(_nd))
    register(f"aten.{_name}.default")(_default(_nd))
register("aten.upsample_bicubic2d.vec")(_vec(2, cubic=True))
register("aten.upsample_bicubic2d.default")(_default(2, cubic=True))
