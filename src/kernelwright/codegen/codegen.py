"""Codegen: one scheduled kernel (schedule.py) to WGSL text.

Every kernel is a template from kernels/*.wgsl filled with generated functions:

* a *loader* per template input, `fn load_x(i0: i32, ...) -> T`, which computes the
  input's element at a multi-index by inlining the elementwise and movement ops
  between the input and the buffers it finally reads (prologue fusion);
* an `epilogue(acc, gi)`, which computes the kernel's stored value from the
  template's result `acc` at flat output index `gi` (epilogue fusion). For a plain
  elementwise kernel the whole computation is the epilogue.

`Emitter` does the inlining. It walks the IR from a value down to materialized
buffers, writing one `let` per value and index (so shared subexpressions are
computed once) and turning movement ops into index arithmetic. An `Index` carries
the per-dim expressions, the flat (row-major) expression, or both, so that
reshapes of contiguous data cost nothing.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from string import Template

import numpy as np

from ..dtypes import DEVICE_DTYPES, element_type, is_packed, wgsl_type
from ..ir.ir import MOVEMENT_OPS, CompileError, Node, Value, inline_sum

KERNEL_DIR = Path(__file__).parent.parent / "kernels"


def template(name: str) -> Template:
    return Template(_template_text(name))


@functools.cache
def _template_text(name: str) -> str:
    """A kernels/*.wgsl file's text, read once per process."""
    return (KERNEL_DIR / f"{name}.wgsl").read_text()


# WGSL forbids a constant expression whose value is not finite, and Dawn's compiler
# (Tint) enforces it: `bitcast<f32>(0xff800000u)` is refused there (naga folds it to
# -inf). Infinities and NaN are therefore the bits passed through a function call,
# which is never a constant expression: F32_BITS, declared in each kernel that calls
# it (with_f32_bits). A driver's compiler still sees through the call and may assume no
# infinities (WGSL allows it): Mesa 26.1's folds abs(-inf - b) to -inf. Kernels test
# infinities and NaN on their bits (is_nan) and no result rests on arithmetic with one.
F32_BITS = "kw_f32_bits"
F32_BITS_FN = f"\nfn {F32_BITS}(bits: u32) -> f32 {{\n    return bitcast<f32>(bits);\n}}\n"
NEG_INF, POS_INF, NAN = (f"{F32_BITS}({b}u)" for b in ("0xff800000", "0x7f800000", "0x7fc00000"))


def with_f32_bits(source: str) -> str:
    """A kernel's WGSL with F32_BITS declared where it calls it."""
    if f"{F32_BITS}(" in source and f"fn {F32_BITS}(" not in source:
        return source + F32_BITS_FN
    return source


def literal(x, dtype: str) -> str:
    if dtype == "bool":
        return "true" if x else "false"
    if dtype == "i32":
        return f"i32({int(x)})"
    x = float(np.float32(x))
    if math.isnan(x):
        return NAN
    if math.isinf(x):
        return POS_INF if x > 0 else NEG_INF
    return f"f32({x!r})"


# -- elementwise functions ------------------------------------------------------------
def _f(p, key):
    return literal(p[key], "f32")


def _pow(a, p):
    e = float(p["exponent"])
    if e == int(e) and abs(e) <= 4:
        n = int(abs(e))
        body = "*".join([f"{a}"] * n) if n else "1.0"
        return f"(1.0 / ({body}))" if e < 0 else f"({body})"
    if e == 0.5:
        return f"sqrt({a})"
    if e == int(e):  # integral exponent: sign follows odd powers, as in PyTorch
        mag = f"pow(abs({a}), {literal(e, 'f32')})"
        return f"select({mag}, -{mag}, {a} < 0.0)" if int(e) % 2 else mag
    return f"pow({a}, {literal(e, 'f32')})"


def _cast(a, p, src: str, dst: str) -> str:
    if src == dst:
        return a
    if dst == "bool":
        return f"({a} != {literal(0, src)})"
    if src == "bool":
        return f"select({literal(0, dst)}, {literal(1, dst)}, {a})"
    return f"{wgsl_type(dst)}({a})"


# The elementwise ops of the IR (`GraphBuilder.ew`), one entry each: the WGSL expression
# of the typed argument expressions (comparisons produce bool) and the node's attributes
# `p`; the cost class, which fusion reads (schedule.heavy_prologues: a TRANSCENDENTAL
# op is worth a buffer rather than a recomputation at every load); the WGSL helpers
# it calls; and the ATen ops that lower to it alone (lower/elementwise.py registers
# them: `compute` "f32" in f32, "same" in the input's dtype, "float" rounding: integers
# unchanged). A new unary op is one entry here plus its test.
CHEAP = "cheap"
TRANSCENDENTAL = "transcendental"  # exp, log, trigonometry: dear to recompute per load
COMPUTE = ("f32", "same", "float")


@dataclass(frozen=True)
class Op:
    """One elementwise op: WGSL expression, cost class, helpers, the ATen ops it lowers."""

    wgsl: Callable[..., str]
    cost: str = CHEAP
    aten: tuple[str, ...] = ()  # ATen op names ("exp": aten.exp.default)
    compute: str = "f32"
    helpers: tuple[str, ...] = ()


OPS: dict[str, Op] = {
    "copy": Op(lambda a, p: a),
    "add": Op(lambda a, b, p: f"({a} + {b})"),
    "sub": Op(lambda a, b, p: f"({a} - {b})"),
    "mul": Op(lambda a, b, p: f"({a} * {b})"),
    "div": Op(lambda a, b, p: f"({a} / {b})"),
    "floordiv": Op(lambda a, b, p: f"floor({a} / {b})"),
    "fmod": Op(lambda a, b, p: f"({a} - trunc({a} / {b}) * {b})"),
    "remainder": Op(lambda a, b, p: f"({a} - floor({a} / {b}) * {b})"),
    "maximum": Op(lambda a, b, p: f"max({a}, {b})"),
    "minimum": Op(lambda a, b, p: f"min({a}, {b})"),
    "pow_tensor": Op(lambda a, b, p: f"pow({a}, {b})", TRANSCENDENTAL),
    "atan2": Op(lambda a, b, p: f"atan2({a}, {b})", TRANSCENDENTAL),
    "eq": Op(lambda a, b, p: f"({a} == {b})"),
    "ne": Op(lambda a, b, p: f"({a} != {b})"),
    "lt": Op(lambda a, b, p: f"({a} < {b})"),
    "le": Op(lambda a, b, p: f"({a} <= {b})"),
    "gt": Op(lambda a, b, p: f"({a} > {b})"),
    "ge": Op(lambda a, b, p: f"({a} >= {b})"),
    "and": Op(lambda a, b, p: f"({a} && {b})"),
    "or": Op(lambda a, b, p: f"({a} || {b})"),
    "xor": Op(lambda a, b, p: f"({a} != {b})"),
    "bitand": Op(lambda a, b, p: f"({a} & {b})"),
    "bitor": Op(lambda a, b, p: f"({a} | {b})"),
    "bitxor": Op(lambda a, b, p: f"({a} ^ {b})"),
    "bitnot": Op(lambda a, p: f"(~{a})"),
    "not": Op(lambda a, p: f"(!{a})"),
    "where": Op(lambda c, a, b, p: f"select({b}, {a}, {c})"),
    "neg": Op(lambda a, p: f"(-{a})", aten=("neg",), compute="same"),
    "abs": Op(lambda a, p: f"abs({a})", aten=("abs",), compute="same"),
    "sign": Op(lambda a, p: f"sign({a})", aten=("sign",), compute="same"),
    "exp": Op(lambda a, p: f"exp({a})", TRANSCENDENTAL, aten=("exp",)),
    "exp2": Op(lambda a, p: f"exp2({a})", TRANSCENDENTAL, aten=("exp2",)),
    "expm1": Op(lambda a, p: f"(exp({a}) - 1.0)", TRANSCENDENTAL, aten=("expm1",)),
    "log": Op(lambda a, p: f"log({a})", TRANSCENDENTAL, aten=("log",)),
    "log2": Op(lambda a, p: f"log2({a})", TRANSCENDENTAL, aten=("log2",)),
    "log1p": Op(lambda a, p: f"log(1.0 + {a})", TRANSCENDENTAL, aten=("log1p",)),
    "sqrt": Op(lambda a, p: f"sqrt({a})", aten=("sqrt",)),
    "rsqrt": Op(lambda a, p: f"inverseSqrt({a})", aten=("rsqrt",)),
    "reciprocal": Op(lambda a, p: f"(1.0 / {a})", aten=("reciprocal",)),
    "square": Op(lambda a, p: f"({a} * {a})"),
    "sin": Op(lambda a, p: f"sin({a})", TRANSCENDENTAL, aten=("sin",)),
    "cos": Op(lambda a, p: f"cos({a})", TRANSCENDENTAL, aten=("cos",)),
    "tan": Op(lambda a, p: f"tan({a})", TRANSCENDENTAL, aten=("tan",)),
    "atan": Op(lambda a, p: f"atan({a})", TRANSCENDENTAL, aten=("atan",)),
    "floor": Op(lambda a, p: f"floor({a})", aten=("floor",), compute="float"),
    "ceil": Op(lambda a, p: f"ceil({a})", aten=("ceil",), compute="float"),
    "round": Op(lambda a, p: f"round({a})", aten=("round",), compute="float"),
    "trunc": Op(lambda a, p: f"trunc({a})", aten=("trunc",), compute="float"),
    "erf": Op(lambda a, p: f"kw_erf({a})", TRANSCENDENTAL, aten=("erf",), helpers=("kw_erf",)),
    "tanh": Op(lambda a, p: f"tanh(clamp({a}, -15.0, 15.0))", TRANSCENDENTAL, aten=("tanh",)),
    "sigmoid": Op(lambda a, p: f"(1.0 / (1.0 + exp(-{a})))", TRANSCENDENTAL, aten=("sigmoid",)),
    "relu": Op(lambda a, p: _keep_nan(f"max({a}, {literal(0, 'f32')})", a, "f32")),
    "silu": Op(lambda a, p: f"({a} / (1.0 + exp(-{a})))", TRANSCENDENTAL),
    "gelu": Op(lambda a, p: f"(0.5 * {a} * (1.0 + kw_erf({a} * 0.7071067811865476)))",
              TRANSCENDENTAL, helpers=("kw_erf",)),
    "gelu_tanh": Op(lambda a, p: (
        f"(0.5 * {a} * (1.0 + tanh(clamp(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a}),"
        " -15.0, 15.0))))"), TRANSCENDENTAL),
    "softplus": Op(lambda a, p: (
        f"select(log(1.0 + exp({_f(p, 'beta')} * {a})) / {_f(p, 'beta')}, {a},"
        f" {_f(p, 'beta')} * {a} > {_f(p, 'threshold')})"), TRANSCENDENTAL),
    "elu": Op(lambda a, p: (
        f"select({_f(p, 'scale')} * {_f(p, 'alpha')} * (exp({a} * {_f(p, 'input_scale')}) - 1.0),"
        f" {_f(p, 'scale')} * {a}, {a} > 0.0)"), TRANSCENDENTAL),
    "leaky_relu": Op(lambda a, p: f"select({a} * {_f(p, 'slope')}, {a}, {a} > 0.0)"),
    "clamp": Op(lambda a, p: _keep_nan(
        (f"max({a}, {literal(p['lo'], p['dtype'])})" if p.get("lo") is not None else a)
        if p.get("hi") is None else
        f"min({_clamp_lo(a, p)}, {literal(p['hi'], p['dtype'])})", a, p["dtype"])),
    "pow": Op(lambda a, p: _pow(a, p), TRANSCENDENTAL),
    # NaN and infinity tests on the bits: `x != x` may be folded away by the compiler.
    "isnan": Op(lambda a, p: is_nan(a)),
    "isinf": Op(lambda a, p: f"((bitcast<u32>({a}) & 0x7fffffffu) == 0x7f800000u)"),
    # the same 32 bits read as the node's dtype (f32 <-> i32): lower/pool.py orders f32
    # values as integers
    "bitcast": Op(lambda a, p: f"bitcast<{wgsl_type(p['dtype'])}>({a})"),
    # a uniform f32 in [0, 1) from i32 (seed, draw, stream, element index): kernels/random.wgsl
    "uniform": Op(lambda s, d, k, i, p: f"kw_uniform(bitcast<u32>({s}), bitcast<u32>({d}), "
                  f"bitcast<u32>({k}), bitcast<u32>({i}))", helpers=("kw_uniform",)),
}


def is_nan(a: str) -> str:
    """WGSL for `a` (an f32) is NaN, tested on its bits: compilers may fold `a != a`."""
    return f"((bitcast<u32>({a}) & 0x7fffffffu) > 0x7f800000u)"


def _keep_nan(expr: str, a: str, dtype: str) -> str:
    """`expr`, or `a` itself where `a` is NaN (f32): PyTorch's relu and clamp keep NaN,
    WGSL's max and min may return the other operand."""
    if dtype != "f32":
        return expr
    return f"select({expr}, {a}, {is_nan(a)})"


def _clamp_lo(a, p):
    return f"max({a}, {literal(p['lo'], p['dtype'])})" if p.get("lo") is not None else a


HELPERS = {
    # WGSL has no erf. Near zero its Taylor series (error < 5e-7 for |x| < 0.5);
    # elsewhere the Chebyshev fit of erfc(|x|) = t*exp(-x^2 + P(t)), t = 1/(1 + |x|/2),
    # whose relative error is below 1.2e-7 (Numerical Recipes, 6.2). Both are far
    # inside the 1e-4 tolerance.
    "kw_erf": """
fn kw_erf(x: f32) -> f32 {
    let a = abs(x);
    if (a < 0.5) {
        let t = x * x;
        return x * (1.128379167 + t * (-0.376126389 + t * (0.112837917 + t * (-0.026866170
            + t * 0.005223977))));
    }
    let t = 1.0 / (1.0 + 0.5 * a);
    let y = t * exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277)))))))));
    return select(y - 1.0, 1.0 - y, x >= 0.0);
}
""",
    "kw_uniform": (KERNEL_DIR / "random.wgsl").read_text(),
    # narrowing f32 to a packed half type's bits, two elements a word (pack_pair)
    "half": "\n" + _template_text("half"),
}


class NotFusable(Exception):
    """The epilogue reads the template's result at another index than the one it stores."""


class NotInPlace(CompileError):
    """A kernel asked to read `KernelSource.inplace` from its own output reads it other
    than at the element it stores (or through a template that cannot)."""


# The lane index (KernelSource.lanes) of the value a kernel reads from its own output
INPLACE = -1


def lane_name(i: int) -> str:
    """The parameter carrying lane i (read i's element; INPLACE: the output's)."""
    return "xo" if i == INPLACE else f"x{i}"


@dataclass(eq=False)
class Index:
    shape: tuple[int, ...]
    dims: list[str] | None = None
    flat: str | None = None


def contiguous_strides(shape) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return strides[::-1]


class KernelSource:
    """The bindings and helper functions one kernel accumulates while it is generated."""

    def __init__(self, buffer_of, inplace: Value | None = None,
                 stores: dict[Value, Value] | None = None) -> None:
        self.buffer_of = buffer_of  # Value -> buffer id for materialized values
        # a value the kernel reads from its output's buffer, which holds it until the
        # kernel stores over it: read at the stored element only (a lane), never bound
        self.inplace = inplace
        # state updates the kernel computes inline and stores over their states at its own
        # element (schedule.joining_updates): new value -> state, both read and written
        # through the state's read_write binding (Emitter._own), never bound to read
        self.stores = dict(stores or {})
        self.stored_states = {s: new for new, s in self.stores.items()}
        self.reads: list[Value] = []
        self.views: list[int] = []  # reads bound a second time as array<vec4<f32>> (in<i>v4)
        self.helpers: set[str] = set()
        self.lanes: dict[int, Value] = {}  # reads passed to the functions as values: x<i>
        self.out_vec4 = False  # the output bound as array<vec4<T>> (16-byte stores)
        self.out_vec2 = False  # ... as array<vec2<T>> (two packed half words a store)
        # no element of the output outside its band is read (ir.read_only_in_band): the
        # template may leave them unwritten
        self.band_only = False
        # puts computed inline (Emitter._put: schedule.fuse's decoded K/V written by the
        # attention that reads them), whose new slices the template stores
        # (kernels/put.fused_puts), and the values bound read_write to hold them: st<i>
        self.puts: list[Node] = []
        self.writes: list[Value] = []

    def bind(self, v: Value) -> str:
        if v is self.inplace or v in self.stored_states:
            raise NotInPlace(f"{v} is read other than at the element the kernel stores")
        for i, r in enumerate(self.reads):
            if self.buffer_of(r) == self.buffer_of(v):
                return f"in{i}"
        self.reads.append(v)
        return f"in{len(self.reads) - 1}"

    def view4(self, v: Value) -> str:
        """A vec4 view of the (f32) buffer of `v`, for 16-byte loads: bound after the
        reads, before the output (`bindings`, `Generated.binding_ids`)."""
        i = int(self.bind(v)[2:])
        if i not in self.views:
            self.views.append(i)
        return f"in{i}v4"

    def put(self, node: Node) -> str:
        """The prefix of the functions of a put read inline (`puts`)."""
        if not any(n is node for n in self.puts):
            self.puts.append(node)
        return f"put{next(i for i, n in enumerate(self.puts) if n is node)}_"

    def write(self, v: Value) -> str:
        """The read_write binding of a value the kernel writes beside its output (a put's
        state, a state update's: it reads the old elements there and stores the new ones
        over them)."""
        for i, w in enumerate(self.writes):
            if self.buffer_of(w) == self.buffer_of(v):
                return f"st{i}"
        self.writes.append(v)
        return f"st{len(self.writes) - 1}"

    def lane(self, v: Value) -> str:
        """The parameter `x<i>` that carries the element of read i at the kernel's own
        element (Emitter `lanes`): the template loads it (and may load it once for
        several uses, or four at a time) and passes it to the generated functions. The
        `inplace` value is lane INPLACE, loaded from the output."""
        i = INPLACE if v is self.inplace else int(self.bind(v)[2:])
        self.lanes[i] = v
        return lane_name(i)

    def lane_params(self) -> list[str]:
        return [f"{lane_name(i)}: {element_type(v.dtype)}"
                for i, v in sorted(self.lanes.items())]

    def bindings(self, out: Value) -> str:
        """The declarations of the reads, their vec4 views, the writes and the output,
        each as its buffer holds it (a packed half type as array<u32>: read_packed)."""
        lines = [f"@group(0) @binding({i}) var<storage, read> in{i}: "
                 f"array<{element_type(v.stored)}>;" for i, v in enumerate(self.reads)]
        lines += [f"@group(0) @binding({len(self.reads) + j}) var<storage, read> in{i}v4: "
                  "array<vec4<f32>>;" for j, i in enumerate(self.views)]
        out_t = element_type(out.stored)
        out_t = f"vec4<{out_t}>" if self.out_vec4 else f"vec2<{out_t}>" if self.out_vec2 \
            else out_t
        first = len(self.reads) + len(self.views)
        lines += [f"@group(0) @binding({first + i}) var<storage, read_write> st{i}: "
                  f"array<{element_type(v.stored)}>;" for i, v in enumerate(self.writes)]
        lines.append(f"@group(0) @binding({first + len(self.writes)}) var<storage, "
                     f"read_write> out: array<{out_t}>;")
        return "\n".join(lines)


class Emitter:
    """Writes WGSL statements that compute values at indices, inlining fusible ops.

    `lanes` names the kernel's flat element index (e.g. "gi"): a buffer read at exactly
    that index becomes a parameter (KernelSource.lane) that the template loads, so it
    can load it 16 bytes at a time or keep it on chip for several passes. `bound` maps
    values the kernel has already computed for the current row (a row kernel's
    reductions) to their WGSL names; schedule.fuse_rows proved that every read of them
    is at that row. `branches`: cats (nodes) read at elements known to lie in one piece
    (input slot), which is read alone, with no test (kernels.common.placed_functions)."""

    def __init__(self, src: KernelSource, materialized, root: Value | None = None,
                 root_flat: str = "gi", computes: Value | None = None,
                 lanes: str | None = None, bound: dict | None = None,
                 branches: dict | None = None) -> None:
        self.src = src
        self.branches = branches or {}
        self.materialized = materialized
        self.computes = computes  # the kernel's stored value: computed here, never loaded
        self.root, self.root_flat = root, root_flat
        self.lanes = lanes
        self.bound = bound or {}
        self.lines: list[str] = []
        self.cache: dict = {}
        self.count = 0
        # Lanes of a vec4 loader (kernels.common.loader with `lanes`): a flat index that is
        # `base + e`, base a multiple of 4 -> (base, e); its dims are base's, the
        # innermost plus e, so the four lanes share one division of the index
        self.aligned: dict[str, tuple[str, int]] = {}
        self.flats: dict = {}  # (shape, expression) -> the let that holds the flat index
        self.decoded: dict = {}  # (shape, flat index) -> its dims

    def let(self, expr: str, dtype: str) -> str:
        self.count += 1
        name = f"t{self.count}"
        self.lines.append(f"let {name}: {wgsl_type(dtype)} = {expr};")
        return name

    def dims(self, idx: Index, align: bool = True) -> list[str]:
        if idx.dims is None and align and idx.flat in self.aligned:
            idx.dims = self._lane_dims(idx.shape, *self.aligned[idx.flat])
        if idx.dims is None:
            key = (tuple(idx.shape), idx.flat)
            if key not in self.decoded:  # the lanes of a vec4 loader ask again
                strides = contiguous_strides(idx.shape)
                dims = []
                for size, stride in zip(idx.shape, strides):
                    if size == 1:
                        dims.append("0")
                    else:
                        e = idx.flat if stride == 1 else f"({idx.flat} / {stride})"
                        if stride * size < math.prod(idx.shape):
                            e = f"({e} % {size})"
                        dims.append(self.let(e, "i32"))
                self.decoded[key] = dims
            idx.dims = list(self.decoded[key])
        return idx.dims

    def _lane_dims(self, shape, base: str, e: int) -> list[str] | None:
        """The dims of flat index base + e (base a multiple of 4, e < 4): base's dims with
        e added to the innermost. When that dim's size is a multiple of 4 the four lanes
        share every other dim; else (a size of at least 4) a lane past its end wraps to
        the next index of the dims outside, carried by comparisons and selects, not
        divisions (a convolution's 127-wide output rows divided each lane's pixel by
        127). A carry out of the outermost dim is a lane past the tensor's end, which
        the templates do not use (matmul_operand). None (decode it alone) for smaller
        innermost dims."""
        inner = [d for d, size in enumerate(shape) if size != 1]
        if not inner or shape[inner[-1]] < 4:
            return None
        dims = self.dims(Index(shape, flat=base), align=False)  # decoded once (memo)
        if not e:
            return dims
        carry = f"{dims[inner[-1]]} + {e}"
        for pos in range(len(inner) - 1, -1, -1):
            d = inner[pos]
            if shape[d] % 4 == 0 and pos == len(inner) - 1 or pos == 0:
                dims[d] = self.let(carry, "i32")  # no wrap (or past the end)
                break
            step = self.let(carry, "i32")
            wrap = self.let(f"{step} >= {shape[d]}", "bool")
            dims[d] = self.let(f"select({step}, {step} - {shape[d]}, {wrap})", "i32")
            carry = f"{dims[inner[pos - 1]]} + select(0, 1, {wrap})"
        return dims

    def flat(self, idx: Index) -> str:
        if idx.flat is None:
            terms = [d if st == 1 else f"{d} * {st}"
                     for d, st, size in zip(idx.dims, contiguous_strides(idx.shape), idx.shape)
                     if size != 1 and d != "0"]
            expr = " + ".join(terms) if terms else "0"
            key = (tuple(idx.shape), expr)
            if key not in self.flats:  # the lanes of a vec4 loader ask again
                self.flats[key] = self.let(expr, "i32")
                if expr in self.aligned:  # one lane's index, named
                    self.aligned[self.flats[key]] = self.aligned[expr]
            idx.flat = self.flats[key]
        return idx.flat

    def _reshape_dims(self, idx: Index, in_shape) -> list[str]:
        """Map output dims to input dims group by group: dims of size 1 drop out, and
        each run of dims whose sizes multiply to the same number is re-indexed alone,
        so reshapes that only add or remove unit dims cost no arithmetic."""
        out = [(d, s) for d, s in zip(idx.dims, idx.shape) if s != 1]
        nz = [k for k, s in enumerate(in_shape) if s != 1]
        res = ["0"] * len(in_shape)
        a = b = 0
        while a < len(out):
            a2, b2 = a + 1, b + 1
            pa, pb = out[a][1], in_shape[nz[b]]
            while pa != pb:
                if pa < pb:
                    pa *= out[a2][1]
                    a2 += 1
                else:
                    pb *= in_shape[nz[b2]]
                    b2 += 1
            group_out, group_in = out[a:a2], nz[b:b2]
            if len(group_out) == 1 and len(group_in) == 1:
                res[group_in[0]] = group_out[0][0]
            else:
                sub = Index(tuple(s for _, s in group_out), dims=[d for d, _ in group_out])
                inner = Index(tuple(in_shape[k] for k in group_in), flat=self.flat(sub))
                for k, d in zip(group_in, self.dims(inner)):
                    res[k] = d
            a, b = a2, b2
        return res

    def value(self, v: Value, idx: Index) -> str:
        if v.kind == "scalar":
            return literal(v.scalar, v.dtype)
        if v in self.bound:
            return self.bound[v]
        if v is self.root:
            if self.flat(idx) != self.root_flat:
                raise NotFusable(v)
            return "acc"
        if v in self.src.stores or v in self.src.stored_states:
            return self._own(v, idx)
        key = (v, tuple(idx.dims) if idx.dims is not None else idx.flat)
        if key in self.cache:
            return self.cache[key]
        if v.kind in ("input", "const") or (v in self.materialized and v is not self.computes):
            flat = self.flat(idx)
            if is_packed(v.stored):  # widened here; never a lane (lanes are whole words)
                expr = read_packed(self.src.bind(v), flat, v.stored)
            elif self.lanes is not None and flat == self.lanes:
                expr = self.src.lane(v)
            else:
                expr = f"{self.src.bind(v)}[{flat}]"
            if v.dtype == "bool":
                expr = f"({expr} != 0u)"
        else:
            expr = self._node(v, idx)
        name = expr if _is_simple(expr) else self.let(expr, v.dtype)
        self.cache[key] = name
        return name

    def _node(self, v: Value, idx: Index) -> str:
        node = v.node
        if node.op == "iota":
            d = self.dims(idx)[node.attrs["dim"]]
            start, step = node.attrs["start"], node.attrs["step"]
            if v.dtype == "i32":
                return f"({literal(start, 'i32')} + {d} * {literal(step, 'i32')})"
            return f"({literal(start, v.dtype)} + f32({d}) * {literal(step, v.dtype)})"
        op, x = node.op, node.inputs[0]
        if op == "ew":
            args = [self.value(a, idx) for a in node.inputs]
            fn = node.attrs["fn"]
            if fn == "cast":
                return _cast(args[0], node.attrs, x.dtype, v.dtype)
            self.src.helpers.update(OPS[fn].helpers)
            return OPS[fn].wgsl(*args, {**node.attrs, "dtype": v.dtype})
        if op == "materialize":  # a copy (a narrowing store: its kernel packs the value)
            return self.value(x, idx)
        if op == "reshape":
            if idx.dims is None:
                return self.value(x, Index(x.shape, flat=idx.flat))
            # a reshape keeps the flat index: pass it on with the dims, so an epilogue
            # still recognizes the template's own element after a mask computed dims
            return self.value(x, Index(x.shape, dims=self._reshape_dims(idx, x.shape),
                                       flat=idx.flat))
        dims = self.dims(idx)
        if op == "permute":
            inner = [""] * len(dims)
            for i, d in enumerate(node.attrs["dims"]):
                inner[d] = dims[i]
            return self.value(x, Index(x.shape, dims=inner))
        if op == "expand":
            off = len(v.shape) - len(x.shape)
            inner = ["0" if s == 1 else dims[i + off] for i, s in enumerate(x.shape)]
            return self.value(x, Index(x.shape, dims=inner))
        if op == "slice":
            d, start, step = node.attrs["dim"], node.attrs["start"], node.attrs["step"]
            inner = list(dims)
            inner[d] = self.let(f"{start} + {dims[d]} * {step}", "i32")
            return self.value(x, Index(x.shape, dims=inner))
        if op == "gather":  # the index tensor, read at this element, picks x's index in d
            d, index = node.attrs["dim"], node.inputs[1]
            j = self.value(index, Index(index.shape, dims=list(dims)))
            inner = list(dims)
            inner[d] = self.let(f"clamp({j}, 0, {x.shape[d] - 1})", "i32")
            return self.value(x, Index(x.shape, dims=inner))
        if op == "pad":
            inner, conds = list(dims), []
            for d, (lo, hi) in enumerate(node.attrs["pads"]):
                if lo or hi:
                    inner[d] = self.let(f"clamp({dims[d]} - {lo}, 0, {x.shape[d] - 1})", "i32")
                    conds.append(f"({dims[d]} >= {lo} && {dims[d]} < {lo + x.shape[d]})")
            inside = self.value(x, Index(x.shape, dims=inner))
            fill = literal(node.attrs["value"], v.dtype)
            return f"select({fill}, {inside}, {' && '.join(conds)})"
        if op == "window":
            return self._window(node, dims)
        if op == "cat" and node in self.branches:
            j, d = self.branches[node], node.attrs["dim"]
            part, offset = node.inputs[j], sum(u.shape[d] for u in node.inputs[:j])
            inner = list(dims)
            if offset:
                inner[d] = self.let(f"{dims[d]} - {offset}", "i32")
            return self.value(part, Index(part.shape, dims=inner))
        if op == "cat":
            return self._cat(node, dims, v.dtype)
        if op == "put":
            return self._put(node, dims, v.dtype)
        if op == "reduce" and inline_sum(node):  # its items added in order, as the
            # reduce template adds them (ir.inline_sum)
            items = [self.value(x, Index(x.shape, dims=[dims[0], str(r)]))
                     for r in range(x.shape[1])]
            return f"({' + '.join(items)})"
        raise CompileError(f"codegen cannot inline '{op}'")

    def _cat(self, node, dims: list[str], dtype: str) -> str:
        """A cat as an if / else chain over its pieces, so that an element reads only
        the piece it lies in (a select would read every piece). The statements of each
        piece stay in its branch: values computed there are forgotten after it."""
        d = node.attrs["dim"]
        self.count += 1
        name = f"t{self.count}"
        outer_lines, outer_cache = self.lines, self.cache
        outer_memos = self.flats, self.decoded
        branches, offset = [], 0
        for part in node.inputs:
            self.lines, self.cache = [], dict(outer_cache)
            self.flats, self.decoded = (dict(m) for m in outer_memos)
            inner = list(dims)
            if offset:
                inner[d] = self.let(f"{dims[d]} - {offset}", "i32")
            val = self.value(part, Index(part.shape, dims=inner))
            branches.append((offset, self.lines + [f"{name} = {val};"]))
            offset += part.shape[d]
        self.lines, self.cache = outer_lines, outer_cache
        self.flats, self.decoded = outer_memos
        self.lines.append(f"var {name}: {wgsl_type(dtype)};")
        for k, (_, body) in enumerate(branches):
            if k == 0:
                head = f"if ({dims[d]} < {branches[1][0]}) {{"
            elif k < len(branches) - 1:
                head = f"}} else if ({dims[d]} < {branches[k + 1][0]}) {{"
            else:
                head = "} else {"
            self.lines += [head] + [f"    {line}" for line in body]
        self.lines.append("}")
        return name

    def _own(self, v: Value, idx: Index) -> str:
        """A state update the kernel stores (KernelSource.stores), or its state's old
        element, at the kernel's own element only: the old element is read into a let
        before the new one is stored over it, each once (keyed by the element, however
        its index was spelled), the new one stored where it is computed. Every invocation
        reads and writes only its own elements, so no other one can see the store."""
        if self.flat(idx) != self.root_flat:
            raise NotInPlace(f"{v} is read other than at the element the kernel stores")
        key = (v, "own")
        if key in self.cache:
            return self.cache[key]
        new = self.src.stored_states.get(v)
        if new is not None:  # the state's old element
            name = self.let(f"{self.src.write(new)}[{self.root_flat}]", v.dtype)
        else:
            expr = self._node(v, idx)
            name = expr if _is_simple(expr) else self.let(expr, v.dtype)
            self.lines.append(f"{self.src.write(v)}[{self.root_flat}] = {name};")
        self.cache[key] = name
        return name

    def _put(self, node, dims: list[str], dtype: str) -> str:
        """A put of one new slice (GraphBuilder.put) read inline by a kernel that also
        stores its new slice (KernelSource.put, kernels/put.fused_puts): at the slice's
        position the new element, computed here (a read of the state there could come
        before the store of another workgroup), elsewhere the state's own buffer, which
        the kernel binds read_write (KernelSource.write) and writes only at that position.
        A packed half state's new element is read rounded as the kernel stores it
        (round_packed), the value a later read of the state gets."""
        x, _, new = node.inputs
        d = node.attrs["dim"]
        if new.shape[d] != 1:
            raise CompileError("a put of several slices is not read inline")
        prefix = self.src.put(node)
        self.count += 1
        name = f"t{self.count}"
        at = self.let(f"{prefix}position(0)", "i32")
        inner = list(dims)
        inner[d] = "0"
        fresh = f"{prefix}load_v({self.flat(Index(new.shape, dims=inner))})"
        old = self.flat(Index(x.shape, dims=list(dims)))
        state, stored = self.src.write(node.out), node.out.stored
        if is_packed(stored):
            self.src.helpers.add("half")
            fresh, old = round_packed(fresh, stored), read_packed(state, old, stored)
        else:
            old = f"{state}[{old}]"
        self.lines += [f"var {name}: {wgsl_type(dtype)};",
                       f"if ({dims[d]} == {at}) {{",
                       f"    {name} = {fresh};",
                       "} else {",
                       f"    {name} = {old};",
                       "}"]
        return name

    def _window(self, node, dims: list[str]) -> str:
        """The window view (ir.GraphBuilder.window): per windowed dim the index
        j = o * stride - padding + k * dilation, read when inside x, else 0. Bounds that
        hold for every (o, k) are not tested."""
        x, at = node.inputs[0], node.attrs
        nd = len(at["kernel"])
        lead = len(x.shape) - nd
        inner, conds = list(dims[:lead]), []
        for i in range(nd):
            k, o = dims[lead + i], dims[lead + nd + i]
            s, p, d = (at[n][i] for n in ("stride", "padding", "dilation"))
            size = x.shape[lead + i]
            o_hi, k_hi = node.out.shape[lead + nd + i] - 1, at["kernel"][i] - 1
            expr = " + ".join(t if c == 1 else f"{t} * {c}" for t, c in ((o, s), (k, d))
                              if t != "0") or "0"
            if p:
                expr = f"{expr} - {p}" if p > 0 else f"{expr} + {-p}"
            j = expr if _is_simple(expr) else self.let(expr, "i32")
            lo_ok = -p >= 0  # the smallest j, at o = k = 0
            hi_ok = o_hi * s + k_hi * d - p <= size - 1
            cond = [] if lo_ok else [f"{j} >= 0"]
            if not hi_ok:
                cond.append(f"{j} < {size}")
            if cond:
                conds.append(" && ".join(cond))
                j = self.let(f"clamp({j}, 0, {size - 1})", "i32")
            inner.append(j)
        inside = self.value(x, Index(x.shape, dims=inner))
        if not conds:
            return inside
        return f"select({literal(0, node.out.dtype)}, {inside}, {' && '.join(conds)})"

    def function(self, name: str, params: list[str], ret_dtype: str, result: str) -> str:
        body = "\n".join(f"    {line}" for line in self.lines)
        ret = wgsl_type(ret_dtype) if ret_dtype in DEVICE_DTYPES else ret_dtype
        return (f"fn {name}({', '.join(params)}) -> {ret} {{\n{body}\n"
                f"    return {result};\n}}\n")


CAT_PIECE_APART = 1 << 48  # buffer_address: further apart than any buffer's elements


def _source_numel(v: Value, materialized, memo: dict | None = None) -> int:
    """The size of the largest buffer that `v` reads through movement and elementwise
    ops (0 for none: scalars, iotas)."""
    memo = {} if memo is None else memo
    if id(v) not in memo:
        if v.kind in ("input", "const") or v in materialized:
            memo[id(v)] = v.numel
        elif v.kind != "node" or v.node.op not in MOVEMENT_OPS + ("ew",):
            memo[id(v)] = 0
        else:
            memo[id(v)] = max((_source_numel(a, materialized, memo) for a in v.node.inputs),
                              default=0)
    return memo[id(v)]


def buffer_address(v: Value, idx: tuple[int, ...], materialized) -> int | None:
    """The flat element of the buffer that `v` reads at concrete index `idx`, following
    movement ops (and, through elementwise ops, the operand read from the largest
    buffer: x in where(i <= j, x, 0), not a norm's per-channel scale); None when that
    is not a plain function of the index. Templates use it to learn which of a loader's
    dims is contiguous in memory, to order their loads for coalescing. Through a cat the
    piece holding `idx` answers, its addresses set CAT_PIECE_APART apart from the other
    pieces' (they are other buffers): two probes in different pieces are never a step
    of 0 or 1."""
    piece_tag, level = 0, 0
    numels: dict = {}  # _source_numel's, shared down the walk
    while True:
        if v.kind == "scalar":
            return None
        if v.kind in ("input", "const") or v in materialized:
            return piece_tag + sum(i * s for i, s in zip(idx, contiguous_strides(v.shape)))
        node = v.node
        op, x = node.op, (node.inputs[0] if node.inputs else None)
        if op == "ew":
            tensors = [a for a in node.inputs if a.kind != "scalar"]
            if not tensors:
                return None
            x = max(tensors, key=lambda a: _source_numel(a, materialized, numels))
        elif op == "materialize":  # a copy computed inline: its input's address
            pass
        elif op == "reshape":
            flat = sum(i * s for i, s in zip(idx, contiguous_strides(v.shape)))
            idx = tuple((flat // s) % n for s, n in zip(contiguous_strides(x.shape), x.shape))
        elif op == "permute":
            inner = [0] * len(idx)
            for i, d in enumerate(node.attrs["dims"]):
                inner[d] = idx[i]
            idx = tuple(inner)
        elif op == "expand":
            off = len(v.shape) - len(x.shape)
            idx = tuple(0 if s == 1 else idx[i + off] for i, s in enumerate(x.shape))
        elif op == "slice":
            d = node.attrs["dim"]
            idx = idx[:d] + (node.attrs["start"] + idx[d] * node.attrs["step"],) + idx[d + 1:]
        elif op == "pad":
            idx = tuple(min(max(i - lo, 0), s - 1)
                        for i, (lo, _), s in zip(idx, node.attrs["pads"], x.shape))
        elif op == "cat":
            d, start, i = node.attrs["dim"], 0, 0
            while i + 1 < len(node.inputs) and idx[d] >= start + node.inputs[i].shape[d]:
                start += node.inputs[i].shape[d]
                i += 1
            x = node.inputs[i]
            idx = idx[:d] + (idx[d] - start,) + idx[d + 1:]
            piece_tag += (i + 1) * CAT_PIECE_APART << (8 * level)
            level += 1
        elif op == "reduce" and inline_sum(node):  # its first item's address
            idx = (idx[0], 0)
        elif op == "window":
            # not one affine map (taps wrap at the kernel's edge, padding clamps): three
            # probes would mislead; templates then load it along their output dim
            return None
        else:
            return None
        v = x


def _is_simple(expr: str) -> bool:
    return expr.replace("_", "").replace("[", "").replace("]", "").isalnum()


def to_buffer(expr: str, dtype: str) -> str:
    return f"select(0u, 1u, {expr})" if dtype == "bool" else expr


def read_packed(buf: str, flat: str, dtype: str) -> str:
    """Element `flat` (an i32 expression) of buffer `buf` of packed half type `dtype`, as
    f32: the word holding it, its low half for an even index, its high half for an odd
    one; f16 through unpack2x16float (exact), bf16 its bits moved to an f32's top half."""
    word = f"{buf}[({flat}) >> 1u]"
    if dtype == "f16":
        return f"unpack2x16float({word})[({flat}) & 1]"
    return f"bitcast<f32>(({word} >> (u32(({flat}) & 1) * 16u)) << 16u)"


def round_packed(expr: str, dtype: str) -> str:
    """f32 value `expr` as a buffer of packed half type `dtype` holds it once stored
    (pack_pair's rounding, read back as read_packed reads it; HELPERS["half"])."""
    return f"kw_round_{dtype}({expr})"


def pack_pair(lo: str, hi: str, dtype: str) -> str:
    """The word of packed half type `dtype` holding f32 values `lo` (the even element)
    and `hi`, each rounded to nearest even (HELPERS["half"]: kernels/half.wgsl)."""
    return f"kw_pack_{dtype}({lo}, {hi})"


def pack_words(vals: list[str], dtype: str) -> str:
    """The packed half words (dtype `dtype`) holding the f32 values `vals` (2: one u32
    word, stored into array<u32>; 4: two words, a vec2<u32> for array<vec2<u32>>)."""
    words = [pack_pair(lo, hi, dtype) for lo, hi in zip(vals[::2], vals[1::2])]
    return words[0] if len(words) == 1 else f"vec2<u32>({', '.join(words)})"


# -- the bindings a kernel's WGSL declares and the ones its entry point reaches -----------
BINDING = re.compile(
    r"(?:@group\(\s*(\d+)\s*\)\s*@binding\(\s*(\d+)\s*\)"
    r"|@binding\(\s*(\d+)\s*\)\s*@group\(\s*(\d+)\s*\))"
    r"\s*var\s*<\s*(\w+)\s*(?:,\s*(\w+)\s*)?>\s*(\w+)")
_WORD = re.compile(r"[A-Za-z_]\w*")
_FN = re.compile(r"^[ \t]*fn\s+(\w+)\s*\(", re.M)  # one not at a line's start: merged


def declared_bindings(source: str) -> list[tuple[int, int, str, str, str]]:
    """(group, binding, address space, access, name) of every resource the WGSL declares."""
    found = []
    for m in BINDING.finditer(source):
        group, binding = (m.group(1), m.group(2)) if m.group(1) is not None else \
            (m.group(4), m.group(3))
        found.append((int(group), int(binding), m.group(5), m.group(6) or "read", m.group(7)))
    return found


@functools.lru_cache(maxsize=4096)
def used_bindings(source: str) -> dict[int, str]:
    """The storage bindings (index: access) that the entry point `main` reaches, in main
    or in a function it calls, directly or not. Templates declare a binding for every
    read and for its vec4 view, and the loader they don't use stays in the text (a
    matmul that reads A only through its vec4 view); those bindings are left out of the
    pipeline's layout and bind group, so they do not count against the device's limit
    of storage buffers per shader stage (`check_limits`). A function's text runs to the
    next function's start (WGSL has no nested functions; declarations between them, or
    a function not found because it does not start a line, can only add bindings,
    never drop one)."""
    declared = {name: (binding, access) for group, binding, space, access, name
                in declared_bindings(source) if group == 0 and space == "storage"}
    text = BINDING.sub("", source)
    starts = [(m.start(), m[1]) for m in _FN.finditer(text)] + [(len(text), "")]
    bodies = {name: text[a:b] for (a, name), (b, _) in zip(starts, starts[1:])}
    if "main" not in bodies:
        return dict(sorted(declared.values()))
    seen, todo, words = set(), ["main"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        found = set(_WORD.findall(bodies[name]))
        words |= found
        todo += [w for w in found if w in bodies]
    return dict(sorted(v for name, v in declared.items() if name in words))
