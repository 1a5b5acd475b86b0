"""What the kernel families share: device limits, the generated kernel and its key,
loader and epilogue functions, lane arguments, knob checks, strided views, the fold
names of reductions and scans, and `snippet`: the WGSL pieces (kernels/*.wgsl) that a
generator places inside a kernel, filled by name like a template's slots."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from string import Template
from typing import NamedTuple

from ..codegen.codegen import (
    INPLACE,
    KERNEL_DIR,
    NEG_INF,
    POS_INF,
    Emitter,
    Index,
    KernelSource,
    _cast,
    buffer_address,
    contiguous_strides,
    is_nan,
    literal,
)
from ..dtypes import wgsl_type
from ..ir.ir import CompileError, Node, Value

MAX_GRID = 65535
MAX_WG = 256  # WebGPU's default maxComputeInvocationsPerWorkgroup: every space keeps to it
WORKGROUP_BYTES = 16384  # WebGPU's default maxComputeWorkgroupStorageSize


@dataclass
class Generated:
    name: str
    source: str
    reads: list[Value]
    grid: tuple[int, int, int]
    key: KernelKey | None = None
    knobs: dict = field(default_factory=dict)
    views: list[int] = field(default_factory=list)  # reads bound again as vec4 arrays
    workgroup_bytes: int = 0  # workgroup memory it declares (the runtime checks the device's)
    trusted: bool = True  # False for a source not written here (Kernel.trusted)
    # values bound read_write before the output, which the kernel writes too (the states
    # of the puts it reads inline: KernelSource.write)
    writes: list[Value] = field(default_factory=list)

    def binding_ids(self, read_ids: list[int], out_id: int,
                    write_ids: list[int] = ()) -> list[int]:
        """The buffer of each binding, given the buffers of its reads, its writes and its
        output: the reads, then their vec4 views, then the writes, then the output
        (codegen.KernelSource.bindings)."""
        return list(read_ids) + [read_ids[i] for i in self.views] + [*write_ids, out_id]


class KernelKey(NamedTuple):
    """What a kernel computes, independent of its knobs: the tuning cache's key.
    `bucket` is the operand shapes; for now the exact shapes are the shape bucket."""

    template: str
    bucket: str  # e.g. "f32[1,70,37] f32[1,37,45] -> f32[1,70,45]"
    digest: str  # of the generated functions, the node's attributes and the template text

    def __str__(self) -> str:
        return f"{self.template} {self.bucket} #{self.digest}"


@cache
def snippet(name: str) -> Template:
    """A piece of WGSL that a generator places inside a kernel, from kernels/<name>.wgsl
    (filled by name like the templates' slots): the file without its leading comment
    lines (what the piece is, its slots) and without its last newline."""
    lines = (KERNEL_DIR / f"{name}.wgsl").read_text().split("\n")
    while lines and lines[0].startswith("//"):
        lines.pop(0)
    return Template("\n".join(lines).rstrip("\n"))


def grid_1d(n: int, wg: int) -> tuple[tuple[int, int, int], int]:
    """Workgroups for n invocations, folded into 2-D past the per-dimension limit;
    returns the grid and the number of invocations per grid row."""
    groups = max(1, math.ceil(n / wg))
    gx = min(groups, MAX_GRID)
    return (gx, math.ceil(groups / gx), 1), gx * wg


def loader(src: KernelSource, materialized, name: str, x: Value, dtype: str = "f32",
           lanes: int | None = None, bound: dict | None = None) -> str:
    """`fn name(i0, i1, ...)`: x's element at that index. With `lanes` (a dim of x whose
    size is a multiple of 4): a vec4 of the elements at i_lanes + 0..3, i_lanes a
    multiple of 4, written so that the lanes share their index arithmetic (a window's
    pixel is divided once, not four times: Emitter.aligned). `bound`: values the kernel
    has computed, by their WGSL expressions (Emitter; the gemv's row statistics)."""
    em = Emitter(src, materialized, bound=bound)
    params = [f"i{d}" for d in range(len(x.shape))]
    vals = []
    for e in range(1 if lanes is None else 4):
        dims = list(params)
        if lanes is not None:
            dims[lanes] = f"({params[lanes]} + {e})" if e else params[lanes]
            em.aligned[dims[lanes]] = (params[lanes], e)
        val = em.value(x, Index(x.shape, dims=dims))
        vals.append(val if x.dtype == dtype else _cast(val, {}, x.dtype, dtype))
    if lanes is None:
        return em.function(name, [f"{p}: i32" for p in params], dtype, vals[0])
    return em.function(name, [f"{p}: i32" for p in params], f"vec4<{wgsl_type(dtype)}>",
                       f"vec4<{wgsl_type(dtype)}>({', '.join(vals)})")


def epilogue_function(src: KernelSource, materialized, out: Value, root: Value | None,
                      acc_dtype: str, dims: list[str] | None = None) -> str:
    """A template's `epilogue(acc, gi)`; a plain elementwise kernel's `epilogue(gi,
    x...)`, whose buffers read at gi are lanes (arguments the template loads). With
    `dims` (names, "0" for dims of size 1): `epilogue(gi, <dims>)`, for a template that
    knows the element's index along each dim (the transposing tile), so that no read
    decodes gi by divisions; its buffers are read in the function (no lanes)."""
    em = Emitter(src, materialized, root=root, computes=out,
                 lanes="gi" if root is None and dims is None else None)
    val = em.value(out, Index(out.shape, flat="gi", dims=dims))
    params = ([f"acc: {wgsl_type(acc_dtype)}"] if root is not None else []) + ["gi: i32"]
    if dims is not None:
        return em.function("epilogue", params + [f"{d}: i32" for d in dims if d != "0"],
                           out.dtype, val)
    return em.function("epilogue", params + (src.lane_params() if root is None else []),
                       out.dtype, val)


@dataclass(frozen=True, eq=False)
class Placement:
    """Where a template's kernel stores its value: in place, into the value `root` that
    several kernels fill together (schedule.placements: the pieces of a cat, a strided
    transposed convolution's phases interleaved), not into a buffer of its own. `path`:
    from the kernel's value up to `root`, each node with the input slot it is read
    through (reshape, permute, a slice of step 1 or -1, cat, elementwise ops at the same
    shape); each element lands at one element of root or at none (cropped)."""

    root: Value
    path: tuple[tuple[Node, int], ...]


def _place_lines(place: Placement, shape: tuple[int, ...]) -> list[str]:
    """`fn place(gi)`'s statements: the flat index gi of a value of `shape` carried up
    `place.path` to root's flat index, `return -1` where a slice crops it."""
    lines, e, n = [], "gi", 0

    def let(expr: str) -> str:
        nonlocal n
        n += 1
        lines.append(f"let p{n}: i32 = {expr};")
        return f"p{n}"

    def split(e: str, shape, d: int) -> tuple[str, str, str]:
        """e's index before dim d (its outer flat), along d, after it (inner flat)."""
        post = math.prod(shape[d + 1:])
        outer = "0" if math.prod(shape[:d]) == 1 else let(f"{e} / {post * shape[d]}")
        along = "0" if shape[d] == 1 else let(f"({e} / {post}) % {shape[d]}"
                                             if outer != "0" else f"{e} / {post}")
        inner = "0" if post == 1 else let(f"{e} % {post}")
        return outer, along, inner

    for node, slot in place.path:
        out = node.out.shape
        if node.op == "cat":
            d = node.attrs["dim"]
            offset = sum(u.shape[d] for u in node.inputs[:slot])
            outer, along, inner = split(e, shape, d)
            e = let(f"({outer}) * {math.prod(out[d:])} + ({along} + {offset}) * "
                    f"{math.prod(out[d + 1:])} + {inner}")
        elif node.op == "slice":
            d, start, step = node.attrs["dim"], node.attrs["start"], node.attrs["step"]
            outer, along, inner = split(e, shape, d)
            i = let(f"{along} - {start}" if step == 1 else f"{start} - {along}")
            lines.append(f"if ({i} < 0 || {i} >= {out[d]}) {{ return -1; }}")
            e = let(f"({outer}) * {math.prod(out[d:])} + {i} * {math.prod(out[d + 1:])} + "
                    f"{inner}")
        elif node.op == "permute":
            strides = contiguous_strides(shape)
            dims = [let(f"({e} / {st}) % {size}") for st, size in zip(strides, shape)]
            e = let(" + ".join(f"{dims[k]} * {st}" for k, st in
                               zip(node.attrs["dims"], contiguous_strides(out))) or "0")
        shape = out  # reshape, elementwise: the flat index as it is
    return lines + [f"return {e};"]


def placed_functions(src: KernelSource, materialized, place: Placement, value: Value) -> str:
    """`fn place(gi) -> i32` (the flat index in place.root of element gi of `value`, -1
    where none) and `fn placed(v, gi)` (root's element gi computed from v, value's element
    there: the path's elementwise ops with their other inputs; its cats read through
    the slot the path takes)."""
    em = Emitter(src, materialized, computes=place.root, bound={value: "v"},
                 branches={node: slot for node, slot in place.path if node.op == "cat"})
    root = place.root
    val = em.value(root, Index(root.shape, flat="gi"))
    body = "\n".join(f"    {line}" for line in _place_lines(place, value.shape))
    return (f"fn place(gi: i32) -> i32 {{\n{body}\n}}\n"
            + em.function("placed", [f"v: {wgsl_type(value.dtype)}", "gi: i32"], root.dtype, val))


XYZW = "xyzw"


def lane_args(src: KernelSource, vec: int, q: str, gi: str, loaded: dict | None = None,
              prefix: str = "l") -> tuple[list[str], list[str]]:
    """How a template hands the lanes (codegen: buffers read at the kernel's element) to
    the generated functions for the VEC consecutive elements gi, gi + 1, ... (vector
    q = gi / VEC): statements loading them (f32 lanes through a vec4 view, 16 bytes at a
    time) and, per element, the argument text ", x0, x1, ...". `loaded` maps a lane
    to an expression already holding its vector (VEC 4) or element (VEC 1): a cache.
    Lane INPLACE (KernelSource.inplace) is loaded from the output itself."""
    stmts, args = [], [""] * vec
    for i, v in sorted(src.lanes.items()):
        if loaded and i in loaded:
            vals = [loaded[i]] if vec == 1 else [f"{loaded[i]}.{XYZW[j]}" for j in range(vec)]
        elif i == INPLACE:  # the output's own element(s), before the template stores them
            vals = ([f"out[{gi}]"] if vec == 1
                    else [f"{prefix}o.{XYZW[j]}" for j in range(vec)])
            stmts += [] if vec == 1 else [f"let {prefix}o = out[{q}];"]
        elif vec == 4 and v.dtype == "f32":
            stmts.append(f"let {prefix}{i} = {src.view4(v)}[{q}];")
            vals = [f"{prefix}{i}.{XYZW[j]}" for j in range(vec)]
        else:
            vals = [f"in{i}[{gi}{f' + {j}' if j else ''}]" for j in range(vec)]
        args = [a + f", {val}" for a, val in zip(args, vals)]
    return stmts, args


# -- knobs --------------------------------------------------------------------------------
def merge_knobs(defaults: dict, knobs: dict | None) -> dict:
    """The knobs to use: the given ones over the defaults; unknown names are an error."""
    unknown = set(knobs or {}) - set(defaults)
    if unknown:
        raise CompileError(f"unknown knobs {sorted(unknown)} (known: {sorted(defaults)})")
    return {**defaults, **(knobs or {})}


def require(ok: bool, knobs: dict, why: str) -> None:
    if not ok:
        raise CompileError(f"knobs {knobs}: {why}")


def check_wg(knobs: dict, pow2: bool = False) -> int:
    wg = knobs["WG"]
    require(isinstance(wg, int) and 1 <= wg <= MAX_WG, knobs, f"WG outside 1..{MAX_WG}")
    require(not pow2 or wg & (wg - 1) == 0, knobs, "WG must be a power of two")
    return wg


def pow2_ceil(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def contiguous_dim(v: Value, materialized) -> int | None:
    """Which of dims 1 and 2 of a [B, R, C] loader input is contiguous in memory."""
    _, r, c = v.shape
    base = buffer_address(v, (0, 0, 0), materialized)
    step_r = buffer_address(v, (0, 1, 0), materialized) if r > 1 else None
    step_c = buffer_address(v, (0, 0, 1), materialized) if c > 1 else None
    if base is None:
        return None
    if step_r is not None and abs(step_r - base) == 1:
        return 1
    if step_c is not None and abs(step_c - base) == 1:
        return 2
    return None


def plain_strides(v: Value, materialized) -> tuple[Value, int, list[int]] | None:
    """(buffer value, offset, strides) when `v` is one f32 buffer read at an affine
    index through movement ops alone (permute, expand, slice, reshapes that keep a
    view): a loader the matmul may replace by vec4 loads. None otherwise (a buffer of a
    packed half type is read through its loader, which widens each element)."""
    if 0 in v.shape:
        return None
    if v.kind in ("input", "const") or v in materialized:
        return (v, 0, contiguous_strides(v.shape)) if v.stored == "f32" else None
    if v.kind != "node" or v.node.op not in ("permute", "expand", "slice", "reshape"):
        return None
    node, x = v.node, v.node.inputs[0]
    inner = plain_strides(x, materialized)
    if inner is None:
        return None
    root, offset, st = inner
    if node.op == "permute":
        st = [st[d] for d in node.attrs["dims"]]
    elif node.op == "expand":
        lead = len(v.shape) - len(x.shape)
        st = [0] * lead + [0 if s == 1 else t for s, t in zip(x.shape, st)]
    elif node.op == "slice":
        d = node.attrs["dim"]
        offset += node.attrs["start"] * st[d]
        st = st[:d] + [st[d] * node.attrs["step"]] + st[d + 1:]
    else:
        st = view_strides(x.shape, st, v.shape)
        if st is None:
            return None
    return root, offset, st


def vec4_view(v: Value, materialized, dim: int) -> tuple[Value, int, list[int]] | None:
    """plain_strides(v) when v can be read 16 bytes at a time along `dim`: that dim
    contiguous, and the offset and the strides of the other dims (those longer than 1)
    multiples of 4 elements; None otherwise."""
    plain = plain_strides(v, materialized)
    if plain is None:
        return None
    _, offset, st = plain
    if st[dim] != 1 or offset % 4 or any(
            s % 4 for d, (n, s) in enumerate(zip(v.shape, st)) if d != dim and n > 1):
        return None
    return plain

def view_strides(shape, strides, new_shape) -> list[int] | None:
    """Strides of `new_shape` viewing data of `shape` with `strides`, or None when the
    reshape is no view: each run of dims whose sizes multiply to the same number must
    be contiguous among itself (unit dims take no part)."""
    old = [(s, t) for s, t in zip(shape, strides) if s != 1]
    new = [i for i, s in enumerate(new_shape) if s != 1]
    res = [0] * len(new_shape)
    a = b = 0
    while b < len(new):
        if a >= len(old):
            return None
        a2, b2, pa, pb = a + 1, b + 1, old[a][0], new_shape[new[b]]
        while pa != pb:
            if pa < pb and a2 < len(old):
                pa, a2 = pa * old[a2][0], a2 + 1
            elif pb < pa and b2 < len(new):
                pb, b2 = pb * new_shape[new[b2]], b2 + 1
            else:
                return None
        group = old[a:a2]
        if any(t0 != t1 * s1 for (_, t0), (s1, t1) in zip(group, group[1:])):
            return None
        stride = group[-1][1]
        for i in reversed(new[b:b2]):
            res[i], stride = stride, stride * new_shape[i]
        a, b = a2, b2
    return res if a == len(old) else None


def dim_slots(**lists) -> dict:
    """Slots for the three spatial dims: NAME=[d, h, w] gives NAME_D, NAME_H, NAME_W."""
    return {f"{k}_{a}": v for k, vals in lists.items() for a, v in zip("DHW", vals)}

def fold_vals(xt: str) -> dict:
    """The names REDUCERS and SCANNERS entries use, for element type xt: t, zero, one,
    lowest and highest (the identities of max and min), and the NaN tests of f32
    operands (false for i32), written on the bits since compilers may fold `v != v`:
    nan_a / nan_b for ArgAcc operands, nan_ab a statement returning NaN when a or b is."""
    f32 = xt == "f32"
    lims = {"f32": (NEG_INF, POS_INF),
            "i32": ("i32(-2147483647 - 1)", "i32(2147483647)")}[xt]
    return dict(t=xt, zero=literal(0, xt), one=literal(1, xt), lowest=lims[0], highest=lims[1],
                nan_a=is_nan("a.v") if f32 else "false",
                nan_b=is_nan("b.v") if f32 else "false",
                nan_ab=(f"if ({is_nan('a')} || {is_nan('b')}) "
                        "{ return a + b; } ") if f32 else "")
