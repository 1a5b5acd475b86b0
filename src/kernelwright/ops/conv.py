"""Convolution: aten.convolution in 1, 2 and 3 spatial dims, plain and transposed, onto
the one `conv` primitive (kernels/conv.wgsl, kernels/conv_transpose.wgsl). The bias
is an elementwise add that fuses into the kernel's epilogue; F.conv*d's string
padding ('same') arrives already lowered to an explicit pad by torch.export."""

from __future__ import annotations

from ..ir import CompileError, GraphBuilder, Value
from . import register
from .elementwise import binary


def per_dim(v, nd: int, name: str) -> list[int]:
    """An int or a list of ints (one, or one per spatial dim) as one int per dim."""
    if isinstance(v, int):
        return [v] * nd
    v = [int(e) for e in v]
    if len(v) == 1:
        return v * nd
    if len(v) != nd:
        raise CompileError(f"{name} {v} for {nd} spatial dims")
    return v


@register("aten.convolution.default")
def convolution(b: GraphBuilder, x: Value, w: Value, bias, stride, padding, dilation,
                transposed, output_padding, groups):
    nd = len(x.shape) - 2
    if nd not in (1, 2, 3):
        raise CompileError(f"convolution of a {len(x.shape)}-d input: only 1 to 3 spatial "
                           "dims (input [N, C, *S]) are supported")
    if x.dtype != "f32" or w.dtype != "f32":
        raise CompileError(f"convolution of {x.dtype} by {w.dtype}: f32 only")
    out = b.conv(x, w, per_dim(stride, nd, "stride"), per_dim(padding, nd, "padding"),
                 per_dim(dilation, nd, "dilation"), groups, bool(transposed),
                 per_dim(output_padding, nd, "output_padding"))
    if bias is not None:
        out = binary(b, "add", out, b.reshape(bias, (1, -1) + (1,) * nd))
    return out
