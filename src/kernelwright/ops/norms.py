"""Normalizations: layer norm and batch norm (inference), as reductions plus an
elementwise kernel that the scale and shift fuse into."""

from __future__ import annotations

from ..ir import GraphBuilder
from . import register
from .elementwise import binary, unary_float
from .reductions import var_mean


@register("aten.native_layer_norm.default")
def native_layer_norm(b: GraphBuilder, x, normalized_shape, weight, bias, eps):
    dims = list(range(len(x.shape) - len(normalized_shape), len(x.shape)))
    v, m = var_mean(b, x, dims, correction=0, keepdim=True)
    rstd = unary_float(b, "rsqrt", binary(b, "add", v, eps))
    y = binary(b, "mul", binary(b, "sub", x, m), rstd)
    if weight is not None:
        y = binary(b, "mul", y, weight)
    if bias is not None:
        y = binary(b, "add", y, bias)
    return y, m, rstd


@register("aten._native_batch_norm_legit_no_training.default")
def batch_norm_inference(b, x, weight, bias, running_mean, running_var, momentum, eps):
    shape = (1, x.shape[1]) + (1,) * (len(x.shape) - 2)
    scale = unary_float(b, "rsqrt", binary(b, "add", b.reshape(running_var, shape), eps))
    if weight is not None:
        scale = binary(b, "mul", scale, b.reshape(weight, shape))
    y = binary(b, "mul", binary(b, "sub", x, b.reshape(running_mean, shape)), scale)
    if bias is not None:
        y = binary(b, "add", y, b.reshape(bias, shape))
    return y, None, None
