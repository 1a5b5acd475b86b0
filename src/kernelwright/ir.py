"""The graph IR: tensors with shapes and dtypes, and the primitive ops that kernels implement.

Capture (capture.py) walks an ATen-level FX graph and, through the op registry
(ops/), rewrites every ATen op into a handful of *primitives* built with
`GraphBuilder`. The primitives are all that the rest of the pipeline knows:

    elementwise  ew        one output element from the same element of each input
    movement     reshape, permute, expand, slice, pad, cat, gather-free index maps
    templates    reduce, matmul, conv2d, pool2d, (more as kernels are added)

Movement ops never copy: codegen turns them into index arithmetic inside whatever
kernel reads them. Elementwise ops fuse into their producer or consumer kernel.
Templates are the heavy kernels, one WGSL template each (kernels/*.wgsl).

Every primitive's shape rule lives in its `GraphBuilder` method, so an ATen op's
shape follows from its lowering; capture checks it against the shape PyTorch
recorded, which catches a wrong lowering at compile time rather than as a wrong
answer. Device dtypes are 'f32', 'i32' (int32 and int64 tensors; int64 values must
fit in 32 bits) and 'bool'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

DTYPES = ("f32", "i32", "bool")
MOVEMENT_OPS = ("reshape", "permute", "expand", "slice", "pad", "cat")
TEMPLATE_OPS = ("reduce", "matmul", "conv2d", "pool2d")


class CompileError(Exception):
    """An op or input that kernelwright cannot compile, with the user's source line."""


@dataclass(eq=False)
class Value:
    """One tensor: a graph input, a constant, a scalar literal, or a node's output."""

    shape: tuple[int, ...]
    dtype: str
    node: Node | None = None
    kind: str = "node"  # 'input' | 'const' | 'scalar' | 'node'
    name: str = ""
    data: np.ndarray | None = None  # for 'const'
    scalar: float | int | bool | None = None  # for 'scalar'

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"%{self.name}:{self.dtype}{list(self.shape)}"


@dataclass(eq=False)
class Node:
    op: str
    inputs: list[Value]
    attrs: dict
    out: Value
    source: str = ""  # the user's line this node came from


@dataclass
class Graph:
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)

    def consumers(self) -> dict[Value, list[Node]]:
        users: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                users.setdefault(v, []).append(n)
        return users


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        sizes = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise CompileError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def promote(*dtypes: str) -> str:
    for d in ("f32", "i32", "bool"):
        if d in dtypes:
            return d
    raise CompileError(f"unknown dtypes {dtypes}")


class GraphBuilder:
    """Creates primitive nodes; each method is one primitive's shape rule."""

    def __init__(self) -> None:
        self.graph = Graph()
        self.source = ""  # set by capture to the user's line of the op being lowered
        self._count = 0

    def _name(self) -> str:
        self._count += 1
        return f"v{self._count}"

    def _node(self, prim: str, inputs: list[Value], shape, dtype: str, **attrs) -> Value:
        out = Value(tuple(int(s) for s in shape), dtype, name=self._name())
        node = Node(prim, list(inputs), attrs, out, self.source)
        out.node = node
        self.graph.nodes.append(node)
        return out

    # -- leaves ---------------------------------------------------------------------------
    def input(self, shape, dtype: str, name: str) -> Value:
        v = Value(tuple(shape), dtype, kind="input", name=name)
        self.graph.inputs.append(v)
        return v

    def const(self, array: np.ndarray, dtype: str, name: str = "") -> Value:
        if array.ndim == 0:
            return self.scalar(array.item(), dtype)
        return Value(tuple(array.shape), dtype, kind="const", name=name or self._name(), data=array)

    def scalar(self, x, dtype: str | None = None) -> Value:
        if dtype is None:
            dtype = "bool" if isinstance(x, bool) else "i32" if isinstance(x, int) else "f32"
        return Value((), dtype, kind="scalar", name=self._name(), scalar=x)

    # -- elementwise ----------------------------------------------------------------------
    def ew(self, fn: str, *args: Value, dtype: str | None = None, **params) -> Value:
        """Elementwise `fn` (a key of codegen.EW) with broadcasting; dtype defaults to the
        promoted input dtype."""
        shape = broadcast_shapes(*(a.shape for a in args))
        args = tuple(self.expand(a, shape) for a in args)
        return self._node("ew", list(args), shape, dtype or promote(*(a.dtype for a in args)),
                          fn=fn, **params)

    def cast(self, x: Value, dtype: str) -> Value:
        return x if x.dtype == dtype else self.ew("cast", x, dtype=dtype)

    # -- movement -------------------------------------------------------------------------
    def reshape(self, x: Value, shape) -> Value:
        shape = list(shape)
        if -1 in shape:
            i = shape.index(-1)
            rest = math.prod(s for j, s in enumerate(shape) if j != i)
            shape[i] = x.numel // rest if rest else 0
        if math.prod(shape) != x.numel:
            raise CompileError(f"cannot reshape {list(x.shape)} to {shape}")
        if tuple(shape) == x.shape:
            return x
        if x.kind == "scalar":
            return self.expand(x, shape)
        return self._node("reshape", [x], shape, x.dtype)

    def permute(self, x: Value, dims) -> Value:
        dims = [d % len(x.shape) for d in dims] if x.shape else []
        if dims == list(range(len(dims))):
            return x
        return self._node("permute", [x], [x.shape[d] for d in dims], x.dtype, dims=dims)

    def transpose(self, x: Value, a: int, b: int) -> Value:
        dims = list(range(len(x.shape)))
        dims[a], dims[b] = dims[b], dims[a]
        return self.permute(x, dims)

    def expand(self, x: Value, shape) -> Value:
        shape = tuple(int(s) for s in shape)
        shape = tuple(x.shape[i - len(shape) + len(x.shape)] if s == -1 else s
                      for i, s in enumerate(shape))
        if x.shape == shape:
            return x
        if len(shape) < len(x.shape) or broadcast_shapes(x.shape, shape) != shape:
            raise CompileError(f"cannot expand {list(x.shape)} to {list(shape)}")
        return self._node("expand", [x], shape, x.dtype)

    def slice(self, x: Value, dim: int, start: int, end: int, step: int = 1) -> Value:
        dim %= len(x.shape)
        size = x.shape[dim]
        start = max(0, min(size, start + size if start < 0 else start))
        end = max(start, min(size, end + size if end < 0 else end))
        n = (end - start + step - 1) // step
        if start == 0 and n == size and step == 1:
            return x
        shape = list(x.shape)
        shape[dim] = n
        return self._node("slice", [x], shape, x.dtype, dim=dim, start=start, step=step)

    def pad(self, x: Value, pads: list[tuple[int, int]], value: float = 0.0) -> Value:
        """pads: (before, after) per dim, for every dim of x; negative values crop."""
        for d, (lo, hi) in enumerate(pads):  # crops first, as slices
            if lo < 0 or hi < 0:
                x = self.slice(x, d, max(0, -lo), x.shape[d] - max(0, -hi))
        pads = [(max(0, lo), max(0, hi)) for lo, hi in pads]
        if all(p == (0, 0) for p in pads):
            return x
        shape = [s + lo + hi for s, (lo, hi) in zip(x.shape, pads)]
        return self._node("pad", [x], shape, x.dtype, pads=pads, value=value)

    def cat(self, xs: list[Value], dim: int) -> Value:
        xs = [x for x in xs if x.numel > 0 or len(xs) == 1]
        dim %= len(xs[0].shape)
        if len(xs) == 1:
            return xs[0]
        shape = list(xs[0].shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        dtype = promote(*(x.dtype for x in xs))
        xs = [self.cast(x, dtype) for x in xs]
        return self._node("cat", xs, shape, dtype, dim=dim)

    # -- templates ------------------------------------------------------------------------
    def reduce(self, x: Value, op: str, dims, keepdim: bool = False) -> Value:
        """op in sum, prod, max, min, argmax, argmin over `dims` (all dims when empty)."""
        rank = len(x.shape)
        dims = sorted({d % rank for d in dims}) if dims else list(range(rank))
        keep = [d for d in range(rank) if d not in dims]
        outer = [x.shape[d] for d in keep]
        r = math.prod(x.shape[d] for d in dims)
        if x.kind == "scalar":
            x = self.expand(x, (1,))
            keep, dims, outer = [], [0], []
        x2 = self.reshape(self.permute(x, keep + dims), (math.prod(outer), r))
        dtype = "i32" if op in ("argmax", "argmin") else ("i32" if x.dtype == "bool" else x.dtype)
        y = self._node("reduce", [x2], (math.prod(outer),), dtype, op=op)
        shape = [1 if d in dims else s for d, s in enumerate(x.shape)] if keepdim else outer
        return self.reshape(y, shape)

    def matmul(self, a: Value, b: Value) -> Value:
        """Batched matrix product of a [..., M, K] and b [..., K, N], batch dims broadcast."""
        if a.shape[-1] != b.shape[-2]:
            raise CompileError(f"matmul shapes {list(a.shape)} @ {list(b.shape)}")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = self.expand(a, batch + a.shape[-2:])
        b = self.expand(b, batch + b.shape[-2:])
        nb = math.prod(batch)
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        a3, b3 = self.reshape(a, (nb, m, k)), self.reshape(b, (nb, k, n))
        y = self._node("matmul", [a3, b3], (nb, m, n), promote(a.dtype, b.dtype))
        return self.reshape(y, batch + (m, n))

    def conv2d(self, x: Value, w: Value, stride, padding, dilation, groups: int) -> Value:
        n, c, h, wd = x.shape
        co, cg, kh, kw = w.shape
        if cg * groups != c or co % groups:
            raise CompileError(f"conv2d channels: input {c}, weight {list(w.shape)}, "
                               f"groups {groups}")
        ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
        wo = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        return self._node("conv2d", [x, w], (n, co, ho, wo), x.dtype, stride=list(stride),
                          padding=list(padding), dilation=list(dilation), groups=groups)

    def pool2d(self, x: Value, op: str, kernel, stride, padding, dilation, ceil_mode: bool,
               count_include_pad: bool = True, divisor: int | None = None) -> Value:
        *lead, h, w = x.shape
        out = []
        for i, size in enumerate((h, w)):
            eff = dilation[i] * (kernel[i] - 1) + 1
            num = size + 2 * padding[i] - eff
            o = (-(-num // stride[i]) if ceil_mode else num // stride[i]) + 1
            if ceil_mode and (o - 1) * stride[i] >= size + padding[i]:
                o -= 1  # the last window must start inside the input or left padding
            out.append(o)
        return self._node("pool2d", [x], (*lead, *out), x.dtype, op=op, kernel=list(kernel),
                          stride=list(stride), padding=list(padding), dilation=list(dilation),
                          count_include_pad=count_include_pad, divisor=divisor)
