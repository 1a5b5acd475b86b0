"""Normalizations: layer norm, batch norm (inference and training), instance norm
(batch norm of a [1, N*C, ...] view), group norm and vector norms, as reductions plus
an elementwise kernel that the scale and shift fuse into. RMS norm and L1/L2
normalization (F.normalize) decompose into these and elementwise ops on export."""

from __future__ import annotations

import math

from ..ir.ir import CompileError, GraphBuilder
from .elementwise import as_dtype, binary, device_dtype, unary_float
from .reductions import _dims, var_mean
from .registry import register


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


def _channel_shape(x):
    return (1, x.shape[1]) + (1,) * (len(x.shape) - 2)


def _affine(b, y, weight, bias, shape):
    if weight is not None:
        y = binary(b, "mul", y, b.reshape(weight, shape))
    if bias is not None:
        y = binary(b, "add", y, b.reshape(bias, shape))
    return y


def _batch_stats(b, x, weight, bias, eps):
    """Batch norm with the batch's statistics (training mode): the output, the mean and
    1/std per channel, and the biased variance per channel."""
    if len(x.shape) < 2:
        raise CompileError(f"batch norm of a {len(x.shape)}-d input: need [N, C, ...]")
    dims = [0] + list(range(2, len(x.shape)))
    v, m = var_mean(b, x, dims, correction=0, keepdim=True)
    rstd = unary_float(b, "rsqrt", binary(b, "add", v, eps))
    y = _affine(b, binary(b, "mul", binary(b, "sub", x, m), rstd), weight, bias,
                _channel_shape(x))
    c = (x.shape[1],)
    return y, b.reshape(m, c), b.reshape(rstd, c), b.reshape(v, c)


def _running_update(b, x, stat, batch, momentum, unbias=1.0):
    """(1 - momentum) * running + momentum * batch statistic, as PyTorch's update."""
    new = binary(b, "mul", batch, momentum * unbias)
    return binary(b, "add", binary(b, "mul", stat, 1.0 - momentum), new)


def _n_per_channel(x) -> int:
    return x.numel // x.shape[1]


@register("aten._native_batch_norm_legit_functional.default")
def batch_norm_functional(b, x, weight, bias, running_mean, running_var, training, momentum,
                          eps):
    """Returns (out, mean, rstd, new running mean, new running var). The running-stat
    updates are computed; whether they reach the module's buffers is capture's concern."""
    if not training:
        y = batch_norm_inference(b, x, weight, bias, running_mean, running_var, momentum, eps)[0]
        return y, None, None, running_mean, running_var
    y, m, rstd, v = _batch_stats(b, x, weight, bias, eps)
    n = _n_per_channel(x)
    new_mean = _running_update(b, x, running_mean, m, momentum)
    new_var = _running_update(b, x, running_var, v, momentum, n / max(1, n - 1))
    return y, m, rstd, new_mean, new_var


@register("aten._native_batch_norm_legit.default", "aten.native_batch_norm.default")
def batch_norm_legit(b, x, weight, bias, running_mean, running_var, training, momentum, eps):
    # The in-place running-stat update of training mode has no functional output here;
    # torch.export functionalizes modules to the _functional variant above.
    if not training:
        return batch_norm_inference(b, x, weight, bias, running_mean, running_var, momentum,
                                    eps)
    return _batch_stats(b, x, weight, bias, eps)[:3]


@register("aten._native_batch_norm_legit.no_stats")
def batch_norm_no_stats(b, x, weight, bias, training, momentum, eps):
    if not training:
        raise CompileError("batch norm in eval mode without running statistics")
    return _batch_stats(b, x, weight, bias, eps)[:3]


@register("aten.native_group_norm.default")
def native_group_norm(b, x, weight, bias, n, c, hxw, group, eps):
    if c % group or x.numel != n * c * hxw:
        raise CompileError(f"group norm of {list(x.shape)} in {group} groups")
    xg = b.reshape(as_dtype(b, x, "f32"), (n, group, (c // group) * hxw))
    v, m = var_mean(b, xg, [2], correction=0, keepdim=True)
    rstd = unary_float(b, "rsqrt", binary(b, "add", v, eps))
    y = b.reshape(binary(b, "mul", binary(b, "sub", xg, m), rstd), x.shape)
    y = _affine(b, y, weight, bias, _channel_shape(x) if len(x.shape) >= 2 else (c,))
    return y, b.reshape(m, (n, group)), b.reshape(rstd, (n, group))


@register("aten.linalg_vector_norm.default")
def linalg_vector_norm(b, x, ord=2, dim=None, keepdim=False, dtype=None):
    """sum(|x|^p)^(1/p) over dim; p = inf / -inf: max / min of |x|; p = 0: the count
    of nonzeros."""
    x = as_dtype(b, x, device_dtype(dtype) if dtype is not None else "f32")
    dims = _dims(x, dim)
    a = b.ew("abs", x)
    if ord == math.inf or ord == -math.inf:
        return b.reduce(a, "max" if ord > 0 else "min", dims, keepdim)
    if ord == 0:
        nonzero = b.ew("cast", binary(b, "ne", x, 0.0, out_dtype="bool"), dtype="f32")
        return b.reduce(nonzero, "sum", dims, keepdim)
    if ord == 1:
        return b.reduce(a, "sum", dims, keepdim)
    if ord == 2:
        return unary_float(b, "sqrt", b.reduce(binary(b, "mul", x, x), "sum", dims, keepdim))
    s = b.reduce(b.ew("pow", a, exponent=float(ord)), "sum", dims, keepdim)
    return b.ew("pow", s, exponent=1.0 / float(ord))
