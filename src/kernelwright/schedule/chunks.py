"""Kernels over tensors larger than one binding: one kernel per chunk of its output.

A device lets one kernel bind at most `BindingLimits.max_bytes` of a buffer (2 GiB on
NVIDIA's Vulkan driver through wgpu, 128 MiB on Mesa's software driver), while the
buffer itself may be far larger (KernelBench's elementwise op over 4096 x 393216
floats is 6 GiB). A kernel that would bind more is split here, after fusion and
before memory planning, into chunks of its stored value, each a *box* (a range per
dim) that is one contiguous range of memory: single indices of its leading dims, a
range of one dim, all of the dims after it. Chunks run along the first dim larger
than 1 (the rows of a reduction, a matmul's batch, a convolution's or a pool's
batch, an attention's batch and heads), and one dim further in while a single index
of it is still too large (a matmul's rows within one batch entry):

* `_Restrictor` rebuilds the kernel's computation for one box, pushing the box from
  the stored value down through the kernel's inline nodes to the buffers it reads
  (`_RULES`: one per primitive, e.g. a matmul's rows come from its left operand's
  rows and all of its right operand, a permute permutes the box, a reshape maps it
  group of dims by group of dims where each group's part is one range);
* a buffer read over a contiguous box is bound as a window of that buffer
  (`Window`: a byte offset aligned as the device requires, and a size), and the
  kernel sees a tensor of the box's shape: every chunk of equal length has the same
  WGSL text, one pipeline;
* any other buffer is bound whole (through slices where the box is partial) and
  must fit one binding;
* the chunk's output is a window of the stored value's buffer.

Chunks are as long as the limit allows: the fewest that fit, their length rounded
until every window starts at an aligned offset. Index arithmetic stays within one
binding, so 32-bit indices suffice however large the tensor. Where no rule applies (a
reduction over the split dim, a product whose right operand is itself too large)
`split_kernel` returns None and the runtime refuses the plan, naming the buffer. A
large transposed read (a box that is no range of its buffer) is such a case unless
the transposed tensor fits one binding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..dtypes import buffer_bytes, is_packed, itemsize
from ..ir.ir import CompileError, Node, Value
from ..kernels import Generated, generate
from ..options import BindingLimits, CompileOptions

Box = tuple[tuple[int, int], ...]  # [start, stop) per dim: the part of a value a chunk needs
MAX_CHUNKS = 4096


class Unsplittable(Exception):
    """The kernel cannot be chunked this way (the reason in words)."""


class _TooLarge(Unsplittable):
    """A binding of the chunk is still over the limit, a window misaligned, or a box not
    one range where it must be: shorter chunks (or another length) may do."""


@dataclass
class Window:
    """A range of bytes of the buffer holding `value`, bound as one binding."""

    value: Value
    offset: int
    nbytes: int


@dataclass
class Chunk:
    """One kernel of a split kernel: its generated code, the windows its reads stand for
    (a read not listed is bound whole), and the window of the stored value it writes."""

    gen: Generated
    windows: dict[Value, Window] = field(default_factory=dict)
    out: Window | None = None
    label: str = ""


@dataclass
class Space:
    """What a chunk's windows must respect: the device's limits, and the bytes per device
    buffer of each value larger than the device's largest buffer (`plan_segments`; a
    value not listed: `segment_bytes`)."""

    limits: BindingLimits
    segments: dict[int, int] = field(default_factory=dict)  # id(value) -> bytes per buffer

    def segment(self, v: Value) -> int:
        s = self.segments.get(id(v))
        return segment_bytes(v, self.limits) if s is None else s


def nbytes(v: Value) -> int:
    return buffer_bytes(v.numel, v.stored)


def segment_bytes(v: Value, limits: BindingLimits) -> int:
    """Bytes per device buffer of a value larger than the device's largest buffer (0 for
    one that fits): whole rows of its leading dims times a power of two, so that chunks
    of a power-of-two number of rows never cross from one buffer to the next."""
    if nbytes(v) <= limits.max_buffer:
        return 0
    row = nbytes(v)
    for s in v.shape:  # the first dims whose one index fits a buffer
        if s > 1 and row // s <= limits.max_buffer:
            row //= s
            break
        row //= s
    size = row << max(0, (limits.max_buffer // row).bit_length() - 1)
    if size % limits.align or size > limits.max_buffer:
        size = limits.max_buffer // limits.align * limits.align
    return size


def unit_windows(root: Value, tnode: Node | None, phases, materialized: set[Value],
                 limits: BindingLimits) -> dict[Value, int]:
    """Bytes per chunk unit (one index of the stored value's first dim larger than 1) of
    each buffer the kernel storing `root` would bind a window of, the stored value's own
    included; empty where the kernel cannot be chunked that way."""
    level = next((d for d, n in enumerate(root.shape) if n > 1), None)
    if level is None:
        return {}
    size = root.shape[level]
    free = Space(BindingLimits(limits.max_bindings, 1 << 62, 1, 1 << 62))

    def windows(length: int) -> dict[Value, int]:
        r = _Restrictor(materialized, root, free)
        r.value(root, (*full(root.shape[:level]), (0, length), *full(root.shape[level + 1:])))
        r.template(tnode)
        for t, v in phases:
            r.template(t), r.rebuilt(v)
        return {w.value: w.nbytes for w in r.windows.values()}

    try:  # per unit: what two more units add (one unit alone may bind less than a row)
        if size >= 4:
            two, four = windows(2), windows(4)
            units = {v: (four[v] - two.get(v, 0)) // 2 for v in four}
            units = {v: g for v, g in units.items() if g > 0}  # a window every chunk shares
        else:
            units = windows(1)
    except Unsplittable:
        return {}
    units[root] = nbytes(root) // size
    return units


def plan_segments(units: list[dict[Value, int]], limits: BindingLimits
                  ) -> tuple[Space, list[list[int]]]:
    """The bytes per device buffer of each value larger than the device's largest buffer,
    and, per kernel, the chunk lengths to try first. Chunks of several kernels window
    one such value (an elementwise kernel writing it by rows, a reduction reading it in
    pieces of another length): a device buffer's size is a power-of-two multiple of the
    least common multiple of their units, so that each kernel has chunk lengths (the
    divisors of the buffer's size in its units) whose windows never cross from one
    device buffer to the next. `units` is `unit_windows` of each kernel to split."""
    grains: dict[int, list[int]] = {}
    values: dict[int, Value] = {}
    for u in units:
        for v, g in u.items():
            if nbytes(v) > limits.max_buffer:
                grains.setdefault(id(v), []).append(g)
                values[id(v)] = v
    segments = {}
    for key, gs in grains.items():
        grain = math.lcm(*gs, limits.align)
        if grain <= limits.max_buffer:
            segments[key] = grain << ((limits.max_buffer // grain).bit_length() - 1)
    space = Space(limits, segments)
    hints = []
    for u in units:
        q = [space.segment(v) // g for v, g in u.items() if space.segment(v)
             and space.segment(v) % g == 0]
        common = math.gcd(*q) if q else 0
        hints.append(divisors(common)[:64])
    return space, hints


def divisors(n: int) -> list[int]:
    """n's divisors, largest first (none for 0)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0] if n > 0 else []
    return sorted(set(small) | {n // d for d in small}, reverse=True)


def needs_split(gen: Generated, root: Value, limits: BindingLimits) -> bool:
    return any(nbytes(v) > limits.max_bytes for v in [*gen.reads, root])


def full(shape) -> Box:
    return tuple((0, s) for s in shape)


def contiguous_range(shape, box: Box) -> tuple[int, int] | None:
    """The flat [start, stop) of a box that is one contiguous range of a row-major
    tensor of `shape` (single indices, then a range, then whole dims); else None."""
    partial = [d for d in range(len(shape)) if box[d] != (0, shape[d])]
    k = partial[-1] if partial else 0
    if any(box[d][1] - box[d][0] != 1 for d in range(k)):
        return None
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    start = sum(box[d][0] * strides[d] for d in range(len(shape)))
    return start, start + math.prod(hi - lo for lo, hi in box)


def enclosing(shape, box: Box) -> Box:
    """The smallest contiguous box holding `box`: its dims up to the first one that
    takes more than one index as they are, the dims after it whole."""
    k = next((d for d, (a, b) in enumerate(box) if b - a > 1), len(shape))
    return (*box[:k + 1], *full(shape[k + 1:]))


def range_box(shape, a: int, b: int) -> Box | None:
    """The contiguous box of `shape` covering flat [a, b) exactly, or None."""
    for k in range(len(shape) - 1, -1, -1):
        inner = math.prod(shape[k + 1:])
        outer = inner * shape[k]
        if a % inner == 0 and b % inner == 0 and a // outer == (b - 1) // outer:
            rest = a // outer
            lead = []
            for d in range(k - 1, -1, -1):
                lead.append((rest % shape[d], rest % shape[d] + 1))
                rest //= shape[d]
            return (*reversed(lead), (a % outer // inner, (b - 1) % outer // inner + 1),
                    *full(shape[k + 1:]))
    return () if not shape and (a, b) == (0, 1) else None


def split_kernel(root: Value, tnode: Node | None, phases: list[tuple[Node, Value]],
                 materialized: set[Value], options: CompileOptions,
                 space: Space, hints: list[int] = ()) -> list[Chunk] | None:
    """The chunks of the kernel storing `root` (template `tnode`, row-kernel `phases`),
    each binding at most space.limits.max_bytes; None when it cannot be split. `hints`:
    chunk lengths along the first dim larger than 1 to try first (`plan_segments`)."""
    limits = space.limits
    bound = [root, *materialized_reads(root, materialized)]
    packed = [v for v in bound if is_packed(v.stored)]
    if packed:
        raise CompileError(f"{packed[0]} ({packed[0].stored}) is bound by a kernel over more "
                           "bytes than one binding holds: float16 and bfloat16 tensors are "
                           "not chunked yet")
    biggest = max(nbytes(v) for v in bound)
    for level in range(len(root.shape)):  # chunks along dim `level`
        size = root.shape[level]
        if size == 1:
            continue
        outer = math.prod(root.shape[:level])
        if outer > MAX_CHUNKS:
            return None
        row_bytes = nbytes(root) // (outer * size)
        n = max(1, math.ceil(biggest / limits.max_bytes / outer))
        tried: set[int] = set()
        first = [length for length in hints if length < size or outer > 1]
        hints = ()  # for the first level only
        while n <= size and n * outer <= MAX_CHUNKS:
            lengths = first or _aligned_lengths(math.ceil(size / n), size, row_bytes,
                                                limits.align)
            first = []
            for length in lengths:
                if length in tried or length == size and outer == 1:
                    continue
                tried.add(length)
                try:
                    return _chunks(root, tnode, phases, materialized, options, space, level,
                                   length)
                except _TooLarge:
                    continue
                except Unsplittable:
                    return None
            n = max(n + 1, int(n * 1.25))
    return None


def _chunks(root, tnode, phases, materialized, options, space: Space, level: int,
            length: int) -> list[Chunk]:
    shape = root.shape
    size = shape[level]
    boxes = []
    for flat in range(math.prod(shape[:level])):
        lead, rest = [], flat
        for d in range(level - 1, -1, -1):
            lead.append((rest % shape[d], rest % shape[d] + 1))
            rest //= shape[d]
        for a in range(0, size, length):
            boxes.append((*reversed(lead), (a, min(size, a + length)), *full(shape[level + 1:])))
    return [_chunk(root, tnode, phases, materialized, options, space, box,
                   f"{i + 1}/{len(boxes)}") for i, box in enumerate(boxes)]


def materialized_reads(root: Value, materialized: set[Value]) -> list[Value]:
    """The buffers a kernel storing `root` reads (inputs, constants, stored values)."""
    seen: set[int] = set()
    out: list[Value] = []
    stack = [root]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.kind in ("input", "const") or (v in materialized and v is not root):
            out.append(v)
        elif v.node is not None:
            stack.extend(v.node.inputs)
    return out


def _aligned_lengths(base: int, size: int, row_bytes: int, align: int) -> list[int]:
    """Chunk lengths to try for a target `base`: base itself, then base rounded down to
    multiples of growing powers of two (offsets of whole chunks aligned more often)."""
    out = [base]
    step = 2
    while step <= base:
        out.append(base // step * step)
        step *= 2
    need = align // math.gcd(align, row_bytes)  # rows per aligned offset of the output
    out = [max(need, length // need * need) for length in out]
    return [n for n in dict.fromkeys(out) if 0 < n <= size]


def _chunk(root, tnode, phases, materialized, options, space: Space, box: Box,
           label: str) -> Chunk:
    r = _Restrictor(materialized, root, space)
    new_root = r.value(root, box)
    out = _window(root, box, space)
    new_tnode = r.template(tnode)
    new_phases = [(r.template(t), r.rebuilt(v)) for t, v in phases]
    gen = generate(new_root, new_tnode, set(materialized) | {new_root}, id, options,
                   new_phases, False)
    for v in gen.reads:
        if v not in r.windows and nbytes(v) > space.limits.max_bytes:
            raise _TooLarge(f"{v} is read whole")
    return Chunk(gen, {v: w for v, w in r.windows.items() if v in gen.reads}, out, label)


def _window(v: Value, box: Box, space: Space) -> Window:
    """The window of v's buffer holding `box`, or _TooLarge when the box is not one
    aligned range of memory that fits a binding."""
    flat = contiguous_range(v.shape, box)
    if flat is None:
        raise _TooLarge(f"{v}{list(box)} is no range of its buffer")
    item = itemsize(v.dtype)
    return _checked(Window(v, flat[0] * item, (flat[1] - flat[0]) * item), space)


def _checked(w: Window, space: Space) -> Window:
    """w, or _TooLarge where it is misaligned, larger than one binding, or crosses from
    one device buffer of its value to the next (Space.segment)."""
    limits, seg = space.limits, space.segment(w.value)
    if (w.offset % limits.align or w.nbytes > limits.max_bytes
            or seg and w.offset // seg != (w.offset + w.nbytes - 1) // seg):
        raise _TooLarge(f"{w.value}: bytes [{w.offset}, +{w.nbytes}) misaligned, too large "
                        "or across two buffers")
    return w


class _Restrictor:
    """Rebuilds the values of one kernel for one box of its stored value (module
    docstring): `value(v, box)` is v restricted to the box, in new nodes where anything
    changes, with windows for the buffers it reads over a contiguous box."""

    def __init__(self, materialized: set[Value], root: Value, space: Space) -> None:
        self.materialized, self.root, self.space = materialized, root, space
        self.limits = space.limits
        self.windows: dict[Value, Window] = {}
        self.memo: dict[tuple[int, Box], Value] = {}
        self.by_value: dict[int, list[Value]] = {}

    def rebuilt(self, v: Value) -> Value:
        """The restricted value built for v (a row kernel's phase), v if none was."""
        built = self.by_value.get(id(v), [v])
        if len(built) > 1:
            raise Unsplittable(f"{v} is read over two boxes")
        return built[0]

    def template(self, t: Node | None) -> Node | None:
        return None if t is None else self.rebuilt(t.out).node

    def value(self, v: Value, box: Box) -> Value:
        if v.kind == "scalar" or box == full(v.shape) and v is not self.root:
            return v
        key = (id(v), box)
        if key not in self.memo:
            self.memo[key] = new = self._build(v, box)
            self.by_value.setdefault(id(v), []).append(new)
        return self.memo[key]

    def _is_leaf(self, v: Value) -> bool:
        return v.kind in ("input", "const") or (v in self.materialized and v is not self.root)

    def _build(self, v: Value, box: Box) -> Value:
        if self._is_leaf(v):
            # bound over the range of memory that holds the box (its leading dims' range,
            # the rest whole), or whole where that does not fit; sliced to the box
            outer = enclosing(v.shape, box)
            try:
                base, at = self._window_leaf(v, outer), outer
            except _TooLarge:
                if nbytes(v) > self.limits.max_bytes:
                    raise
                base, at = v, full(v.shape)
            for d, ((a, b), (lo, _)) in enumerate(zip(box, at)):
                if (a, b) != at[d] or base.shape[d] != b - a:
                    base = self._node("slice", [base], (*base.shape[:d], b - a,
                                                        *base.shape[d + 1:]),
                                      v.dtype, {"dim": d, "start": a - lo, "step": 1})
            return base
        node = v.node
        if box == full(v.shape):  # the root, whole
            return v
        rule = _RULES.get(node.op)
        if rule is None:
            raise Unsplittable(f"no chunking rule for {node.op}")
        if node.op == "reshape":
            flat = contiguous_range(v.shape, box)
            try:
                rule(node, box)
            except _TooLarge:
                if flat is None:
                    raise
                return self._node("reshape", [self.flat(node.inputs[0], *flat)], _shape(box),
                                  v.dtype, {}, node)
        ins, attrs = rule(node, box)  # [(input, its box)], new attributes
        inputs = [x if x.kind == "scalar" else self.value(x, b) for x, b in ins]
        if attrs is DROP:  # the input's box is the output itself: the node goes
            return inputs[0]
        return self._node(node.op, inputs, _shape(box), v.dtype,
                          node.attrs if attrs is None else attrs, node)

    def _window_leaf(self, v: Value, box: Box) -> Value:
        """A value standing for a window of v's buffer that holds contiguous `box`."""
        return self._range_leaf(v, *contiguous_range(v.shape, box), _shape(box))

    def _range_leaf(self, v: Value, a: int, b: int, shape) -> Value:
        """A value of `shape` standing for elements [a, b) of v's buffer, bound as one
        window; where a's byte is not aligned as the device requires, the window starts
        at the aligned byte before it and the value is a slice of it, reshaped."""
        item = itemsize(v.dtype)
        skip = a * item % self.limits.align // item
        w = _checked(Window(v, (a - skip) * item, (b - a + skip) * item), self.space)
        leaf = Value((b - a + skip,) if skip else tuple(shape), v.dtype, kind="input",
                     name=v.name)
        self.windows[leaf] = w
        if not skip:
            return leaf
        part = self._node("slice", [leaf], (b - a,), v.dtype, {"dim": 0, "start": skip, "step": 1})
        return part if len(shape) == 1 else self._node("reshape", [part], tuple(shape),
                                                        v.dtype, {})

    def flat(self, v: Value, a: int, b: int) -> Value:
        """v's elements [a, b) in row-major order, as a 1-d value: a range of a reshape
        that is no box of the reshaped value (a loss's sum of (x - y)^2 over all of a
        [B, N] tensor, in pieces that cross its rows), pushed through elementwise ops to
        the buffers, each then read over one range."""
        key = (id(v), ((-a - 1, b),))  # a memo key no box has
        if key in self.memo:
            return self.memo[key]
        node = v.node
        if self._is_leaf(v):
            new = self._range_leaf(v, a, b, (b - a,))
        elif node.op in ("ew", "materialize"):
            new = self._node(node.op, [x if x.kind == "scalar" else self.flat(x, a, b)
                                       for x in node.inputs], (b - a,), v.dtype, node.attrs, node)
        elif node.op == "reshape":
            new = self.flat(node.inputs[0], a, b)
        elif node.op == "expand" and node.inputs[0].numel == 1:
            one = self._node("reshape", [node.inputs[0]], (1,), v.dtype, {})
            new = self._node("expand", [one], (b - a,), v.dtype, {}, node)
        else:
            box = range_box(v.shape, a, b)
            if box is None:
                raise _TooLarge(f"{v}[{a}:{b}] is no box of it")
            new = self._node("reshape", [self.value(v, box)], (b - a,), v.dtype, {})
        self.memo[key] = new
        return new

    @staticmethod
    def _node(op, inputs, shape, dtype, attrs, like: Node | None = None) -> Value:
        out = Value(tuple(shape), dtype, name=like.out.name if like else inputs[0].name)
        out.node = Node(op, list(inputs), dict(attrs), out, like.source if like else "")
        return out


def _shape(box: Box) -> tuple[int, ...]:
    return tuple(b - a for a, b in box)


# -- one rule per primitive: the box each input needs, and the node's new attributes
# (None: unchanged; DROP: the node is its one input's box itself) -----------------------
Rule = Callable[[Node, Box], tuple[list[tuple[Value, Box]], dict | None]]
DROP: dict = {}


def _same(node: Node, box: Box):
    return [(x, box) for x in node.inputs], None


def _reshape(node: Node, box: Box):
    return [(node.inputs[0], reshape_box(node.out.shape, node.inputs[0].shape, box))], None


def reshape_box(out_shape, in_shape, box: Box) -> Box:
    """The box of a reshape's input that `box` of its output reads: dims taken group
    by group (the fewest dims of each side with equal products), each group's part of
    the box one range in both shapes."""
    o = [d for d, s in enumerate(out_shape) if s != 1]
    i = [d for d, s in enumerate(in_shape) if s != 1]
    res = [(0, 1)] * len(in_shape)
    a = b = 0
    while a < len(o) or b < len(i):
        a2, b2 = a + 1, b + 1
        po, pi = out_shape[o[a]], in_shape[i[b]]
        while po != pi:
            if po < pi:
                po *= out_shape[o[a2]]
                a2 += 1
            else:
                pi *= in_shape[i[b2]]
                b2 += 1
        go, gi = o[a:a2], i[b:b2]
        flat = contiguous_range([out_shape[d] for d in go], [box[d] for d in go])
        part = None if flat is None else range_box([in_shape[d] for d in gi], *flat)
        if part is None:
            raise _TooLarge(f"reshape {list(in_shape)} -> {list(out_shape)} of {list(box)}")
        for d, r in zip(gi, part):
            res[d] = r
        a, b = a2, b2
    return tuple(res)


def _permute(node: Node, box: Box):
    dims = node.attrs["dims"]
    inv = [0] * len(dims)
    for d, p in enumerate(dims):
        inv[p] = d
    return [(node.inputs[0], tuple(box[inv[p]] for p in range(len(dims))))], None


def _expand(node: Node, box: Box):
    x = node.inputs[0]
    lead = len(node.out.shape) - len(x.shape)
    return [(x, tuple((0, 1) if s == 1 else box[d + lead] for d, s in enumerate(x.shape)))], None


def _slice(node: Node, box: Box):
    x, at = node.inputs[0], node.attrs
    d = at["dim"]
    (a, b), start, step = box[d], at["start"], at["step"]
    lo, hi = ((start + a * step, start + (b - 1) * step + 1) if step > 0 else
              (start + (b - 1) * step, start + a * step + 1))
    inner = (*box[:d], (lo, hi), *box[d + 1:])
    return [(x, inner)], DROP if step == 1 else {**at, "start": start + a * step - lo}


def _pad(node: Node, box: Box):
    x, pads = node.inputs[0], node.attrs["pads"]
    inner, new = [], []
    for d, ((a, b), (lo, _)) in enumerate(zip(box, pads)):
        n = x.shape[d]
        xa, xb = max(0, a - lo), min(n, b - lo)
        if xb <= xa:
            raise Unsplittable("a chunk of padding alone")
        inner.append((xa, xb))
        new.append((max(0, lo - a), max(0, (b - lo) - n)))
    return [(x, tuple(inner))], {**node.attrs, "pads": new}


def _cat(node: Node, box: Box):
    d = node.attrs["dim"]
    (a, b), ins, at = box[d], [], 0
    for x in node.inputs:
        lo, hi = max(a, at), min(b, at + x.shape[d])
        if lo < hi:
            ins.append((x, (*box[:d], (lo - at, hi - at), *box[d + 1:])))
        at += x.shape[d]
    return ins, DROP if len(ins) == 1 else None


def _gather(node: Node, box: Box):
    x, index = node.inputs
    g = node.attrs["dim"]
    return [(x, tuple((0, x.shape[d]) if d == g else r for d, r in enumerate(box))),
            (index, box)], None


def _window_rule(node: Node, box: Box):
    x = node.inputs[0]
    lead = len(x.shape) - len(node.attrs["kernel"])
    if box[lead:] != full(node.out.shape)[lead:]:
        raise Unsplittable("a chunk of a window's kernel or output dims")
    return [(x, (*box[:lead], *full(x.shape[lead:])))], None


def _iota(node: Node, box: Box):
    at = node.attrs
    a = box[at["dim"]][0]
    return [], ({**at, "start": at["start"] + a * at["step"]} if a else None)


def _rows(node: Node, box: Box):
    """reduce [O, R] -> [O] (moments: [O, 2]); pool [L, *S] -> [L, *O]: a range of rows."""
    x = node.inputs[0]
    if node.op == "pool" and box[1:] != full(node.out.shape)[1:]:
        raise Unsplittable("a chunk of a pool's windows")
    return [(x, (box[0], *full(x.shape[1:])))], None


def _scan(node: Node, box: Box):
    if box[1] != (0, node.out.shape[1]):
        raise Unsplittable("a scan along its split dim")
    return [(node.inputs[0], box)], None


def _recur(node: Node, box: Box):
    """recur [P, R, Q]: whole columns, the chunk's (p, q) of a, b and h0."""
    if box[1] != (0, node.out.shape[1]):
        raise Unsplittable("a recurrence along its split dim")
    a, b, h0 = node.inputs
    return [(a, box), (b, box), (h0, (box[0], box[2]))], None


def _sort(node: Node, box: Box):
    """sort [A, R, B] -> [A, K, B]: whole rows, the chunk's (a, b)."""
    if box[1] != (0, node.out.shape[1]):
        raise Unsplittable("a sort along its split dim")
    return [(node.inputs[0], (box[0], (0, node.inputs[0].shape[1]), box[2]))], None


def _matmul(node: Node, box: Box):
    x, y = node.inputs
    fold = node.attrs.get("fold")
    if fold:  # out [J, G, M, fold]: blocks js of B's columns, from qs[0] of the first
        js, bs, ms, qs = box
        ns = (js[0] * fold + qs[0], (js[1] - 1) * fold + qs[1])
    else:
        bs, ms, ns = box
    if (ms[0] or ns[0]) and (node.attrs.get("k_from") or node.attrs.get("k_to")):
        raise Unsplittable("a banded product's rows")
    k = x.shape[2]
    return [(x, (bs, ms, (0, k))), (y, (bs, (0, k), ns))], None


def _conv(node: Node, box: Box):
    x, w = node.inputs
    if box[2:] != full(node.out.shape)[2:]:
        raise Unsplittable("a chunk of a convolution's positions")
    cs = box[1]
    if cs != (0, node.out.shape[1]) and node.attrs["groups"] != 1:
        raise Unsplittable("a chunk of a grouped convolution's channels")
    wbox = list(full(w.shape))
    wbox[1 if node.attrs["transposed"] else 0] = cs
    return [(x, (box[0], *full(x.shape[1:]))), (w, tuple(wbox))], None


def _attention(node: Node, box: Box):
    if node.attrs.get("lse"):
        raise Unsplittable("attention with its rows' log-sum-exp (one flat value)")
    q, k, v, *mask = node.inputs
    bs, ls, es = box
    if es != (0, node.out.shape[2]) or ls[0] and node.attrs["causal"]:
        raise Unsplittable("attention along its keys' dims")
    return [(q, (bs, ls, (0, q.shape[2]))), (k, (bs, *full(k.shape[1:]))),
            (v, (bs, *full(v.shape[1:]))), *[(m, (bs, ls, (0, m.shape[2]))) for m in mask]], None


def _attention_grad(node: Node, box: Box):
    """attention_grad by batch-heads only: dQ's chunk reads its query heads' rows and
    their key/value heads (whole groups of query heads), dK / dV's chunk its key/value
    heads' and every query head of their groups."""
    bs = box[0]
    if box[1:] != full(node.out.shape)[1:]:
        raise Unsplittable("attention's gradient along its rows")
    g = node.inputs[0].shape[0] // node.inputs[1].shape[0]
    if node.attrs["wrt"] == "q":
        if bs[0] % g or bs[1] % g:
            raise _TooLarge("a chunk of attention's gradient that splits a group of heads")
        qs, ks = bs, (bs[0] // g, bs[1] // g)
    else:
        qs, ks = (bs[0] * g, bs[1] * g), bs
    return [(x, ((ks if i in (1, 2) else qs), *full(x.shape[1:])))
            for i, x in enumerate(node.inputs)], None


_RULES: dict[str, Rule] = {
    "ew": _same, "materialize": _same, "reshape": _reshape, "permute": _permute,
    "expand": _expand, "slice": _slice, "pad": _pad, "cat": _cat, "gather": _gather,
    "window": _window_rule, "iota": _iota, "reduce": _rows, "pool": _rows,
    "scan": _scan, "sort": _sort, "matmul": _matmul, "conv": _conv, "attention": _attention,
    "attention_grad": _attention_grad, "recur": _recur,
}
