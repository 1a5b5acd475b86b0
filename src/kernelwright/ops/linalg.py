"""Matrix products, convolution and pooling: the ATen ops that map onto the
matmul, conv2d and pool2d templates (bias and scaling fuse as epilogues)."""

from __future__ import annotations

from ..ir import CompileError, GraphBuilder, Value
from . import register
from .elementwise import binary


@register("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def matmul(b: GraphBuilder, x: Value, y: Value):
    vec_x, vec_y = len(x.shape) == 1, len(y.shape) == 1
    if vec_x:
        x = b.reshape(x, (1, x.shape[0]))
    if vec_y:
        y = b.reshape(y, (y.shape[0], 1))
    out = b.matmul(x, y)
    if vec_x or vec_y:
        shape = list(out.shape)
        if vec_y:
            shape.pop(-1)
        if vec_x:
            shape.pop(-1 if vec_y else -2)
        out = b.reshape(out, shape)
    return out


@register("aten.mv.default")
def mv(b, x, v):
    return matmul(b, x, v)


@register("aten.dot.default")
def dot(b, x, y):
    return matmul(b, x, y)


@register("aten.addmm.default", "aten.baddbmm.default")
def addmm(b, bias, x, y, beta=1, alpha=1):
    prod = matmul(b, x, y)
    if alpha != 1:
        prod = binary(b, "mul", prod, alpha)
    if beta == 0:
        return prod
    return binary(b, "add", prod, bias if beta == 1 else binary(b, "mul", bias, beta))


@register("aten.addmv.default")
def addmv(b, bias, x, v, beta=1, alpha=1):
    return addmm(b, bias, x, v, beta, alpha)


@register("aten.linear.default")
def linear(b, x, w, bias=None):
    out = matmul(b, x, b.transpose(w, 0, 1))
    return out if bias is None else binary(b, "add", out, bias)


@register("aten.convolution.default")
def convolution(b, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise CompileError("transposed convolution has no kernel yet")
    if len(x.shape) != 4:
        raise CompileError(f"convolution over {len(x.shape) - 2} spatial dims has no kernel yet "
                           "(conv2d only)")
    out = b.conv2d(x, w, stride, padding, dilation, groups)
    if bias is not None:
        out = binary(b, "add", out, b.reshape(bias, (1, -1, 1, 1)))
    return out


def _pair(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        v = default
    if isinstance(v, int):
        return [v, v]
    return list(v) if len(v) == 2 else [v[0], v[0]]


def _as_4d(b, x):
    return b.reshape(x, (1,) + x.shape) if len(x.shape) == 3 else x


@register("aten.max_pool2d_with_indices.default")
def max_pool2d_with_indices(b, x, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False):
    y = max_pool2d(b, x, kernel_size, stride, padding, dilation, ceil_mode)
    return y, None  # indices are not computed; capture rejects any use of them


@register("aten.max_pool2d.default")
def max_pool2d(b, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    k = _pair(kernel_size)
    y = b.pool2d(_as_4d(b, x), "max", k, _pair(stride, k), _pair(padding), _pair(dilation),
                 ceil_mode)
    return b.reshape(y, y.shape[1:]) if len(x.shape) == 3 else y


@register("aten.avg_pool2d.default")
def avg_pool2d(b, x, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    k = _pair(kernel_size)
    y = b.pool2d(_as_4d(b, x), "avg", k, _pair(stride, k), _pair(padding), [1, 1], ceil_mode,
                 count_include_pad, divisor_override)
    return b.reshape(y, y.shape[1:]) if len(x.shape) == 3 else y
