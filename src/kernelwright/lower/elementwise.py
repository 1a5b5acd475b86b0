"""Elementwise ATen ops: arithmetic, comparisons, activations, casts.

Each lowers to one `ew` primitive (or a few), with PyTorch's type promotion:
operands are cast to the result dtype first, so the WGSL never mixes types.
"""

from __future__ import annotations

import functools
import math

from ..codegen.codegen import OPS
from ..dtypes import device_dtype_of_torch
from ..ir.ir import CompileError, GraphBuilder, Value, promote
from .registry import register


def device_dtype(torch_dtype) -> str:
    dt = device_dtype_of_torch(torch_dtype)
    if dt is None:
        raise CompileError(f"dtype {torch_dtype} is not supported")
    return dt


def as_value(b: GraphBuilder, x, dtype: str | None = None) -> Value:
    if isinstance(x, Value):
        return x if dtype is None else as_dtype(b, x, dtype)
    return b.scalar(x) if dtype is None else b.scalar(_convert(x, dtype), dtype)


def _convert(x, dtype: str):
    return bool(x) if dtype == "bool" else int(x) if dtype == "i32" else float(x)


def as_dtype(b: GraphBuilder, v: Value, dtype: str) -> Value:
    if v.dtype == dtype:
        return v
    if v.kind == "scalar":
        return b.scalar(_convert(v.scalar, dtype), dtype)
    return b.cast(v, dtype)


def result_dtype(*xs) -> str:
    """PyTorch's promotion, simplified: tensors decide unless a scalar is a wider kind."""
    tensors = [x.dtype for x in xs if isinstance(x, Value) and x.kind != "scalar"]
    scalars = [x.dtype if isinstance(x, Value) else
               "bool" if isinstance(x, bool) else "i32" if isinstance(x, int) else "f32"
               for x in xs if not isinstance(x, Value) or x.kind == "scalar"]
    base = promote(*tensors) if tensors else promote(*scalars)
    if scalars and promote(base, *scalars) == "f32" and base != "f32":
        return "f32"
    return base


def binary(b: GraphBuilder, fn: str, x, y, out_dtype: str | None = None) -> Value:
    dt = result_dtype(x, y)
    return b.ew(fn, as_value(b, x, dt), as_value(b, y, dt), dtype=out_dtype or dt)


def unary_float(b: GraphBuilder, fn: str, x: Value, **params) -> Value:
    return b.ew(fn, as_dtype(b, x, "f32"), dtype="f32", **params)


def _scaled(b, x, alpha):
    return x if alpha == 1 else binary(b, "mul", x, alpha)


@register("aten.add.Tensor", "aten.add.Scalar")
def add(b, x, y, alpha=1):
    return binary(b, "add", x, _scaled(b, y, alpha))


@register("aten.sub.Tensor", "aten.sub.Scalar")
def sub(b, x, y, alpha=1):
    return binary(b, "sub", x, _scaled(b, y, alpha))


@register("aten.rsub.Scalar", "aten.rsub.Tensor")
def rsub(b, x, y, alpha=1):
    return binary(b, "sub", y, _scaled(b, x, alpha))


@register("aten.mul.Tensor", "aten.mul.Scalar")
def mul(b, x, y):
    if result_dtype(x, y) == "bool":
        return binary(b, "and", x, y)
    return binary(b, "mul", x, y)


@register("aten.div.Tensor", "aten.div.Scalar")
def div(b, x, y):
    return b.ew("div", as_value(b, x, "f32"), as_value(b, y, "f32"))


@register("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def div_mode(b, x, y, rounding_mode=None):
    dt = result_dtype(x, y)
    q = div(b, x, y)
    if rounding_mode is None:
        return q
    q = b.ew("floor" if rounding_mode == "floor" else "trunc", q)
    return as_dtype(b, q, dt)


@register("aten.floor_divide.default")
def floor_divide(b, x, y):
    return div_mode(b, x, y, "floor")


@register("aten.fmod.Tensor", "aten.fmod.Scalar")
def fmod(b, x, y):
    dt = result_dtype(x, y)
    return as_dtype(b, b.ew("fmod", as_value(b, x, "f32"), as_value(b, y, "f32")), dt)


@register("aten.remainder.Tensor", "aten.remainder.Scalar")
def remainder(b, x, y):
    dt = result_dtype(x, y)
    return as_dtype(b, b.ew("remainder", as_value(b, x, "f32"), as_value(b, y, "f32")), dt)


@register("aten.pow.Tensor_Scalar")
def pow_scalar(b, x, exponent):
    if exponent == 1:
        return x
    return b.ew("pow", as_dtype(b, x, "f32"), dtype="f32", exponent=float(exponent))


@register("aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def pow_tensor(b, x, y):
    return b.ew("pow_tensor", as_value(b, x, "f32"), as_value(b, y, "f32"))


def _nan_propagating(b, x, y, fn):
    """torch.maximum / minimum (torch.max(a, b)): NaN when either operand is, as PyTorch;
    WGSL's max and min may return the other operand."""
    m = binary(b, fn, x, y)
    if m.dtype != "f32":
        return m
    x, y = as_value(b, x, "f32"), as_value(b, y, "f32")
    either = b.ew("or", b.ew("isnan", x, dtype="bool"), b.ew("isnan", y, dtype="bool"))
    return b.ew("where", either, binary(b, "add", x, y), m)


register("aten.maximum.default")(lambda b, x, y: _nan_propagating(b, x, y, "maximum"))
register("aten.minimum.default")(lambda b, x, y: _nan_propagating(b, x, y, "minimum"))

for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    register(f"aten.{_op}.Tensor", f"aten.{_op}.Scalar")(
        lambda b, x, y, _op=_op: binary(b, _op, x, y, out_dtype="bool"))

for _op, _fn in [("logical_and", "and"), ("logical_or", "or"), ("logical_xor", "xor")]:
    register(f"aten.{_op}.default")(
        lambda b, x, y, _fn=_fn: b.ew(_fn, as_value(b, x, "bool"), as_value(b, y, "bool")))

# Bitwise ops: logical on bool, on the bits of integers (int64 held as i32).
for _op, _fn in [("and", "and"), ("or", "or"), ("xor", "xor")]:
    register(f"aten.bitwise_{_op}.Tensor", f"aten.bitwise_{_op}.Scalar")(
        lambda b, x, y, _fn=_fn: binary(b, _fn if result_dtype(x, y) == "bool" else f"bit{_fn}",
                                        x, y))


@register("aten.logical_not.default")
def logical_not(b, x):
    return b.ew("not", as_dtype(b, x, "bool"))


@register("aten.bitwise_not.default")
def bitwise_not(b, x):
    return b.ew("not", x) if x.dtype == "bool" else b.ew("bitnot", x)


def _nan_to(b, x, y, fn):
    """fmax / fmin: the other operand where one is NaN."""
    m = binary(b, fn, x, y)
    if m.dtype != "f32":
        return m
    x, y = as_value(b, x, "f32"), as_value(b, y, "f32")
    return b.ew("where", b.ew("isnan", x, dtype="bool"), y,
                b.ew("where", b.ew("isnan", y, dtype="bool"), x, m))


register("aten.fmax.default")(lambda b, x, y: _nan_to(b, x, y, "maximum"))
register("aten.fmin.default")(lambda b, x, y: _nan_to(b, x, y, "minimum"))


@register("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther",
          "aten.where.Scalar")
def where(b, cond, x, y):
    dt = result_dtype(x, y)
    return b.ew("where", as_dtype(b, cond, "bool"), as_value(b, x, dt), as_value(b, y, dt))


def table_op(b: GraphBuilder, x: Value, fn: str) -> Value:
    """The lowering of an ATen op that is one entry of codegen.OPS alone: computed in f32
    (its `compute` "f32"), in the input's dtype ("same"), or rounding f32 ("float":
    integers are already whole)."""
    compute = OPS[fn].compute
    if compute == "f32":
        return unary_float(b, fn, x)
    if compute == "float" and x.dtype != "f32":
        return x
    return b.ew(fn, x)


for _fn, _op in OPS.items():
    for _aten in _op.aten:
        register(f"aten.{_aten}.default")(functools.partial(table_op, fn=_fn))


@register("aten.log10.default")
def log10(b, x):
    return binary(b, "mul", unary_float(b, "log", x), 1 / math.log(10))


@register("aten.relu.default")
def relu(b, x):
    return b.ew("relu", x) if x.dtype == "f32" else binary(b, "maximum", x, 0)


@register("aten.silu.default")
def silu(b, x):
    return unary_float(b, "silu", x)


@register("aten.log_sigmoid_forward.default")
def log_sigmoid_forward(b, x):
    # min(x, 0) - log1p(exp(-|x|)); the second output is a buffer for the backward.
    x = as_dtype(b, x, "f32")
    soft = unary_float(b, "log1p", unary_float(b, "exp", b.ew("neg", b.ew("abs", x))))
    return binary(b, "sub", binary(b, "minimum", x, 0.0), soft), None


@register("aten.gelu.default")
def gelu(b, x, approximate="none"):
    return unary_float(b, "gelu_tanh" if approximate == "tanh" else "gelu", x)


@register("aten.softplus.default")
def softplus(b, x, beta=1, threshold=20):
    return unary_float(b, "softplus", x, beta=beta, threshold=threshold)


@register("aten.elu.default")
def elu(b, x, alpha=1.0, scale=1.0, input_scale=1.0):
    return unary_float(b, "elu", x, alpha=alpha, scale=scale, input_scale=input_scale)


@register("aten.leaky_relu.default")
def leaky_relu(b, x, negative_slope=0.01):
    return unary_float(b, "leaky_relu", x, slope=negative_slope)


@register("aten.rrelu_with_noise_functional.default", "aten.rrelu_with_noise.default")
def rrelu_with_noise(b, x, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    if training:
        raise CompileError("rrelu in training mode is random; call model.eval() first")
    return leaky_relu(b, x, (lower + upper) / 2), noise


@register("aten.hardtanh.default")
def hardtanh(b, x, min_val=-1.0, max_val=1.0):
    return clamp(b, x, min_val, max_val)


@register("aten.clamp.default")
def clamp(b, x, min=None, max=None):
    dt = result_dtype(x, *(v for v in (min, max) if v is not None))
    return b.ew("clamp", as_dtype(b, x, dt), lo=min, hi=max, dtype=dt) if (
        min is not None or max is not None) else x


@register("aten.clamp_min.default")
def clamp_min(b, x, min):
    return clamp(b, x, min, None)


@register("aten.clamp_max.default")
def clamp_max(b, x, max):
    return clamp(b, x, None, max)


@register("aten.clamp.Tensor")
def clamp_tensor(b, x, min=None, max=None):
    if min is not None:
        x = binary(b, "maximum", x, min)
    if max is not None:
        x = binary(b, "minimum", x, max)
    return x


@register("aten.hardsigmoid.default")
def hardsigmoid(b, x):
    return clamp(b, binary(b, "add", binary(b, "div", x, 6.0), 0.5), 0.0, 1.0)


@register("aten.hardswish.default")
def hardswish(b, x):
    return binary(b, "mul", x, hardsigmoid(b, x))


@register("aten._to_copy.default")
def to_copy(b, x, dtype=None, **_):
    return x if dtype is None else as_dtype(b, x, device_dtype(dtype))


@register("aten.clone.default", "aten.alias.default", "aten.detach.default",
          "aten.lift_fresh_copy.default", "aten.contiguous.default")
def identity(b, x, **_):
    return x


@register("aten.copy.default")
def copy(b, x, src, non_blocking=False):
    """The functional copy_ (functionalized graphs, e.g. circular padding's): src cast to
    x's dtype and broadcast to x's shape; x's values are not read."""
    if not isinstance(src, Value):
        return full_like(b, x, src)
    return b.expand(as_dtype(b, src, x.dtype), x.shape)


@register("aten.scalar_tensor.default")
def scalar_tensor(b, s, dtype=None, **_):
    return b.scalar(s, device_dtype(dtype) if dtype is not None else "f32")


@register("aten.full.default")
def full(b, size, fill_value, dtype=None, **_):
    dt = device_dtype(dtype) if dtype is not None else result_dtype(fill_value)
    return b.expand(b.scalar(_convert(fill_value, dt), dt), tuple(size))


@register("aten.empty.memory_format", "aten.empty_permuted.default")
def empty(b, size, *layout, dtype=None, **_):
    # Uninitialized memory may hold anything; zeros need no buffer. Decompositions
    # create one only to take its shape (full_like(empty, 1.0)).
    return full(b, size, 0, dtype if dtype is not None else "torch.float32")


@register("aten.new_empty_strided.default", "aten.new_empty.default")
def new_empty(b, x, size, *layout, dtype=None, **_):
    # zeros of x's dtype (unless given), as `empty`; strides are a host layout, and
    # device buffers are dense
    dt = x.dtype if dtype is None else device_dtype(dtype)
    return b.expand(b.scalar(_convert(0, dt), dt), tuple(size))


@register("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def arange(b, *args, dtype=None, **_):
    start, end, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    if dtype is not None:
        dt = device_dtype(dtype)
    else:
        dt = "f32" if any(isinstance(a, float) for a in (start, end, step)) else "i32"
    if step == 0:
        raise CompileError("arange step must be nonzero")
    n = max(0, math.ceil((end - start) / step))
    return b.iota((n,), 0, _convert(start, dt), _convert(step, dt), dt)


@register("aten.isnan.default")
def isnan(b, x):
    return b.ew("isnan", x, dtype="bool") if x.dtype == "f32" else _false_like(b, x)


@register("aten.isinf.default")
def isinf(b, x):
    return b.ew("isinf", x, dtype="bool") if x.dtype == "f32" else _false_like(b, x)


def _false_like(b, x):
    return b.expand(b.scalar(False, "bool"), x.shape)


@register("aten.isfinite.default")
def isfinite(b, x):
    return logical_not(b, b.ew("or", isnan(b, x), isinf(b, x)))


@register("aten.full_like.default")
def full_like(b, x, fill_value, dtype=None, **_):
    dt = device_dtype(dtype) if dtype is not None else x.dtype
    return b.expand(b.scalar(_convert(fill_value, dt), dt), x.shape)


@register("aten.zeros_like.default")
def zeros_like(b, x, dtype=None, **kw):
    return full_like(b, x, 0, dtype)


@register("aten.ones_like.default")
def ones_like(b, x, dtype=None, **kw):
    return full_like(b, x, 1, dtype)
