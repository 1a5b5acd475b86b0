"""Fill a WGSL template for one scheduled kernel: its loaders, epilogue and knobs.

`generate(group, ...)` picks the template by the group's template node (none: the
elementwise kernel), generates the loader functions for the node's inputs and the
epilogue for the stored value (codegen.Emitter), chooses the knobs (tile sizes,
workgroup size, elements per invocation) and returns the WGSL text with its
bindings, dispatch grid, knobs and a stable key.

Knobs are data. Each template's fill function takes an optional `knobs` dict (names
as the template's slots: BM, BN, TM, TN, BK for the matmul; WG, EPT and VEC for
elementwise kernels; WG, TPR, VEC and ORDER for reductions and row kernels; ...);
knobs left out take the template's heuristic default (`*_knobs` below, the one place
for defaults), and a setting the template cannot run correctly is a CompileError.
`knob_space` lists a
small, shape-keyed set of settings per template: the autotuner's search space
(tune/). The key (`KernelKey`: template, operand shapes, and a digest of the
generated functions, the template node's attributes and the template's text) names
the computation independently of the knobs, so that the tuner's cache can say which
knobs were fastest for it; `generate` asks a chooser (by default the tuning cache,
tune.choose_knobs) for them.
"""

from __future__ import annotations

import hashlib
import json
import math
import string
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import NamedTuple

from .codegen.codegen import (
    HELPERS,
    KERNEL_DIR,
    Emitter,
    Index,
    KernelSource,
    _cast,
    buffer_address,
    contiguous_strides,
    is_nan,
    literal,
    template,
    to_buffer,
)
from .dtypes import element_type, wgsl_type
from .ir.ir import MOVEMENT_OPS, CompileError, Node, Value, where_band

MAX_GRID = 65535
MAX_WG = 256  # WebGPU's default maxComputeInvocationsPerWorkgroup: every space keeps to it
WORKGROUP_BYTES = 16384  # WebGPU's default maxComputeWorkgroupStorageSize


class KernelKey(NamedTuple):
    """What a kernel computes, independent of its knobs: the tuning cache's key.
    `bucket` is the operand shapes; for now the exact shapes are the shape bucket."""

    template: str
    bucket: str  # e.g. "f32[1,70,37] f32[1,37,45] -> f32[1,70,45]"
    digest: str  # of the generated functions, the node's attributes and the template text

    def __str__(self) -> str:
        return f"{self.template} {self.bucket} #{self.digest}"


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

    def binding_ids(self, read_ids: list[int], out_id: int) -> list[int]:
        """The buffer of each binding, given the buffers of its reads and its output:
        the reads, then their vec4 views, then the output (codegen.KernelSource.bindings)."""
        return list(read_ids) + [read_ids[i] for i in self.views] + [out_id]


@dataclass(eq=False)
class KernelRequest:
    """A kernel about to be generated, as a knob chooser sees it: its key, the kernel
    with default knobs, its search space, and `generate(knobs)` for any other setting."""

    default: Generated
    out: Value
    tnode: Node | None
    materialized: set
    buffer_of: Callable
    phases: tuple = ()  # a row kernel's reductions (generate)
    order: tuple = ()  # values bound first, in this order (fill_kernel)
    band_only: bool = False  # only the output's elements inside its band are read

    @property
    def key(self) -> KernelKey:
        return self.default.key

    @property
    def kind(self) -> str:
        return self.default.name

    @property
    def spec_key(self) -> str:
        """The key and the shape of every binding (reads, then the output): what a whole
        kernel written for this request (kernelwright optimize) is stored under."""
        shapes = [v.shape for v in self.default.reads] + [self.out.shape]
        return f"{self.key} | " + " ".join(f"[{','.join(map(str, s))}]" for s in shapes)

    @cached_property
    def space(self) -> list[dict]:
        """The default knobs first, then the template's other settings for this shape."""
        rest = knob_space(self.kind, self.out, self.tnode, self.phases)
        return [self.default.knobs] + [k for k in rest if k != self.default.knobs]

    def generate(self, knobs: dict | None) -> Generated:
        return fill_kernel(self.out, self.tnode, self.materialized, self.buffer_of, knobs,
                           self.phases, self.order, self.band_only)


# A chooser returns knobs, a whole kernel (a `Generated`: an optimized kernel from the
# tuning cache), or None for the template's defaults.
KnobChooser = Callable[[KernelRequest], "dict | Generated | None"]


def grid_1d(n: int, wg: int) -> tuple[tuple[int, int, int], int]:
    """Workgroups for n invocations, folded into 2-D past the per-dimension limit;
    returns the grid and the number of invocations per grid row."""
    groups = max(1, math.ceil(n / wg))
    gx = min(groups, MAX_GRID)
    return (gx, math.ceil(groups / gx), 1), gx * wg


def _loader(src: KernelSource, materialized, name: str, x: Value, dtype: str = "f32",
            lanes: int | None = None) -> str:
    """`fn name(i0, i1, ...)`: x's element at that index. With `lanes` (a dim of x whose
    size is a multiple of 4): a vec4 of the elements at i_lanes + 0..3, i_lanes a
    multiple of 4, written so that the lanes share their index arithmetic (a window's
    pixel is divided once, not four times: Emitter.aligned)."""
    em = Emitter(src, materialized)
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


def _epilogue(src: KernelSource, materialized, out: Value, root: Value | None,
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


XYZW = "xyzw"


def _lane_args(src: KernelSource, vec: int, q: str, gi: str, loaded: dict | None = None,
               prefix: str = "l") -> tuple[list[str], list[str]]:
    """How a template hands the lanes (codegen: buffers read at the kernel's element) to
    the generated functions for the VEC consecutive elements gi, gi + 1, ... (vector
    q = gi / VEC): statements loading them (f32 lanes through a vec4 view, 16 bytes at a
    time) and, per element, the argument text ", x0, x1, ...". `loaded` maps a lane
    to an expression already holding its vector (VEC 4) or element (VEC 1): a cache."""
    stmts, args = [], [""] * vec
    for i, v in sorted(src.lanes.items()):
        if loaded and i in loaded:
            vals = [loaded[i]] if vec == 1 else [f"{loaded[i]}.{XYZW[j]}" for j in range(vec)]
        elif vec == 4 and v.dtype == "f32":
            stmts.append(f"let {prefix}{i} = {src.view4(v)}[{q}];")
            vals = [f"{prefix}{i}.{XYZW[j]}" for j in range(vec)]
        else:
            vals = [f"in{i}[{gi}{f' + {j}' if j else ''}]" for j in range(vec)]
        args = [a + f", {val}" for a, val in zip(args, vals)]
    return stmts, args


def generate(out: Value, tnode: Node | None, materialized, buffer_of,
             choose: KnobChooser | None = None, phases=(), band_only=False) -> Generated:
    """The kernel that stores `out`, computed by template node `tnode` (None: a plain
    elementwise kernel, or with `phases` (pairs of a reduce node and the value its group
    stores) a row kernel: those reductions, then `out` over the same rows, or where
    tnode is a reduction of those rows, tnode's value per row). Its knobs
    are the template's defaults unless `choose` returns others for the kernel's request
    (knobs that no longer fit the template, e.g. stored by an older version, are
    ignored), or a whole kernel to use instead. `band_only`: no element of `out` outside
    its band is ever read (ir.read_only_in_band), so the kernel may leave them unwritten."""
    phases = tuple(phases)
    gen = fill_kernel(out, tnode, materialized, buffer_of, None, phases, (), band_only)
    if choose is None:
        return gen
    request = KernelRequest(gen, out, tnode, materialized, buffer_of, phases, (), band_only)
    knobs = choose(request)
    if isinstance(knobs, Generated):
        return knobs
    if knobs and knobs != gen.knobs:
        try:
            gen = request.generate(knobs)
        except CompileError:
            pass
    return gen


def fill_kernel(out: Value, tnode: Node | None, materialized, buffer_of,
                knobs: dict | None = None, phases=(), order=(), band_only=False) -> Generated:
    """Generate the kernel with the given knobs (missing ones: the defaults). `order`:
    values bound as its first reads in this order (another kernel's binding order, for a
    rewrite that must bind the same buffers as the kernel it replaces), whether or not
    the kernel reads them."""
    src = KernelSource(buffer_of)
    src.reads = list(order)
    src.band_only = band_only
    kind = "rows" if phases else template_kind(tnode)
    if kind not in TEMPLATES:
        raise CompileError(f"no kernel template for '{kind}'")
    epi = "" if kind in ("rows", "reduce") else _epilogue(  # row kernels write their own
        src, materialized, out, tnode.out if tnode else None,
        tnode.out.dtype if tnode else out.dtype)
    if phases:  # a reduction (tnode) reading reductions of its rows is the last phase
        last = [] if tnode is None else [(tnode, out)]
        tmpl, slots, grid, used = _rows(src, materialized, out, [*phases, *last],
                                        tnode is None, knobs)
    else:
        tmpl, slots, grid, used = TEMPLATES[kind][0](src, materialized, out, tnode, knobs)
    workgroup_bytes = slots.pop("workgroup_bytes", 0)
    own_epi = slots.pop("epilogue", epi)  # a template's own (the transposing tile's, by dims)
    result = f"epilogue({slots.pop('final', 'acc')}, gi)" if tnode else "epilogue(gi)"
    store = f"out[gi] = {to_buffer(result, out.dtype)};"
    helpers = "".join(HELPERS[h] for h in sorted(src.helpers))
    body = slots.pop("functions")
    # the key is what the kernel computes, whatever the knobs: a template whose functions
    # vary with its knobs (the matmul's vec4 loaders) passes knob-free ones for it
    key_body = slots.pop("key_functions", body)
    functions, key_functions = helpers + body + own_epi, helpers + key_body + epi
    # Generated slot text may itself place the store statement ("$STORE").
    slots = {k: v.replace("$STORE", store) if isinstance(v, str) else v for k, v in slots.items()}
    source = template(tmpl).substitute(BINDINGS=src.bindings(out), FUNCTIONS=functions,
                                       STORE=store, **slots)
    # a kernel that may skip the elements outside the band computes less than the whole
    key_functions += "band only" if band_only else ""
    key = kernel_key(kind, out, tnode, src.reads, key_functions)
    return Generated(kind, source, list(src.reads), grid, key, used, list(src.views),
                     workgroup_bytes)


def kernel_key(kind: str, out: Value, tnode: Node | None, reads: list[Value],
               functions: str) -> KernelKey:
    """Template, operand shapes (a template's inputs, else the buffers read) and a digest
    of everything else that decides what the kernel computes: the generated functions
    (loaders, epilogue), the template node's attributes and the template files."""
    operands = tnode.inputs if tnode else reads
    bucket = " ".join(f"{v.dtype}[{','.join(map(str, v.shape))}]" for v in operands)
    bucket += f" -> {out.dtype}[{','.join(map(str, out.shape))}]"
    attrs = json.dumps(tnode.attrs, sort_keys=True, default=str) if tnode else ""
    text = "\n".join((functions, attrs, _template_text(kind)))
    return KernelKey(kind, bucket.strip(), hashlib.sha1(text.encode()).hexdigest()[:16])


@cache
def _template_text(kind: str) -> str:
    names = {"reduce": ("rows",), "conv": ("conv", "conv_transpose"),
             "scan": ("scan", "scan_staged", "scan_regs", "scan_sums", "scan_rake",
                      "scan_cols"),
             "elementwise": ("elementwise", "transpose"),
             "materialize": ("elementwise",)}.get(kind, (kind,))
    return "".join((KERNEL_DIR / f"{name}.wgsl").read_text() for name in names)


# -- knobs --------------------------------------------------------------------------------
def _merge(defaults: dict, knobs: dict | None) -> dict:
    """The knobs to use: the given ones over the defaults; unknown names are an error."""
    unknown = set(knobs or {}) - set(defaults)
    if unknown:
        raise CompileError(f"unknown knobs {sorted(unknown)} (known: {sorted(defaults)})")
    return {**defaults, **(knobs or {})}


def _require(ok: bool, knobs: dict, why: str) -> None:
    if not ok:
        raise CompileError(f"knobs {knobs}: {why}")


def _check_wg(knobs: dict, pow2: bool = False) -> int:
    wg = knobs["WG"]
    _require(isinstance(wg, int) and 1 <= wg <= MAX_WG, knobs, f"WG outside 1..{MAX_WG}")
    _require(not pow2 or wg & (wg - 1) == 0, knobs, "WG must be a power of two")
    return wg


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def knob_space(kind: str, out: Value, tnode: Node | None, phases=()) -> list[dict]:
    """The settings the tuner tries for one kernel (besides its defaults)."""
    if phases:
        return rows_space(phases[0][0].inputs[0].shape[1], len(phases) + 1)
    return TEMPLATES[kind][1](out, tnode)


def elementwise_knobs(numel: int, transposed: bool = False) -> dict:
    """256 invocations per workgroup; vec4 loads and stores (VEC 4) when the element
    count is a multiple of 4; steps per invocation (EPT, each of VEC elements) 4 on
    tensors of 2^20 elements or more, else 1. TILE 1 (kernels/transpose.wgsl, 32 x 32
    tiles by 32 x 4 invocations: EPT 1, WG 128; TILE_EPTS, TILE_WGS) where the chain's
    main input is read transposed (`_transposed_dims`) and no buffer is read in the
    output's layout (measured in docs/PERF.md: the 1 GiB permute 0.61 ms against 1.56
    with TILE 0)."""
    if transposed:
        return {"WG": 128, "EPT": 1, "VEC": 1, "TILE": 1}
    return {"WG": 256, "EPT": 4 if numel >= 1 << 20 else 1, "VEC": 4 if numel % 4 == 0 else 1,
            "TILE": 0}


def elementwise_space(numel: int, tiled: bool = False) -> list[dict]:
    space = [{"WG": wg, "EPT": ept, "VEC": vec, "TILE": 0} for wg in (64, 256)
             for ept in (1, 2, 4, 8) for vec in ((1, 4) if numel % 4 == 0 else (1,))
             if ept == 1 or numel >= ept * wg * vec]
    tiles = [{**elementwise_knobs(numel, True), "EPT": ept, "WG": wg} for ept in TILE_EPTS
             for wg in TILE_WGS]
    return space + (tiles if tiled else [])


TILE_MIN = 16  # both tiled dims at least this long (a 32 x 32 tile of a thinner one idles)
# TILE 1's EPT: the tile is 32 along the output's contiguous dim A by 32 * EPT along B
# (32 x (32 EPT + 1) staged values), 32 EPT / (WG / 32) elements per invocation; with
# 32 x 8 invocations (WG 256, the only setting until 2026-12-04b) measured on the
# H200 (2026-12-01m, bench/results/memory_variants_permute_h200_2026-12-01m.json), the
# 1 GiB NCHW -> NHWC permute: EPT 1 0.652 ms (3.30 TB/s), EPT 2 0.610 (3.52 TB/s),
# EPT 3 1.651 (tiles of 96 rows, no divisor of 256). EPT 2 was the default from
# 2026-12-02 to 2026-12-04. Measured 2026-12-02b
# (memory_variants_permute_h200_2026-12-02b.json): EPT 4 2.140 ms against 0.611, and
# tiles of 64 along A (two stores of 32 a row) 0.626 ms at EPT 1 and 2.149 at EPT 2:
# the staged tiles over 16 KiB were 3.5x slower.
# TILE 1's WG: 32 x WG / 32 invocations (8 elements each at WG 128, EPT 1). Measured on
# the H200 (2026-12-04b, bench/results/wgsl_variants_permute_h200_2026-12-04b.json, the
# permute written by hand with each element's index from the tile's, as the epilogue
# by dims now does): 32 x 64 tiles by 32 x 8 invocations 0.596-0.602 ms (0.612-0.619
# as generated then, dividing each element's index); 32 x 32 by 32 x 8 0.645, by 32 x 4
# 0.583 (3.69 TB/s), by 32 x 2 0.585. The default since 2026-12-04b: EPT 1, WG 128.
TILE_EPTS = (1, 2)
TILE_WGS = (64, 128, 256)


class Without:
    """The values of `values` but `value`, as `in` asks (no copy of a plan-sized set per
    kernel or group)."""

    def __init__(self, values, value: Value) -> None:
        self.values, self.value = values, value

    def __contains__(self, v) -> bool:
        return v is not self.value and v in self.values


def _transposed_dims(out: Value, materialized) -> tuple[int, int] | None:
    """(A, B) when the value stored at `out` reads its main operand (buffer_address:
    through movement ops and first operands) transposed: the output's innermost dim A of
    size > 1 is not contiguous in that operand, another output dim B is (both at least
    TILE_MIN long)."""
    dims = [d for d, size in enumerate(out.shape) if size > 1]
    if len(dims) < 2 or out.node is None:
        return None
    others = Without(materialized, out)  # read through out's own node
    zero = (0,) * len(out.shape)
    base = buffer_address(out, zero, others)

    def step(d: int) -> int | None:
        at = buffer_address(out, tuple(1 if i == d else 0 for i in range(len(zero))), others)
        return None if at is None or base is None else at - base

    if base is None or step(dims[-1]) in (0, 1) or out.shape[dims[-1]] < TILE_MIN:
        return None  # in order already, or the same element along the row (a broadcast)
    return next(((dims[-1], d) for d in reversed(dims[:-1])
                 if step(d) == 1 and out.shape[d] >= TILE_MIN), None)


def _any_tile_dims(out: Value) -> tuple[int, int] | None:
    """The two innermost output dims of size > 1 (TILE 1 asked for where nothing is read
    transposed: correct, if not useful)."""
    dims = [d for d, size in enumerate(out.shape) if size > 1]
    return (dims[-1], dims[-2]) if len(dims) >= 2 else None


def _transpose_tile(src, materialized, out, dims: tuple[int, int], knobs):
    """The elementwise chain through kernels/transpose.wgsl (TILE 1): tiles of 32 x 32 *
    EPT of output dims (A, B), computed along B, stored along A, by 32 x WG / 32
    invocations; the epilogue takes the element's index along each dim (`_epilogue`
    with dims: the tile's other dims decoded once, no division per element)."""
    a, b = dims
    shape = out.shape
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    size_a, size_b = shape[a], shape[b]
    tb, rows = 32 * knobs["EPT"], knobs["WG"] // 32
    tiles_a, tiles_b = -(-size_a // 32), -(-size_b // tb)
    names = ["0" if size == 1 else f"d{d}" for d, size in enumerate(shape)]
    rest = ["    var base = 0;", "    var rr = r;"]
    for d in reversed(range(len(shape))):
        if d not in (a, b) and shape[d] > 1:
            rest.append(f"    let d{d} = rr % {shape[d]}; rr = rr / {shape[d]};"
                        f" base += d{d} * {strides[d]};")
    groups = tiles_a * tiles_b * (out.numel // (size_a * size_b))
    grid, gx = grid_1d(groups, 1)
    pad = " " * 12
    args = "".join(f", {'a' if d == a else 'b' if d == b else n}"
                   for d, n in enumerate(names) if n != "0")
    value = to_buffer(f"epilogue(gi{args})", out.dtype)
    # the 32 columns of B an invocation row covers, EPT times
    compute = (f"    for (var j = 0; j < 32; j += {rows}) {{\n"
               f"        for (var h = 0; h < {tb}; h += 32) {{\n"
               "            let a = a0 + ty + j;\n            let b = b0 + tx + h;\n"
               f"            if (a < {size_a} && b < {size_b}) {{\n"
               f"                let gi = base + b * {strides[b]} + a;\n"
               f"                tile[(ty + j) * {tb + 1} + tx + h] = {value};\n"
               "            }\n        }\n    }")
    epilogue = _epilogue(src, materialized, out, None, out.dtype, names)
    return "transpose", dict(
        functions="", epilogue=epilogue, TILE_T=element_type(out.dtype), TILES_A=tiles_a,
        TILES_B=tiles_b, GROUPS=groups, GRID_X=gx, SIZE_A=size_a, SIZE_B=size_b,
        STRIDE_B=strides[b], TB=tb, ROW=tb + 1, ROWS=rows, STAGED=32 * (tb + 1),
        REST="\n".join(rest), COMPUTE=compute,
        STORE_TILE=f"{pad}out[gi] = tile[tx * {tb + 1} + ty + j];",
        workgroup_bytes=32 * (tb + 1) * 4), grid, knobs


def _elementwise(src, materialized, out, tnode, knobs=None, acc4: str = ""):
    """A plain elementwise kernel (tnode None), or a materialize node's copy (the store
    then follows the template's epilogue: one element per step, or with VEC 4 four, the
    vec4 `acc4` their accs)."""
    dims = _transposed_dims(out, materialized) if tnode is None else None
    knobs = _merge(elementwise_knobs(out.numel, dims is not None and not src.lanes), knobs)
    wg, ept, vec = _check_wg(knobs), knobs["EPT"], knobs["VEC"]
    _require(isinstance(ept, int) and ept >= 1, knobs, "EPT must be a positive integer")
    _require(vec in (1, 4), knobs, "VEC is 1 or 4")
    _require(knobs["TILE"] in (0, 1), knobs, "TILE is 0 or 1")
    if knobs["TILE"]:
        _require(tnode is None and vec == 1 and ept in TILE_EPTS and wg in TILE_WGS, knobs,
                 f"TILE 1 is for plain elementwise kernels, with VEC 1, EPT in {TILE_EPTS}"
                 f" and WG in {TILE_WGS}")
        dims = dims or _any_tile_dims(out)
        _require(dims is not None, knobs, "TILE 1 needs two output dims of size > 1")
        return _transpose_tile(src, materialized, out, dims, knobs)
    _require(out.numel % vec == 0, knobs, "VEC 4 needs a multiple of 4 elements")
    _require(vec == 1 or tnode is None or acc4, knobs,
             "VEC 4 only for plain elementwise kernels and copies")
    steps = out.numel // vec
    threads = math.ceil(steps / ept)
    grid, row = grid_1d(threads, wg)
    if tnode is not None and vec == 1:
        body = "let gi = q;\n            $STORE"
    elif tnode is not None:
        src.out_vec4 = True
        vals = [to_buffer(f"epilogue(a.{XYZW[j]}, gi{f' + {j}' if j else ''})", out.dtype)
                for j in range(4)]
        body = "\n            ".join(
            ["let gi = q * 4;", f"let a = {acc4};",
             f"out[q] = vec4<{element_type(out.dtype)}>({', '.join(vals)});"])
    elif vec == 1:
        _, (args,) = _lane_args(src, 1, "q", "gi")
        body = f"let gi = q;\n            out[gi] = {to_buffer(f'epilogue(gi{args})', out.dtype)};"
    else:
        src.out_vec4 = True
        loads, args = _lane_args(src, 4, "q", "gi")
        vals = [to_buffer(f"epilogue(gi{f' + {j}' if j else ''}{a})", out.dtype)
                for j, a in enumerate(args)]
        body = "\n            ".join(
            ["let gi = q * 4;"] + loads
            + [f"out[q] = vec4<{element_type(out.dtype)}>({', '.join(vals)});"])
    return "elementwise", dict(functions="", WG=wg, ROW=row, THREADS=threads, EPT=ept,
                               STEPS=steps, BODY=body), grid, knobs


def _fold_vals(xt: str) -> dict:
    """The names REDUCERS and SCANNERS entries use, for element type xt: t, zero, one,
    lowest and highest (the identities of max and min), and the NaN tests of f32
    operands (false for i32), written on the bits since compilers may fold `v != v`:
    nan_a / nan_b for ArgAcc operands, nan_ab a statement returning NaN when a or b is."""
    f32 = xt == "f32"
    lims = {"f32": ("bitcast<f32>(0xff800000u)", "bitcast<f32>(0x7f800000u)"),
            "i32": ("i32(-2147483647 - 1)", "i32(2147483647)")}[xt]
    return dict(t=xt, zero=literal(0, xt), one=literal(1, xt), lowest=lims[0], highest=lims[1],
                nan_a=is_nan("a.v") if f32 else "false",
                nan_b=is_nan("b.v") if f32 else "false",
                nan_ab=(f"if ({is_nan('a')} || {is_nan('b')}) "
                        "{ return a + b; } ") if f32 else "")


# A reduction's combine sees partials in any order, so the arg reductions compare indices:
# as PyTorch, a NaN is the max (and the min) and propagates, and ties and NaNs go to the
# lowest index.
_ARG_COMBINE = ("let na = {nan_a}; let nb = {nan_b}; "
                "if (na != nb) {{ if (nb) {{ return b; }} return a; }} "
                "if (na || b.v == a.v) {{ if (b.i < a.i) {{ return b; }} return a; }} "
                "if (b.v {cmp} a.v) {{ return b; }} return a;")
_ACC_BYTES = {"ArgAcc": 8, "Moments": 12}  # accumulator structs' workgroup memory
REDUCERS = {
    # op: (accumulator type, init, combine body, leaf from element v at r, final)
    "sum": ("{t}", "{zero}", "return a + b;", "v", "acc"),
    "prod": ("{t}", "{one}", "return a * b;", "v", "acc"),
    "max": ("{t}", "{lowest}", "{nan_ab}return max(a, b);", "v", "acc"),
    "min": ("{t}", "{highest}", "{nan_ab}return min(a, b);", "v", "acc"),
    "argmax": ("ArgAcc", "ArgAcc({lowest}, 2147483647)", _ARG_COMBINE.replace("{cmp}", ">"),
               "ArgAcc(v, r)", "acc.i"),
    "argmin": ("ArgAcc", "ArgAcc({highest}, 2147483647)", _ARG_COMBINE.replace("{cmp}", "<"),
               "ArgAcc(v, r)", "acc.i"),
    # the count, mean and sum of squared deviations (M2) of a row (ir.GraphBuilder.
    # moments), stored as (mean, M2): Welford's update (a vector's own moments at a
    # time), Chan's combine of two partial rows (stable where the sum of squares less the
    # squared sum would cancel)
    "moments": ("Moments", "Moments(0.0, 0.0, 0.0)",
                "let n = a.n + b.n; if (n == 0.0) {{ return a; }} let d = b.m - a.m; "
                "let f = b.n / n; return Moments(n, a.m + d * f, a.q + b.q + d * d * a.n * f);",
                "Moments(1.0, v, 0.0)", "acc"),
}


# Elements of the row a multi-pass row kernel's invocation keeps in registers, at most
# (all of its buffers read at the row's elements together; settings that would hold more
# are refused, and the schedule then keeps a kernel per reduction). Measured on the H200
# (2026-12-01g, bench/results/memory_variants_long_rows_h200.json): log_softmax over
# rows of 16384 fused, 64 per invocation, 0.272 ms (3.9 TB/s, 1.25x PyTorch) against
# 0.507 ms in three kernels; softmax over rows of 32768, 128 per invocation, 0.288 ms
# (3.7 TB/s, 1.43x) against 0.509 ms. It was 32 (64 in the search), rows up to 8192.
ROW_CACHE = 128
# The longest row that schedule.fuse_rows fuses into one multi-pass row kernel: the
# default knobs keep it on chip (MAX_WG invocations x ROW_CACHE elements).
ROW_LIMIT = MAX_WG * ROW_CACHE
# Rows from which a column reduction (rows_knobs) takes one invocation per row.
COL_MANY_ROWS = 1 << 20


def rows_knobs(o: int, r: int, col: bool = False) -> dict:
    """A row kernel's knobs for O rows of R elements: WG invocations per workgroup, TPR
    of them per row (WG / TPR rows per workgroup), VEC elements per step (4: 16-byte
    loads of the buffers read at the row's own elements, when R is a multiple of 4),
    ORDER "row" (a row's invocations adjacent: the row is contiguous) or "col" (the
    rows of a workgroup adjacent). TPR: enough that each invocation takes at most 8
    steps (32 elements at VEC 4), up to WG (rows longer than 8192 elements then take more
    steps, up to ROW_CACHE elements in a fused kernel). A row whose elements are strided
    in memory (`col`: the row index is the contiguous one, e.g. a reduction over dim 0)
    takes "col" order (a warp's invocations take adjacent rows, so that each load of the
    warp reads one contiguous run), VEC 4 (four loads in flight per step), TPR 8, or
    more (up to WG) while the rows give fewer than 2^16 invocations, or 1 from
    COL_MANY_ROWS rows on (each invocation then reduces a row alone: a product over 12
    elements of 2^25 rows left one invocation in four idle at TPR 4). Measured on the H200
    (bench/results/memory_variants_h200.json): rows of 8192 contiguous elements 4.0 TB/s
    (1.2x PyTorch); the column sums of an 8192 x 16384 tensor (2026-12-01g,
    bench/results/memory_variants_long_rows_h200.json) 4.10 TB/s (1.15x PyTorch) with
    these knobs, against 2.91 TB/s in "row" order (the default before) and 3.24 TB/s in
    "col" order with VEC 1; the column max of 16384 x 14336 3.09 against 2.37 TB/s
    (PyTorch 4.06 TB/s)."""
    vec = 4 if r % 4 == 0 else 1
    if col:
        tpr = 1 if o >= COL_MANY_ROWS else max(8, _pow2_ceil(-(-(1 << 16) // o)))
        return {"WG": MAX_WG, "TPR": min(MAX_WG, tpr, _pow2_ceil(r // vec)), "VEC": vec,
                "ORDER": "col"}
    tpr = min(MAX_WG, _pow2_ceil(-(-(r // vec) // 8)))
    return {"WG": MAX_WG, "TPR": tpr, "VEC": vec, "ORDER": "row"}


def rows_space(r: int, passes: int = 1) -> list[dict]:
    """Settings for rows of R elements; a kernel of several passes over the row keeps it
    on chip, so it leaves out those that would hold more than ROW_CACHE elements of one
    buffer (the template counts all of its buffers)."""
    space = []
    for order in ("row", "col") if passes == 1 else ("row",):
        for vec in (1, 4) if r % 4 == 0 else (1,):
            for wg, tprs in ((64, (1, 8, 64)), (MAX_WG, (1, 8, 32, MAX_WG))):
                for tpr in tprs:
                    items = -(-(r // vec) // tpr)
                    if (tpr <= max(1, _pow2_ceil(r // vec))
                            and (passes == 1 or items * vec <= ROW_CACHE)):
                        space.append({"WG": wg, "TPR": tpr, "VEC": vec, "ORDER": order})
    return space


def row_share(r: int, tpr: int) -> int:
    """Elements of a row of R that each of its TPR invocations holds (at the default VEC)."""
    vec = 4 if r % 4 == 0 else 1
    return -(-(r // vec) // tpr) * vec


def row_kernel_fits(r: int, lanes: int) -> bool:
    """Whether a row kernel of several passes can hold rows of R elements of `lanes`
    buffers on chip (MAX_WG invocations per row; _rows raises TPR that far)."""
    return row_share(r, MAX_WG) * lanes <= ROW_CACHE


def reduce_knobs(o: int, r: int, col: bool = False) -> dict:
    return rows_knobs(o, r, col)


def reduce_space(o: int, r: int) -> list[dict]:
    return rows_space(r)


# The value of elements outside a band that a reduction may skip (its identity).
BAND_IDENTITY = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}


def _row_band_end(phases, r: int) -> str | None:
    """The end (exclusive) of the elements a row kernel of reductions alone needs in row
    o, as WGSL, when every phase reduces where(band, x, identity) over rows of a value
    [..., L, R] whose band bounds its elements from above, (j - i) <= c or < c (ir.
    where_band: causal attention's max and log-sum-exp), the same band for all; else
    None. The elements past it are the reductions' identity: not loaded."""
    ends = set()
    for tn, _ in phases:
        y = tn.inputs[0]
        while y.node is not None and y.node.op == "reshape" and y.node.inputs[0].shape[-1:] == (r,):
            y = y.node.inputs[0]
        band = where_band(y) if len(y.shape) >= 2 and y.shape[-1] == r else None
        if band is None or band[0] not in ("le", "lt") or \
                band[2] != BAND_IDENTITY.get(tn.attrs["op"]):
            return None
        op, c, _ = band
        ends.add(f"o % {y.shape[-2]} + {c + 1 if op == 'le' else c}")
    return ends.pop() if len(ends) == 1 else None


def _reduce(src, materialized, out, tnode, knobs=None):
    """A reduction (and its epilogue) as the row template with one pass."""
    return _rows(src, materialized, out, [(tnode, out)], False, knobs)


def row_major(x: Value, materialized) -> bool:
    """Whether the loader of x [O, R] walks memory along R (else along O: a reduction
    over a leading dim, whose rows a workgroup then takes side by side)."""
    base = buffer_address(x, (0, 0), materialized)
    if base is None or x.shape[0] < 2:
        return True
    step_o = buffer_address(x, (1, 0), materialized)
    step_r = buffer_address(x, (0, 1), materialized) if x.shape[1] > 1 else None
    return not (step_o is not None and step_o - base == 1
                and (step_r is None or step_r - base != 1))


def _rows(src, materialized, out, phases, consumer: bool, knobs=None):
    """The row template (kernels/rows.wgsl): for each of O rows of R elements, the
    reductions `phases` (reduce node, the value its group stores: the reduction and its
    epilogue chain) one after the other, each able to read the ones before as per-row
    values, then either the elementwise `out` over the row's elements (consumer: a
    fused softmax or norm, stored at o * R + r) or the last phase's value (a plain
    reduction, stored at o). The buffers read at the row's own elements are lanes
    (codegen); a kernel of several passes loads them once into registers (c<i>_<k>)
    and every pass reads them there: the row is read from memory once."""
    x0 = phases[0][0].inputs[0]
    o, r = x0.shape
    passes = len(phases) + consumer
    col = not consumer and len(phases) == 1 and not row_major(x0, materialized)
    cached = passes > 1
    functions, pending, bound, shared, finals = [], [], {}, [], []
    for j, (tn, root) in enumerate(phases):
        x = tn.inputs[0]
        _require(x.shape == (o, r), knobs or {}, "the phases of a row kernel share O and R")
        xt = "i32" if x.dtype in ("i32", "bool") else "f32"
        acc_t, init, combine, leaf, final = (
            s.format(**_fold_vals(xt)).replace("ArgAcc", f"ArgAcc{j}")
            for s in REDUCERS[tn.attrs["op"]])
        em = Emitter(src, materialized, lanes="gi", bound=dict(bound))
        val = em.value(x, Index(x.shape, dims=["o", "r"], flat="gi"))
        if x.dtype != xt:
            val = _cast(val, {}, x.dtype, xt)
        pending.append((em, f"load_{j}", ["o: i32", "r: i32", "gi: i32"], xt, val, True, j))
        if acc_t.startswith("ArgAcc"):
            functions.append(f"struct {acc_t} {{ v: {xt}, i: i32 }}\n")
        moments = acc_t == "Moments"  # alone in its kernel: stores (mean, M2) per row
        _require(not moments or (len(phases) == 1 and not consumer and root is tn.out),
                 knobs or {}, "a moments reduction is a kernel of its own")
        if moments:
            functions.append("struct Moments { n: f32, m: f32, q: f32 }\n")
        functions.append(f"fn combine_{j}(a: {acc_t}, b: {acc_t}) -> {acc_t} {{ {combine} }}\n"
                         f"fn leaf_{j}(v: {xt}, r: i32) -> {acc_t} {{ return {leaf}; }}\n")
        if not moments:
            em = Emitter(src, materialized, root=tn.out, root_flat="o", computes=root,
                         bound=dict(bound))
            val = em.value(root, Index(root.shape, flat="o"))
            pending.append((em, f"finish_{j}", [f"acc: {wgsl_type(tn.out.dtype)}", "o: i32"],
                            root.dtype, val, False, j))
        bound[root] = f"rv{j}"
        finals.append((acc_t, init, final))
    if consumer:
        em = Emitter(src, materialized, lanes="gi", bound=dict(bound), computes=out)
        val = em.value(out, Index(out.shape, flat="gi"))
        pending.append((em, "epilogue", ["gi: i32"], out.dtype, val, True, len(phases)))
    lanes = src.lane_params()
    nl = max(1, len(src.lanes))
    defaults = rows_knobs(o, r, col)
    while cached and defaults["TPR"] < MAX_WG and row_share(r, defaults["TPR"]) * nl > ROW_CACHE:
        defaults["TPR"] *= 2  # more invocations per row, until the row fits on chip
    knobs = _merge(defaults, knobs)
    wg = _check_wg(knobs, pow2=True)
    tpr, vec, order = knobs["TPR"], knobs["VEC"], knobs["ORDER"]
    _require(isinstance(tpr, int) and 1 <= tpr <= wg and tpr & (tpr - 1) == 0, knobs,
             "TPR must be a power of two up to WG")
    _require(vec in (1, 4) and r % vec == 0, knobs, "VEC is 1, or 4 when R is a multiple of 4")
    _require(order in ("row", "col"), knobs, "ORDER is 'row' or 'col'")
    rv = r // vec  # steps per row
    items = -(-rv // tpr)  # steps per invocation
    rpw = wg // tpr
    held = items * vec * nl
    _require(not cached or held <= ROW_CACHE, knobs,
             f"{held} elements per invocation exceed the on-chip row cache ({ROW_CACHE})")
    for em, name, params, dtype, val, uses_lanes, n in pending:
        prior = [f"rv{k}: {wgsl_type(phases[k][1].dtype)}" for k in range(n)]
        functions.append(em.function(name, params + (lanes if uses_lanes else []) + prior,
                                     dtype, val))
    rvs = "".join(f", rv{k}" for k in range(len(phases)))
    end = None if consumer else _row_band_end(phases, r)
    qend = str(rv) if end is None else "qend"  # the row's steps that are loaded

    def steps(fn) -> list[str]:
        """The steps of one pass over the row: unrolled over the cached items, else a
        loop loading the lanes from memory."""
        if not cached:
            loads, args = _lane_args(src, vec, f"o * {rv} + q", "g")
            return ([f"    if (live) {{ for (var q = t; q < {qend}; q += {tpr}) {{",
                     f"        let g = o * {r} + q * {vec};"]
                    + [f"        {s}" for s in loads] + [f"        {s}" for s in fn(args)]
                    + ["    } }"])
        lines = []
        for k in range(items):
            _, args = _lane_args(src, vec, "", "g", {i: f"c{i}_{k}" for i in src.lanes})
            lines += [f"    {{ let q = {k * tpr} + t; if (live && q < {qend}) {{",
                      f"        let g = o * {r} + q * {vec};"]
            lines += [f"        {s}" for s in fn(args)] + ["    } }"]
        return lines

    def at(e: int) -> str:
        return f" + {e}" if e else ""

    body = []
    ts = 1 if order == "row" else rpw  # partial index step between a row's invocations
    for j, (acc_t, init, final) in enumerate(finals):
        body.append(f"    var a{j}: {acc_t} = {init};")
        prior = "".join(f", rv{k}" for k in range(j))
        # an argmax's combine branches: its step's loads are written before the first
        # combine, so that they are in flight together (else one load per branch)
        first = acc_t.startswith("ArgAcc")

        def step(args, j=j, prior=prior, first=first, acc_t=acc_t) -> list[str]:
            loads = [f"load_{j}(o, q * {vec}{at(e)}, g{at(e)}{a}{prior})"
                     for e, a in enumerate(args)]
            lets = [f"let v{e} = {load};" for e, load in enumerate(loads)] if first else []
            values = [f"v{e}" for e in range(len(loads))] if first else loads
            if acc_t == "Moments" and len(loads) == 4:  # the vector's own moments, then
                # one update: a quarter of the divisions, and of the updates in sequence
                # (whose running mean rounds)
                v = [f"let v{e} = {load};" for e, load in enumerate(loads)]
                dev = " + ".join(f"(v{e} - m4) * (v{e} - m4)" for e in range(4))
                return v + ["let m4 = (v0 + v1 + v2 + v3) * 0.25;",
                            f"a{j} = combine_{j}(a{j}, Moments(4.0, m4, {dev}));"]
            return lets + [f"a{j} = combine_{j}(a{j}, leaf_{j}({v}, q * {vec}{at(e)}));"
                           for e, v in enumerate(values)]

        body += steps(step)
        if tpr > 1:
            shared.append(f"var<workgroup> partial_{j}: array<{acc_t}, {wg}>;")
            body += [f"    partial_{j}[li] = a{j};", "    workgroupBarrier();",
                     f"    for (var s = {tpr // 2}; s > 0; s = s / 2) {{",
                     f"        if (t < s) {{ partial_{j}[li] = combine_{j}(partial_{j}[li],"
                     f" partial_{j}[li + s * {ts}]); }}",
                     "        workgroupBarrier();", "    }"]
            total = f"partial_{j}[lead]"
        else:
            total = f"a{j}"
        if acc_t == "Moments":
            body.append(f"    let rv{j} = {total};")
        else:
            body.append(f"    let rv{j} = finish_{j}({final.replace('acc', total)}, o{prior});")
    if consumer:
        out_t = element_type(out.dtype)

        def store(args):
            vals = [to_buffer(f"epilogue(g{at(e)}{a}{rvs})", out.dtype)
                    for e, a in enumerate(args)]
            if vec == 1:
                return [f"out[g] = {vals[0]};"]
            return [f"out[o * {rv} + q] = vec4<{out_t}>({', '.join(vals)});"]
        src.out_vec4 = vec == 4
        body += steps(store)
    elif finals[-1][0] == "Moments":
        body.append("    if (live && t == 0) { out[2 * o] = rv0.m; out[2 * o + 1] = rv0.q; }")
    else:
        body.append(f"    if (live && t == 0) {{ out[o] = "
                    f"{to_buffer(f'rv{len(phases) - 1}', out.dtype)}; }}")
    if cached:  # fill the registers first: each lane's vector (or element) per item
        fill = []
        for i, v in sorted(src.lanes.items()):
            t_ = element_type(v.dtype)
            for k in range(items):
                fill.append(f"    var c{i}_{k}: {f'vec4<{t_}>' if vec == 4 else t_};")
        for k in range(items):
            loads = []
            for i, v in sorted(src.lanes.items()):
                if vec == 1:
                    loads.append(f"c{i}_{k} = in{i}[o * {r} + q];")
                elif v.dtype == "f32":
                    loads.append(f"c{i}_{k} = {src.view4(v)}[o * {rv} + q];")
                else:
                    g = f"(o * {rv} + q) * 4"
                    loads.append(f"c{i}_{k} = vec4<{element_type(v.dtype)}>("
                                 + ", ".join(f"in{i}[{g} + {e}]" for e in range(4)) + ");")
            if loads:
                fill.append(f"    {{ let q = {k * tpr} + t; if (live && q < {qend}) {{ "
                            + " ".join(loads) + " } }")
        body = fill + body
    if end is not None:
        body.insert(0, f"    let qend = min({rv}, ({end} + {vec - 1}) / {vec});")
    lead = "slot * TPR" if order == "row" else "slot"
    nwg = -(-o // rpw)
    gx = min(nwg, MAX_GRID)
    slots = dict(functions="".join(functions), WG=wg, TPR=tpr, RPW=rpw, O=o, GRID_X=gx,
                 SLOT=f"li / {tpr}" if order == "row" else f"li % {rpw}",
                 LANE=f"li % {tpr}" if order == "row" else f"li / {rpw}",
                 LEAD=lead.replace("TPR", str(tpr)), SHARED="\n".join(shared),
                 BODY="\n".join(body),
                 workgroup_bytes=sum(wg * _ACC_BYTES.get(f[0].rstrip("0123456789"), 4)
                                     for f in finals) if tpr > 1 else 0)
    return "rows", slots, (gx, -(-nwg // gx), 1), knobs


SCANNERS = {
    # op: (accumulator type, identity, combine body (a before b), leaf from v at r, final).
    # f32 max/min propagate NaN, and the arg scans follow torch.cummax: ties and NaNs go
    # to the later element, and a NaN, once seen, is the running max (or min).
    "sum": ("{t}", "{zero}", "return a + b;", "v", "acc"),
    "prod": ("{t}", "{one}", "return a * b;", "v", "acc"),
    "max": ("{t}", "{lowest}", "{nan_ab}return max(a, b);", "v", "acc"),
    "min": ("{t}", "{highest}", "{nan_ab}return min(a, b);", "v", "acc"),
    "logaddexp": ("f32", "{lowest}",
                  "let m = max(a, b); if ((bitcast<u32>(m) & 0x7fffffffu) == 0x7f800000u) "
                  "{{ return m; }} return m + log(1.0 + exp(-abs(a - b)));", "v", "acc"),
    "argmax": ("ArgAcc", "ArgAcc({lowest}, -1)",
               "if (b.i >= 0 && (a.i < 0 || {nan_b} || (!{nan_a} && b.v >= a.v))) "
               "{{ return b; }} return a;", "ArgAcc(v, r)", "acc.i"),
    "argmin": ("ArgAcc", "ArgAcc({highest}, -1)",
               "if (b.i >= 0 && (a.i < 0 || {nan_b} || (!{nan_a} && b.v <= a.v))) "
               "{{ return b; }} return a;", "ArgAcc(v, r)", "acc.i"),
}


# A scan along a dim that is not the last (x[A, R, B], B > 1) takes one invocation per
# column (STAGE 3, kernels/scan_cols.wgsl) when its columns are at least this many
# consecutive elements (a warp's loads coalesce into 64-byte runs or more) and there
# are enough of them to occupy the GPU (each column is one invocation: fewer would
# leave most SMs idle, where the row kernels run a workgroup per column).
SCAN_COLS_MIN_B = 16
SCAN_COLS_MIN_COLUMNS = 32768


def scan_columns(inner: int, columns: int) -> bool:
    """Whether a scan of `columns` columns (A * B) of B consecutive elements takes STAGE 3."""
    return inner >= SCAN_COLS_MIN_B and columns >= SCAN_COLS_MIN_COLUMNS


def scan_knobs(r: int, acc_bytes: int = 4, inner: int = 1, columns: int = 1,
               vec4_loads: bool = False) -> dict:
    """Columns (`scan_columns`: B = `inner` of at least 16, 32768 `columns` or more): STAGE 3,
    WG 256, one invocation per 4 adjacent columns (VEC 4: 16-byte loads and stores) with
    ITEMS 8 loads in flight where the input is read 16 bytes at a time (`vec4_loads`: a
    plain buffer, B a multiple of 4), else one per column with ITEMS 4. With a computed
    loader VEC 4 only quarters the invocations: Mamba-2's segment sums (level3/024,
    exp(-x) masked, 262144 columns of 256) took 0.476 ms against 0.376 with VEC 1
    (2026-12-02b, bench/results/profile_024_h200_2026-12-02b.json).
    Measured on the H200 (2026-12-02, bench/results/
    memory_variants_scan_cols_permute_h200_2026-12-02.json and
    memory_variants_scan_cols_vec4_h200_2026-12-02b.json), a 512 x 512 x 512 cumsum
    along dim 1: VEC 1 with ITEMS 1, 4, 8, 16 0.383, 0.307, 0.321, 0.310 ms (3.50 TB/s;
    PyTorch 0.38 ms); VEC 4 with ITEMS 4 and 8 0.294 and **0.291 ms** (3.69 TB/s, 86% of
    4.3); the row kernels of STAGE 0 and 1 (one workgroup per column, its loads 2 KiB
    apart) 2.89-3.40 ms. Short rows: one element per invocation (WG
    the row length's power of two, at least 32), or 2 or 3 (ITEMS) per invocation of 256,
    each read by its invocation (STAGE 0, kernels/scan.wgsl). Rows of more than 768: STAGE 2
    (kernels/scan_regs.wgsl), the chunk held in registers in groups of 4 consecutive
    elements (VEC 4) and the invocations' totals scanned by raking (SUMS 1, 3 barriers),
    ITEMS 4 to 32 (a chunk of at most the row; fewer where the arg scans' 8-byte totals
    would not fit). Measured on the H200, 16384 x 8192 cumsum (2026-12-01m,
    bench/results/memory_variants_scan_h200_2026-12-01m.json; PyTorch 0.59 ms): STAGE 2 VEC
    4 SUMS 1 with ITEMS 8, 16, 32: 0.277, 0.270, **0.264 ms** (4.07 TB/s, 95% of the copy
    bandwidth); SUMS 0 (the tree) 0.272 and 0.269 at 16 and 32; scalar groups (VEC 1) 0.285;
    STAGE 1, the default before, 0.413 ms (0.313 with SUMS 1); STAGE 0 ITEMS 4 0.630.
    (2026-12-01g: STAGE 0 with ITEMS 1, 2, 4, 8 1.43, 0.77, 0.63, 1.29 ms, STAGE 1 1.58,
    0.87, 0.52, 0.41.)"""
    if scan_columns(inner, columns):
        if vec4_loads and inner % 4 == 0:
            return {"WG": 256, "ITEMS": 8 if r >= 8 else 4, "STAGE": 3, "VEC": 4}
        return {"WG": 256, "ITEMS": min(4, r), "STAGE": 3}
    wg = min(256, max(32, _pow2_ceil(r)))
    items = 1 if r <= wg else math.ceil(r / wg)
    if items < 4:
        return {"WG": wg, "ITEMS": items, "STAGE": 0}
    items = 4
    while items < 32 and wg * items * 2 <= r:
        items *= 2
    knobs = {"WG": wg, "ITEMS": items, "STAGE": 2, "VEC": 4, "SUMS": 1}
    while knobs["ITEMS"] > 4 and scan_workgroup_bytes(knobs, acc_bytes) > WORKGROUP_BYTES:
        knobs["ITEMS"] //= 2  # the arg scans' 8-byte totals stage half as many
    return knobs


# The scan template's knobs past WG, ITEMS and STAGE, and their values when a setting
# leaves them out (settings are written without them then, as before they existed):
# VEC (STAGE 2: elements per group, 4 with 16-byte loads and stores where the row
# allows) and SUMS (the scan of the invocations' totals: 0 the tree of scan_sums.wgsl,
# 1 the raking of scan_rake.wgsl).
SCAN_EXTRA_KNOBS = {"VEC": 1, "SUMS": 0}


def scan_space(r: int, inner: int = 1, columns: int = 1) -> list[dict]:
    """Columns (`scan_columns`): STAGE 3 at WG 64, 128 and 256 with 1, 4, 8 and 16 items (at
    most the column), and where B is a multiple of 4 with VEC 4 (4 columns per invocation,
    16-byte loads and stores: the default, scan_knobs) at WG 64 and 256 with 4 and 8 items, then
    the row settings. STAGE 0 and 1 at every WG and ITEMS up to 8
    whose chunk is at most twice the row (rows longer than 2048: from 4 items, and STAGE 0
    at 4 only: on the H200 at 8192, fewer items were 1.9-3.9x slower than the default, STAGE
    0 ITEMS 8 3.1x), then, at WG 256 (the settings bench/kernels.py --variants measures),
    the raked scan of the totals (SUMS 1) on STAGE 1 and the register-held rows of STAGE 2:
    ITEMS 8 in scalars (any loader) and VEC 4 groups of 8, 16 and 32 items, rows up to 8192
    in one pass (with the tree of SUMS 0 too, against the raking)."""
    long = r > 2048
    space = [{"WG": wg, "ITEMS": items, "STAGE": stage} for stage in (0, 1)
             for wg in (64, 128, 256) for items in (1, 2, 4, 8)
             if wg <= max(64, _pow2_ceil(r)) and wg * items <= max(64, 2 * r)
             and not (long and (items < 4 or stage == 0 and items > 4))]
    new = [{"STAGE": 1, "ITEMS": 8, "SUMS": 1}, {"STAGE": 2, "ITEMS": 8, "SUMS": 1},
           {"STAGE": 2, "ITEMS": 8, "VEC": 4, "SUMS": 1},
           {"STAGE": 2, "ITEMS": 16, "VEC": 4, "SUMS": 1},
           {"STAGE": 2, "ITEMS": 32, "VEC": 4, "SUMS": 1},
           {"STAGE": 2, "ITEMS": 16, "VEC": 4}, {"STAGE": 2, "ITEMS": 32, "VEC": 4}]
    rows = space + [{"WG": 256, **k} for k in new if 256 * k["ITEMS"] <= 2 * r]
    if not scan_columns(inner, columns):
        return rows
    cols = [{"WG": wg, "ITEMS": items, "STAGE": 3} for wg in (256, 128, 64)
            for items in (8, 16, 4, 1) if items <= r]
    if inner % 4 == 0:  # 4 adjacent columns per invocation, 16-byte loads and stores
        cols += [{"WG": wg, "ITEMS": items, "STAGE": 3, "VEC": 4} for wg in (256, 64)
                 for items in (4, 8) if items <= r]
    return cols + rows


def _rake(wg: int) -> tuple[int, int]:
    """scan_rake.wgsl's split of WG totals: S per raker (about the square root of WG,
    the larger half), G rakers."""
    s = 1 << -(-(wg.bit_length() - 1) // 2)
    return s, wg // s


def scan_workgroup_bytes(knobs: dict, acc_bytes: int = 4) -> int:
    """Workgroup memory of the scan kernel: the invocations' totals (SUMS 1: with the
    rakers' padding and totals), and the staged chunk (STAGE 1) or the staged totals of
    its groups (STAGE 2), with one padding slot per 32."""
    knobs = {**SCAN_EXTRA_KNOBS, **knobs}
    wg = knobs["WG"]
    sums = wg + 2 * _rake(wg)[1] if knobs["SUMS"] else wg
    if knobs["STAGE"] == 3:
        return 0
    staged = {0: 0, 1: wg * knobs["ITEMS"], 2: wg * knobs["ITEMS"] // knobs["VEC"]}
    tile = staged[knobs["STAGE"]]
    return acc_bytes * (sums + tile + tile // 32)


def _scan(src, materialized, out, tnode, knobs=None):
    (x,) = tnode.inputs
    _, r, inner = x.shape
    rows = x.numel // max(1, r)
    op = tnode.attrs["op"]
    xt = "i32" if x.dtype in ("i32", "bool") else "f32"
    f32 = xt == "f32"
    vals = _fold_vals(xt)
    acc_t, init, combine, leaf, final = (s.format(**vals) for s in SCANNERS[tnode.attrs["op"]])
    if op == "logaddexp" and not f32:
        raise CompileError("logaddexp scan of an integer tensor")
    functions = _loader(src, materialized, "load_x", x, xt)
    if acc_t == "ArgAcc":
        functions = f"struct ArgAcc {{ v: {xt}, i: i32 }}\n" + functions
    functions += (f"fn combine(a: {acc_t}, b: {acc_t}) -> {acc_t} {{ {combine} }}\n"
                  f"fn leaf(v: {xt}, r: i32) -> {acc_t} {{ return {leaf}; }}\n")
    acc_bytes = 8 if acc_t == "ArgAcc" else 4
    # a setting that leaves VEC or SUMS out means their SCAN_EXTRA_KNOBS values, not
    # the default's (settings were written before they existed)
    cols_view = vec4_view(x, materialized, 2) if inner % 4 == 0 else None  # STAGE 3, VEC 4
    knobs = _merge({**SCAN_EXTRA_KNOBS,
                    **scan_knobs(r, acc_bytes, inner, rows, cols_view is not None)},
                   knobs and {**SCAN_EXTRA_KNOBS, **knobs})
    wg = _check_wg(knobs, pow2=True)  # the scan of the invocations' totals is a tree
    items, stage, vec = knobs["ITEMS"], knobs["STAGE"], knobs["VEC"]
    _require(isinstance(items, int) and items >= 1, knobs, "ITEMS must be a positive integer")
    _require(stage in (0, 1, 2, 3), knobs, "STAGE is 0, 1, 2 or 3")
    _require(vec == 1 or stage in (2, 3) and vec == 4, knobs, "VEC is 1, or 4 with STAGE 2 or 3")
    if stage == 3:
        _require(knobs["SUMS"] == 0, knobs, "STAGE 3 takes no SUMS")
        return _scan_cols(src, out, x, functions, knobs, acc_t, init, final, cols_view)
    _require(items % vec == 0, knobs, "ITEMS must be a multiple of VEC")
    _require(knobs["SUMS"] in (0, 1), knobs, "SUMS is 0 or 1")
    wg_bytes = scan_workgroup_bytes(knobs, acc_bytes)
    _require(wg_bytes <= WORKGROUP_BYTES, knobs,
             f"{wg_bytes} bytes of workgroup memory, more than {WORKGROUP_BYTES}")
    gx = min(max(1, rows), MAX_GRID)
    chunk = wg * items
    slots = dict(functions=functions, WG=wg, ITEMS=items, R=r, B=inner, ROWS=rows, GRID_X=gx,
                 ACC=acc_t, INIT=init, LEAF="leaf(load_x(a, r, b), r)", final=final,
                 CHUNK=chunk, TILE=chunk + chunk // 32, workgroup_bytes=wg_bytes,
                 LOADS="\n".join(f"        let x{k} = leaf(load_x(a, min(r0 + {k}, {r - 1}), b),"
                                 f" r0 + {k});" for k in range(items)),
                 RUNS="\n".join(f"        if (r0 + {k} < {r}) {{ run = combine(run, x{k}); }}"
                                f" let s{k} = run;" for k in range(items)),
                 STORES="\n".join(f"        if (live && r0 + {k} < {r}) {{ let r = r0 + {k};"
                                  f" let gi = (a * {r} + r) * {inner} + b;"
                                  f" let acc = combine(prefix, s{k}); $STORE }}"
                                  for k in range(items)))
    if stage == 2:
        slots.update(_scan_regs(src, materialized, out, x, knobs, acc_t, init, final))
    if knobs["SUMS"]:
        s_, g = _rake(wg)
        slots["SCAN_SUMS"] = template("scan_rake").substitute(
            ACC=acc_t, INIT=init, WG=wg, S=s_, G=g, SLOTS=wg + g,
            RAKE="\n".join([f"        let v{k} = sums[first + {k}];" for k in range(s_)]
                           + [f"        sums[first + {k}] = acc; acc = combine(acc, v{k});"
                              for k in range(s_)]),
            FOLD="\n".join(f"    if (group == {k}) {{ before = total; }}"
                           f" total = combine(total, groups[{k}]);" for k in range(g)))
    else:
        slots["SCAN_SUMS"] = template("scan_sums").substitute(ACC=acc_t, INIT=init, WG=wg)
    name = ("scan", "scan_staged", "scan_regs")[stage]
    # settings name VEC and SUMS only where they differ from SCAN_EXTRA_KNOBS
    used = {k: v for k, v in knobs.items() if SCAN_EXTRA_KNOBS.get(k) != v}
    return name, slots, (gx, math.ceil(max(1, rows) / gx), 1), used


def _scan_cols(src, out, x, functions, knobs, acc_t, init, final, plain):
    """STAGE 3 (kernels/scan_cols.wgsl): one invocation per column (VEC 1) or per 4
    adjacent columns (VEC 4: B a multiple of 4; 16-byte loads through `plain`, x's
    vec4_view along its last dim where it has one, 16-byte stores), ITEMS loads first."""
    _, r, inner = x.shape
    wg, items, vec = knobs["WG"], knobs["ITEMS"], knobs["VEC"]
    _require(vec == 1 or inner % 4 == 0, knobs, "STAGE 3 with VEC 4 needs B a multiple of 4")
    whole = r % items == 0  # no clamped loads, no bounds tests
    lanes = x.numel // r // vec
    view, load = None, None
    if vec == 4 and plain is not None:
        root, offset, st = plain
        view = src.view4(root)
        load = f"{offset // 4} + a * {st[0] // 4} + {{ri}} * {st[1] // 4} + b / 4"
    def carry(e: int) -> str:  # VEC 1: one running value, `carry`, and leaves x<k>
        return f"carry{e}" if vec > 1 else "carry"

    def leaf(k: int, e: int) -> str:
        return f"x{k}_{e}" if vec > 1 else f"x{k}"
    setup = [f"    let a = col / {inner // vec};",
             f"    let b = (col % {inner // 4}) * 4;" if vec > 1 else f"    let b = col % {inner};"]
    setup += [f"    var {carry(e)}: {acc_t} = {init};" for e in range(vec)]
    loads, stores = [], []
    for k in range(items):
        ri = f"r0 + {k}" if whole else f"min(r0 + {k}, {r - 1})"
        if view:
            loads.append(f"        let q{k} = {view}[{load.format(ri=f'({ri})')}];")
        for e in range(vec):
            val = f"q{k}.{XYZW[e]}" if view else \
                f"load_x(a, {ri}, {f'b + {e}' if e else 'b'})"
            loads.append(f"        let {leaf(k, e)} = leaf({val}, r0 + {k});")
        test = "" if whole else f"if (r0 + {k} < {r}) "
        folds = " ".join(f"{carry(e)} = combine({carry(e)}, {leaf(k, e)});" for e in range(vec))
        where = f"let r = r0 + {k}; let gi = (a * {r} + r) * {inner} + b;"
        if vec == 1:
            store = "let acc = carry; $STORE"
        else:
            vals = [to_buffer(f"epilogue({final.replace('acc', carry(e))}, gi + {e})",
                              out.dtype) for e in range(vec)]
            store = f"out[gi / 4] = vec4<{element_type(out.dtype)}>({', '.join(vals)});"
        stores.append(f"        {test}{{ {folds} {where} {store} }}")
    src.out_vec4 = vec == 4
    groups = max(1, -(-lanes // wg))
    gx = min(groups, MAX_GRID)
    slots = dict(functions=functions, WG=wg, ITEMS=items, R=r, LANES=lanes, GRID_X=gx,
                 final=final, SETUP="\n".join(setup), LOADS="\n".join(loads),
                 STORES="\n".join(stores))
    used = {k: v for k, v in knobs.items() if SCAN_EXTRA_KNOBS.get(k) != v}
    return "scan_cols", slots, (gx, -(-groups // gx), 1), used


def _scan_regs(src, materialized, out, x, knobs, acc_t, init, final) -> dict:
    """scan_regs.wgsl's unrolled slots: V = ITEMS / VEC groups of VEC elements per
    invocation, group j of the chunk's (j * WG + li). With VEC 4 and B = 1, a row whose
    length is a multiple of 4 is loaded through a vec4 view of its buffer where x is
    one f32 buffer read at 16-byte aligned rows (plain_strides; else each element by
    load_x), and stored 16 bytes at a time; bounds tests (and the clamping of loads)
    are left out when the chunks tile the row."""
    _, r, inner = x.shape
    wg, vec = knobs["WG"], knobs["VEC"]
    v = knobs["ITEMS"] // vec
    tiled = r % (wg * knobs["ITEMS"]) == 0
    rows4 = vec == 4 and inner == 1 and r % 4 == 0  # groups never straddle a row's end
    view = None
    plain = vec4_view(x, materialized, 1) if rows4 else None
    if plain is not None:
        root, offset, st = plain
        view = src.view4(root)
    setup = ""
    if view:
        stride = st[0] // 4 if x.shape[0] > 1 else 0
        setup = f"    let o4 = {offset // 4} + a * {stride};  // the row's first vec4 in {view}"
    loads, runs, stores = [], [], []

    def clamp(i: str, last: int) -> str:
        return i if tiled else f"min({i}, {last})"

    def inside(i: str) -> str:
        return "" if tiled else f"{i} < {r}"
    for j in range(v):
        g, at = f"r{j}", f"{j * wg} + li" if j else "li"
        loads.append(f"        let {g} = base + {f'({at})' if j else at} * {vec};")
        if view:
            loads.append(f"        let q{j} = {view}[o4 + {clamp(g, r - 4)} / 4];")
        for e in range(vec):
            ri = f"{g} + {e}" if e else g
            val = f"q{j}.{XYZW[e]}" if view else f"load_x(a, {clamp(ri, r - 1)}, b)"
            loads.append(f"        let x{j}_{e} = leaf({val}, {ri});")
        runs.append(f"        var g{j}: {acc_t} = {init};")
        for e in range(vec):
            ri = f"{g} + {e}" if e else g
            fold = f"g{j} = combine(g{j}, x{j}_{e});"
            test = inside(ri)
            runs.append(f"        {f'if ({test}) {{ {fold} }}' if test else fold}"
                        f" let s{j}_{e} = g{j};")
        runs.append(f"        tile[pad({at})] = g{j};")
        stores.append(f"        let p{j} = tile[pad({at})];")
        test = " && ".join(t for t in ("live", inside(g)) if t)
        if rows4:
            vals = [to_buffer(f"epilogue({final.replace('acc', f'c{e}')}, gi + {e})", out.dtype)
                    for e in range(vec)]
            stores.append(f"        if ({test}) {{ let gi = a * {r} + {g}; "
                          + " ".join(f"let c{e} = combine(p{j}, s{j}_{e});" for e in range(vec))
                          + f" out[gi / 4] = vec4<{element_type(out.dtype)}>("
                          + f"{', '.join(vals)}); }}")
        else:
            for e in range(vec):
                ri = f"{g} + {e}" if e else g
                t = " && ".join(c for c in ("live", inside(ri)) if c)
                stores.append(f"        if ({t}) {{ let r = {ri};"
                              f" let gi = (a * {r} + r) * {inner} + b;"
                              f" let acc = combine(p{j}, s{j}_{e}); $STORE }}")
    src.out_vec4 = rows4
    totals = [f"        let t{k} = tile[pad(li * {v} + {k})];" for k in range(v)]
    totals.append(f"        var run: {acc_t} = {init};")
    totals += [f"        let u{k} = run; run = combine(run, t{k});" for k in range(v)]
    n = wg * v
    # every group must have read its prefix before the next chunk stages its totals
    after = "        workgroupBarrier();" if r > wg * knobs["ITEMS"] else ""
    return dict(SETUP=setup, NEXT=after, LOADS="\n".join(loads), RUNS="\n".join(runs),
                STORES="\n".join(stores), TOTALS="\n".join(totals), TILE=n + n // 32,
                PREFIXES="\n".join(f"        tile[pad(li * {v} + {k})] = combine(prefix, u{k});"
                                   for k in range(v)))


MATMUL_BK = 16  # the K depth of one staged tile in the default knobs
# The most workgroup memory a matmul setting may declare: twice WebGPU's default. The
# runtime asks the adapter for its limit (32 KiB and more on desktop Vulkan drivers,
# 48 KiB on NVIDIA's) and refuses a kernel that needs more than the device has, so
# such settings fall back to the defaults there (the tuner discards them).
MATMUL_WORKGROUP_BYTES = 32768
# vec4s of padding per k in the staged tile of an operand read along K and staged along
# its rows (ROWS), with one staged buffer (DB 1: its stores are not overlapped with any
# multiply): its invocations store the 4 k values of a row at once, and without padding
# the rows a warp stores at k offsets 0, 4, 8, 12 share banks (4-way conflicts on 64 x
# 64 tiles of BK 16, 2-way with padding; none on BK 8). See _Operand.kstride. Measured on
# the H200 (2026-12-05, profile_pad_db1_h200_2026-12-05.json, whole problems, 0 against
# 1): Swin's LayerNorm-in-the-loader product 0.495 -> 0.460 ms (4.296 -> 4.259 ms in all),
# EfficientNet's 16 such products 1.634 -> 1.588 (5.629 -> 5.587), ViT unchanged. With
# two staged buffers it lost (profile_pad_h200_2026-12-05.json, ab_pad_kernels_*): GEMM
# 4096^3 3.045 -> 3.093 ms, the linear 1.599 -> 1.636, LayerNorm + linear 0.735 -> 0.750
MATMUL_PAD = 1
_LANES = "xyzw"


# workgroups that 128 x 64 tiles (under 512 rows) and 32 x 128 tiles must still make: a
# convolution's implicit GEMM (an operand reads windows, `reads_window`), other products
MATMUL_TALL_MIN_WORKGROUPS = 256
MATMUL_TALL_MIN_WORKGROUPS_PLAIN = 64
# GROUP: the order in which the workgroups take their tiles. 0: row by row (the grid's
# x over N fastest). G > 0: bands of G tile rows, each walked column by column, so that
# the workgroups running at once share more rows of A and columns of B in L2. Measured on
# the H200 (2026-12-02b, bench/results/profile_gemm_h200_2026-12-02b.json), whole
# problems, G 8 and 16 against 0: GEMM 4096^3 3.370 and 3.366 against 3.363 ms, the
# 4096^3 linear + GELU 3.488 against 3.508, 3001 x 4093 x 2999 2.048 against 2.076, the
# SwiGLU FFN 3.614 against 3.640 (0.6-1.4%): in the search space (G 8 on the default
# tiles of large products), not the default, which would change nearly every plan of
# the suite for about 1%
MATMUL_GROUP = 0
# Large products without a prologue (matmul_wide): 128 x 128 tiles of 8 x 16 blocks (128
# invocations holding 128 accumulators), staged 8 deep along the rows (ROWS 1), as
# cuBLAS's own fp32 kernels are (bench/reference_kernels.py: tiles of 256 x 128 x 8 and
# 128 x 128 x 8 whose invocations hold 128 accumulators, 254-255 registers). NVIDIA's
# driver compiles them to about 190 registers: two workgroups per SM. Measured on the
# H200 (2026-12-02d, bench/results/matmul_wide_h200_2026-12-02d.json) against the
# 128 x 64 tiles of 8 x 4 blocks staged 16 deep that they replace: GEMM 4096^3 3.364 ->
# 3.049 ms (0.84 -> 0.91 of cuBLAS), the 8192 x 1024 x 4096 linear 1.741 -> 1.600 (0.82
# -> 0.90); staged 16 deep 5.261 and 2.594 ms, 256 x 128 tiles 3.305 and 1.736 ms. Suite
# call 48 (51 plans): every level-2 linear 3-11% faster, level1/109 13.5%. They lose
# where the grid ends in a partial wave: a 128 x 128 tile is twice the work, so the
# last wave is coarser (0.92x on level1/011, 640 tiles; 0.89x on the 3004 x 4096 x
# 3000 GEMM, 576 tiles; the transformer blocks' 384-tile products; since 2026-12-02e
# the tiles and K chunks are chosen by the device's measured waves, below) -- and with
# K of 256 or less (a pointwise convolution's K = 256 over 6400 tiles 1.05x and 1.12x
# slower, attention's scores, K = 64, 1.03x), hence MATMUL_WIDE_MIN_K. The
# irregular 3001 x 4093 x 2999 (scalar loads) 2.076 -> 2.520 ms: they need M, N and K
# multiples of 4. Convolutions keep 128 x 64: the U-Net's split-K transposed
# convolution phases (window loaders) made it 9.248 -> 9.497 ms.
MATMUL_LARGE_TILES = (128, 128, 8, 16)
MATMUL_PLAIN_TILES = (128, 64, 8, 4)  # where the wide tiles are refused or lose by waves
MATMUL_WIDE_BLOCK = 128  # TM x TN from which a block takes BK 8 and ROWS 1
MATMUL_WIDE_MIN_K = 512
# 192 rows (a convolution's 192 output channels) without a prologue, K at least 512
# (matmul_wide): one tile row of 192 x 128, 12 x 8 blocks, staged 8 deep, where 128-row
# tiles would waste a quarter of their rows and 64-row ones (the rule before) hold 16
# accumulators an invocation. Measured on the H200 (2026-12-04,
# matmul_conv192_h200_2026-12-04.json), the 3 x 3 convolution 128 -> 192 channels at 64
# x 64, batch 32: 1.891 ms (64 x 64 tiles, 0.81 of cuDNN) -> 1.526 (1.01); 192 x 64 of
# 12 x 4 1.739 (BK 8) and 1.777 (BK 16), 128 x 64 2.112, ROWS 1 1.581; as a plain
# batched product (192 x 1152 x 4096, 32 entries) 1.782 -> 1.646 ms. With K = 32
# (MobileNetV2's 1 x 1 expansions, 784 columns) they lost: level3/018 3.826 -> 3.938 ms
# (suite, 2026-12-04), hence the least K. The same for 64, 128 and 256 rows lost
# (2026-12-04, matmul_conv_tiles_h200_2026-12-04.json): 3 x 3, 128 channels 1.651 ms on
# 128 x 64 against 2.163 on 128 x 128 (8 x 8, BK 8) and 2.343 on the wide tiles; 64
# channels 1.301 on 64 x 64 against 1.312-1.574 on 64 x 128 and 64 x 256; stride 2 to
# 256 channels 0.167 against 0.188 on 256 x 64.
MATMUL_ROWS192_TILES = (192, 128, 12, 8)
# 64 rows (a convolution's 64 output channels) without a prologue, K at least 512
# (matmul_wide): one tile row of 64 x 256, 8 x 16 blocks (128 invocations holding 128
# accumulators, as the wide tiles), staged 8 deep along the rows (matmul_knobs: ROWS 1),
# where the 64 x 64 tiles of 4 x 4 blocks read two 16-byte fragments from workgroup
# memory per 16 multiply-adds. Measured on an H100 (2026-12-06c, the H200 could not be
# had; m64_variants_h100_2026-12-06c.json, the default in the same calls): the 3 x 3
# convolution of 64 channels at 128 x 128, batch 32, 1.302 -> 1.236 ms (0.83 -> 0.87 of
# cuDNN), its product from stored operands (64 x 576 x 16384, 32 entries) 1.228 -> 0.984
# (0.72 -> 0.90 of cuBLAS), the 3-d 3 x 3 x 3 convolution 32 -> 64 channels (level1/072's
# shape) 3.906 -> 3.734 (0.77 -> 0.81); the same tiles staged along K (ROWS 0) 1.482,
# 1.204 and 4.481 ms, 64 x 128 of 8 x 16 1.488 and 1.168, 64 x 128 of 4 x 8 1.314 and
# 1.067 (and 1.362-1.574 for 64 x 128 of 4 x 8 BK 8, 64 x 256 of 4 x 16 and 8 x 8 on the
# H200, 2026-12-04: matmul_conv_tiles_h200_2026-12-04.json). Only on grids of at least
# MATMUL_ROWS64_MIN_WORKGROUPS tiles: in the suite (the same H100, base and head in one
# call, h100_2026-12-06c/README.md) level1/072 (4096 tiles) 3.900 -> 3.729 ms and
# level1/055 (3328) 2.892 -> 2.783 gained, but ResNet-18's and the ResNet-50 stack's
# 64-channel convolutions at 56 x 56, batch 32 (416 tiles: 1.6 waves of 264), lost
# 5.389 -> 6.169 and 3.375 -> 3.945 ms; at 784 tiles (level3/004) no change, at 1024
# three problems gained 0.7-3.8% (level1/074, 075, level3/022) and one lost 2.1%
# (level3/005, whose epilogue is a batch norm and a ReLU).
MATMUL_ROWS64_TILES = (64, 256, 8, 16)
MATMUL_ROWS64_MIN_WORKGROUPS = 2048


# Waves. A device runs a fixed number of workgroups of a setting at once (its slots, the
# SMs times the workgroups that fit in one); a grid of T tiles takes ceil(T / S) waves,
# the last one partly idle. WebGPU does not say how many SMs a device has, so the slots
# of both large-product tiles are measured once per device (tune/waves.py, stored in
# the tune cache); measured on the H200 (2026-12-02e, wave_probe_h200_2026-12-02e.json):
# the time of one tile row steps up after every 264 wide tiles (132 SMs x 2) and every
# 132 plain ones. Where they are known, a large product takes the tiles, the K chunks
# (split-K), a tail of rows and aligned copies of least modelled time (ops/linalg.
# wave_plan, through matmul_wave_cost):
#     waves(T) * S * (tile area / rate) * depth * (1 + MATMUL_SPLIT_COST * (c + 1) / K)
# with waves(T) = ceil(T / S) for the wide tiles. The plain tiles' steps of 132 are each
# SM's next workgroup, two of which share an SM (122 registers each): their rounds come
# in pairs, and an odd last round runs alone on its SMs, at MATMUL_PLAIN_LONE rounds'
# time (waves(T) = n + MATMUL_PLAIN_LONE - 1 for an odd n = ceil(T / S)). Measured on
# the H200: the K 4096 probe (wave_probe_k4096_h200_2026-12-02e.json) adds 0.169, 0.236,
# 0.187, 0.224, 0.194 ms per round of 132 (the odd rounds 1.12-1.2x the even ones); four
# narrow products whose 384 tiles are 2.9 rounds (split_narrow_shapes_h200_2026-12-04b.json,
# split_narrow_h200_2026-12-04b.json) ran their matmul 5.5-9% faster in 2 K chunks (6
# rounds of half the depth): 49152 x 4096 x 52 0.713 -> 0.652 ms, 24576 x 8192 x 100
# 1.369 -> 1.285, 49152 x 8192 x 50 (B aligned) 1.404 -> 1.281, while 512 tiles (4 rounds)
# did not (0.875 -> 0.876). With 1.2 every plain-tile matmul time measured in those files
# and split_waves_h200_2026-12-02e.json is within 4% of the model's (2.5-9% off with 1.0).
# for c chunks of depth K / c (whole staged tiles, at least MATMUL_WIDE_MIN_K deep), the
# wide tiles' rate MATMUL_WIDE_RATE times the plain ones' (GEMM 4096^3, full waves: 3.361
# against 3.039 ms) and the chunks' partial sums costing about MATMUL_SPLIT_COST / K per
# chunk (their reduce kernel: 2-4% at K = 4096). Fitted on the H200 (2026-12-02e,
# split_waves_h200_2026-12-02e.json): the modelled times are within 4% of the measured
# matmul times (1.58-1.69e-3 ms per unit) and rank every setting as measured --
# level1/011's 4096 x 4096 x 2560 (640 wide tiles: 2.42 waves) 2.358 ms wide, 2.170 plain,
# 1.979 + 0.051 wide in 2 chunks; 3004 x 4096 x 3000 (576 wide tiles) 2.133 wide, 1.919
# plain, 1.896 wide in 4 chunks; 4096^3 (1024 wide tiles: 3.88 waves) unsplit.
MATMUL_WIDE_RATE = 1.1
MATMUL_PLAIN_LONE = 1.2
MATMUL_SPLIT_COST = 32
MATMUL_WAVE_MAX_CHUNKS = 8
# The plain tiles loading both operands by scalars (K not a multiple of 4) run at this
# rate of the plain tiles' 16-byte loads: 3001 x 4093 x 2999 2.076-2.085 ms against
# 1.915-1.932 for 3004 x 4096 x 3000 (2026-12-02d/e, the same tiles and grid). B alone
# loaded by scalars (N not a multiple of 4) cost nothing measurable in one piece: 49152 x
# 8192 x 50 1.403 ms against 1.404 with B copied 52 wide (split_narrow_h200_2026-12-04b.json;
# in 2 K chunks it did, 1.332 against 1.281, which the aligned plan's chunks model).
MATMUL_SCALAR_RATE = 0.92


@dataclass(frozen=True)
class Waves:
    """How many workgroups of each large-product tile setting a device runs at once."""

    wide: int  # MATMUL_LARGE_TILES
    plain: int  # MATMUL_PLAIN_TILES

    def __post_init__(self) -> None:
        if not (isinstance(self.wide, int) and isinstance(self.plain, int)
                and self.wide >= 1 and self.plain >= 1):
            raise ValueError(f"slots must be positive integers, got {self}")


_WAVES: ContextVar[Waves | None] = ContextVar("kernelwright_waves", default=None)


@contextmanager
def waves(facts: Waves | None) -> Iterator[None]:
    """Within this context large products choose tiles and K chunks by the device's
    slots `facts` (None: unknown, the fixed rules of matmul_tiles)."""
    token = _WAVES.set(facts)
    try:
        yield
    finally:
        _WAVES.reset(token)


def current_waves() -> Waves | None:
    return _WAVES.get()


def matmul_wave_cost(tiles: tuple[int, int, int, int], m: int, n: int, nb: int, k: int,
                     chunks: int, facts: Waves) -> float:
    """The modelled time (arbitrary units) of nb products of M x N x K over `chunks` K
    chunks on `tiles` (the wide or the plain ones; module comment above)."""
    bm, bn = tiles[:2]
    wide = tuple(tiles) == MATMUL_LARGE_TILES
    slots = facts.wide if wide else facts.plain
    count = nb * chunks * math.ceil(m / bm) * math.ceil(n / bn)
    per_tile = bm * bn * (k / chunks) / (MATMUL_WIDE_RATE if wide else 1.0)
    split = 1.0 + MATMUL_SPLIT_COST * (chunks + 1) / k if chunks > 1 else 1.0
    rounds = math.ceil(count / slots)
    if not wide and rounds % 2:
        rounds += MATMUL_PLAIN_LONE - 1
    return rounds * slots * per_tile * split


def large_tiles(m: int, n: int, nb: int, wide: bool) -> tuple[int, int, int, int]:
    """A large product's tiles without a prologue or windows: the wide ones where `wide`
    allows them and, with known waves and at least one wave of them, they model faster
    than the plain ones (smaller grids keep the wide tiles, as split-K's rules expect)."""
    facts = current_waves()
    if not wide:
        return MATMUL_PLAIN_TILES
    bm, bn = MATMUL_LARGE_TILES[:2]
    if facts is None or nb * math.ceil(m / bm) * math.ceil(n / bn) < facts.wide:
        return MATMUL_LARGE_TILES
    return min((MATMUL_LARGE_TILES, MATMUL_PLAIN_TILES),  # (any K: both scale with it)
               key=lambda t: matmul_wave_cost(t, m, n, nb, MATMUL_WIDE_MIN_K, 1, facts))


def reads_window(v: Value) -> bool:
    """Whether a matmul operand is a convolution's windows (through reshapes and expands)."""
    while v.node is not None and v.node.op in ("reshape", "expand"):
        v = v.node.inputs[0]
    return v.node is not None and v.node.op == "window"


def matmul_tiles(m: int, n: int, nb: int = 1, prologue: bool = False,
                 window: bool = False, wide: bool = True) -> tuple[int, int, int, int]:
    """The matmul template's (BM, BN, TM, TN) for `nb` products of M x N (ops/linalg.py
    reads the tile count to decide on split-K). Large products (both sides at least 512)
    get the wide tiles MATMUL_LARGE_TILES where `wide` (matmul_wide: M, N and K multiples
    of 4, K long enough), no operand reads a convolution's `window` and, where the
    device's waves are known, they model faster (large_tiles), else 128 x 64 tiles
    with an 8 x 4 block per invocation (256 invocations, 122 registers in NVIDIA's code:
    two workgroups per SM), or with a `prologue` (see matmul_knobs: one staged buffer)
    128 x 128 tiles with 8 x 8 blocks (187 registers, one workgroup per SM). Measured on
    the H200 (2026-12-01k,
    matmul_tiles_h200_2026-12-01k.json), 128 x 64 (8 x 4) against 128 x 128 (8 x 8), both
    with two staged buffers:
    GEMM 4096^3 3.366 against 3.362 ms, 3001 x 4093 x 2999 2.080 against 2.355 (576
    workgroups of 128 x 128 fill 4.4 waves of 132 SMs), the 8192 x 1024 x 4096 linear
    1.741 against 1.759; with a LayerNorm in the A loader 128 x 64 lost (0.953 against
    0.898 ms with two buffers, 1.014 against 0.851 with one). 192 rows without a
    prologue get MATMUL_ROWS192_TILES where `wide` (K at least 512) and they make
    MATMUL_TALL_MIN_WORKGROUPS(_PLAIN) workgroups, and 64 rows MATMUL_ROWS64_TILES
    where they make MATMUL_ROWS64_MIN_WORKGROUPS. Under 512 rows, a multiple of 128
    rows gets 128 x 64 tiles with 8 x 4 blocks when that still makes
    MATMUL_TALL_MIN_WORKGROUPS workgroups: each staged B tile then serves 128 rows, not
    64. Measured on the H200 (2026-12-01f,
    bench/results/matmul_variants_h200.json) on the implicit GEMMs of 3 x 3
    convolutions: 128 channels at 56 x 56, batch 64 (M = 128, 3136 workgroups), 2.57
    against 3.22 ms with 64 x 64 tiles (0.58 and 0.47 of cuDNN); 128 to 256 channels,
    stride 2 to 14 x 14, batch 32 (M = 256, 256 workgroups), 0.221 against 0.304 ms
    (0.74 and 0.50). With 64 output channels the 128-row tile wastes half its rows
    (3.15 against 1.94 ms). Smaller grids than 256 workgroups are not measured.
    17-32 rows (a convolution's 32 output channels) get 32 x 128 tiles with 4 x 4 blocks,
    staged 8 deep (matmul_knobs), not 64 x 64 tiles half of whose rows are padding, where
    that still makes MATMUL_TALL_MIN_WORKGROUPS workgroups (a small grid, as the 32-row
    steps of a recurrent network's batch, keeps twice the workgroups of 64 x 64 tiles):
    measured on the H200 (2026-12-01k, matmul_tiles32_h200_2026-12-01k.json) on a 3-d
    3 x 3 x 3 convolution of 32 channels (M = 32, K = 864, batch 8 of 65536 positions),
    1.272 ms against 1.939 (0.84 and 0.55 of cuDNN); 16 deep 1.411 ms, 32 x 256 tiles
    (4 x 8) 1.306. The same for 17-32 columns is not measured. Many rows and 17-511
    columns take the large products' 128 x 64 tiles too, without a prologue, where the
    grid keeps MATMUL_TALL_MIN_WORKGROUPS (2026-12-01l): 262144 x 384 x 384 2.415 ->
    1.945 ms in the suite (0.72x -> 0.91x eager); 49152 x 8192 x 50 (384 workgroups)
    1.398 against 1.663 ms with 64 x 64 tiles (0.83 and 0.70 of cuBLAS; BK 8 1.792).
    Products that read no convolution windows (`window` False) take these tiles down to
    MATMUL_TALL_MIN_WORKGROUPS_PLAIN workgroups, where fewer tiles also let split-K
    (ops/linalg.product_plan) cut the recurrent steps of an RNN: measured on the H200
    (2026-12-02b, bench/results/profile_tall_h200_2026-12-02b.json, one threshold of 64
    for all products) the GRU of level1/107 (256 x 1024 x 3072 steps) 7.768 -> 6.242
    ms, level1/108 8.042 -> 7.716, but ResNet-18's convolutions 5.358 -> 5.706 and the
    U-Net 9.807 -> 9.862, so convolutions keep 256."""
    tall_min = MATMUL_TALL_MIN_WORKGROUPS if window else MATMUL_TALL_MIN_WORKGROUPS_PLAIN
    if m <= 16:
        return 16, 64, 1, 4
    if n <= 16:
        return 64, 16, 4, 1
    if m <= 32 and nb * math.ceil(n / 128) >= tall_min:
        return 32, 128, 4, 4
    if m >= 512 and n >= 512:
        if prologue:
            return 128, 128, 8, 8
        return MATMUL_PLAIN_TILES if window else large_tiles(m, n, nb, wide)
    if (m == MATMUL_ROWS192_TILES[0] and wide and not prologue
            and nb * math.ceil(n / 128) >= tall_min):
        return MATMUL_ROWS192_TILES
    if (m == MATMUL_ROWS64_TILES[0] and wide and not prologue
            and nb * math.ceil(n / MATMUL_ROWS64_TILES[1]) >= MATMUL_ROWS64_MIN_WORKGROUPS):
        return MATMUL_ROWS64_TILES
    # 128-row tiles: a multiple of 128 rows, or 512 and more (a fifth padding at most)
    tall = m % 128 == 0 if m < 512 else not prologue
    if tall and nb * math.ceil(m / 128) * math.ceil(n / 64) >= tall_min:
        return 128, 64, 8, 4
    return 64, 64, 4, 4


def matmul_knobs(m: int, n: int, nb: int = 1, prologue: bool = False,
                 window: bool = False, wide: bool = True) -> dict:
    """The default knobs: the tiles above, BK = 16, and where the blocks allow it (TM and
    TN multiples of 4) vec4 staged fragments with 16-byte loads (VEC = 4) in two staged
    buffers (DB = 2; see _matmul). Measured on the H200 (bench/results/
    matmul_variants_h200.json): 128 x 128 tiles went from 0.41 / 0.38 / 0.40 of cuBLAS
    (VEC 1, DB 1) to 0.61 / 0.58 / 0.64 at 4096^3, 3001 x 4093 x 2999 and a
    8192 x 1024 x 4096 linear; 64 x 64 tiles with VEC 4, DB 2 reached 0.50-0.54 there.
    `prologue` (an operand's loader computes on the values it loads: `_computes_on_loads`)
    takes one staged buffer: DB 2 fetches the next tile into registers before the
    multiply, and a loader that computes on its loads waits for them right there, so the
    fetch hides nothing and only adds registers. Measured on the H200 (2026-12-01g,
    bench/results/matmul_variants_layernorm_h200.json): a LayerNorm computed in the A
    loader of a 12544 x 512 x 2048 linear, 1.029 ms with DB 1 against 1.312 ms with DB 2
    (the search had found DB 1 1.25-1.39x faster on three such kernels); in the suite,
    level1/110 (triangular masks on the operands) 7.10 -> 4.63 ms, the minGPT MLP block
    7.21 -> 5.54 ms, the MLP-Mixer 6.08 -> 5.34 ms.
    With VEC = 4 the K step's inner loop is written out (UNROLL = 1) and with a prologue
    operands read along K are staged along their rows (ROWS = 1): measured on the H200
    (2026-12-01j, matmul_unroll_rows_h200_2026-12-01j.json, all four combinations on 12
    products): unrolled, GEMM 4096^3 3.83 -> 3.38 ms, the linear 2.01 -> 1.76, 3 x 3
    convolutions of 128 channels (128 x 64 tiles) 2.02 -> 1.65, stride 2 0.196 -> 0.180,
    the transposed 1-d 2.50 -> 2.04; 64 x 64 tiles (two K steps a pass) unchanged
    (0.99-1.00x). With a LayerNorm in the loader (DB 1) unrolling alone gave 1.01x, with
    ROWS 1.18x (1.009 -> 0.853 ms); ROWS on products without a prologue went either way
    (0.93-1.04x) and is left to the search."""
    bm, bn, tm, tn = matmul_tiles(m, n, nb, prologue, window, wide)
    fast = tm % 4 == 0 and tn % 4 == 0
    many = tm * tn >= MATMUL_WIDE_BLOCK  # 128 accumulators: BK 8, staged along the rows
    return {"BM": bm, "BN": bn, "TM": tm, "TN": tn,
            "BK": 8 if bm in (32, MATMUL_ROWS192_TILES[0]) or many else MATMUL_BK,
            "VEC": 4 if fast else 1, "DB": 2 if fast and not prologue else 1,
            "ROWS": 1 if fast and (prologue or many) else 0, "UNROLL": 1 if fast else 0,
            "GROUP": MATMUL_GROUP}


# A product of at most this many output columns (rows) is one tile column (row) of the
# default tiles: its A (B) loader loads each element once (matmul_loads_once).
MATMUL_ONCE_SIDE = 64


# A prologue loaded once per element (matmul_loads_once) over at least this long a K
# takes the plain tiles (128 x 64, two staged buffers, 16-byte fetches), not the
# prologue's (one staged buffer, ROWS 1). Measured on the H200 (2026-12-02c,
# bench/results/profile_pv_h200_2026-12-02c.json, attention's exp(S - lse) by V, K = 1024
# and 2048 keys): the product by V 1.348 -> 1.029 ms (16 x 16 heads, 1024 queries),
# 1.123 -> 1.080 ms causal (8 x 12 heads, 2048), 0.686 -> 0.528 ms (nn.MultiheadAttention);
# with K of 32-197 (window attention's, ViT's) the plain tiles lost: the Swin blocks
# 4.216 -> 4.415 ms, ViT 4.675 -> 4.718 (suite call 43).
MATMUL_ONCE_PLAIN_MIN_K = 512


def matmul_wide(m: int, n: int, k: int) -> bool:
    """Whether a large product (matmul_tiles) takes the wide tiles, MATMUL_LARGE_TILES:
    M, N and K all multiples of 4 (operands load 16 bytes at a time whichever dim is
    contiguous) and K at least MATMUL_WIDE_MIN_K."""
    return m % 4 == 0 and n % 4 == 0 and k % 4 == 0 and k >= MATMUL_WIDE_MIN_K


def matmul_loads_once(m: int, n: int) -> tuple[bool, bool]:
    """Whether a product of M x N outputs loads each element of A, of B, once."""
    return n <= MATMUL_ONCE_SIDE, m <= MATMUL_ONCE_SIDE


def _computes_on_loads(v: Value, materialized) -> bool:
    """Whether the loader of `v` computes on the values it loads (an elementwise prologue:
    a LayerNorm's normalization, an activation, a cast) rather than only moving them
    (views, pads; a gather's index does not count). A convolution's windows do not count
    even over a prologue: a dense block's BN + ReLU + convolution (level3/014) ran at
    13.2 ms with DB 1 against 7.0 ms with DB 2 (2026-12-01g, suite)."""
    if v.kind != "node" or v in materialized or v.node.op == "window":
        return False
    if v.node.op == "ew":
        return True
    inputs = v.node.inputs[:1] if v.node.op == "gather" else v.node.inputs
    return v.node.op in MOVEMENT_OPS and any(_computes_on_loads(x, materialized)
                                             for x in inputs)


_MATMUL_KNOBS = ("BM", "BN", "TM", "TN", "BK", "VEC", "DB")
# The search space. Products of at least 512 x 512 try MATMUL_VARIANTS, settings that vary
# one lever at a time around the 128 x 128 tiles with 8 x 8 per invocation (the default
# before 2026-12-01k, and still with a prologue) and the 128 x 64 tiles with 8 x 4 (the
# default from then, and still where matmul_wide refuses the wide tiles): one or two
# staged buffers, BK, the tile shape; the wide tiles (MATMUL_LARGE_TILES, the default
# since 2026-12-02d) are in MATMUL_ALONG_ROWS. Smaller products try the
# scalar tiles MATMUL_TILES x MATMUL_BKS (each with 256 invocations) and
# MATMUL_VEC_VARIANTS. Dropped 2026-12-01k: scalar fragments (VEC 1; 0.38-0.41 of cuBLAS
# against 0.80 then) and 128 x 128 tiles of 8 x 16 staged 16 deep along K (128
# invocations holding 128 accumulators: 0.46-0.58, matmul_tiles_h200_2026-12-01k.json;
# staged 8 deep along the rows they became the wide tiles).
MATMUL_VARIANTS = (  # (BM, BN, TM, TN, BK, VEC, DB)
    (128, 128, 8, 8, 8, 4, 1),
    (128, 128, 8, 8, 16, 4, 1),  # the default with a prologue
    (128, 128, 8, 8, 32, 4, 1),
    (128, 128, 8, 8, 8, 4, 2),
    (128, 128, 8, 8, 16, 4, 2),
    (128, 64, 8, 4, 16, 4, 2),  # the default where matmul_wide refuses the wide tiles
    (128, 64, 8, 4, 32, 4, 1),
    (128, 64, 8, 8, 16, 4, 2),
    (128, 64, 8, 8, 32, 4, 1),
    (64, 128, 8, 8, 16, 4, 2),
    (256, 128, 8, 16, 8, 4, 2),
    (256, 128, 8, 16, 16, 4, 1),
    (64, 64, 4, 4, 16, 4, 2),
)
# ROWS = 1 (with VEC = 4): an operand read along K (a row-major A, a B stored [N, K] as
# nn.Linear's weight) is staged along its rows (M, N) anyway, each 16-byte load stored as
# four scalars: the inner loop then holds 2 vec4 of A per k step instead of TM vec4 for
# four steps (fewer live registers next to the 64 accumulators). The default where an
# operand's loader computes (DB 1: 1.18x on a LayerNorm + linear, 2026-12-01j); elsewhere
# in the search space, where it measured 0.89-1.19x of the default (2026-12-01f) and
# 0.93-1.04x with the loop written out (2026-12-01j). ROWS = 2: A alone (a linear's
# activations, not its weight): ROWS 1 gained 3-4% on plain GEMMs, whose B is read along
# N, and lost 1% on the linear, whose B it stages too. Measured 2026-12-01k on 128 x 128
# tiles: 1.036x (4096^3), 1.043x (3001 x 4093 x 2999), 0.993x (the linear) of ROWS 0; on
# the 128 x 64 default 0.94-0.97x (matmul_rows2_h200_2026-12-01k.json): in the search
# space of the 128 x 128 setting.
MATMUL_ALONG_ROWS = ((128, 128, 8, 8, 16, 4, 2), (128, 128, 8, 8, 8, 4, 2),
                     (128, 64, 8, 8, 16, 4, 2), (64, 64, 4, 4, 16, 4, 2),
                     (*MATMUL_LARGE_TILES, 8, 4, 2))  # the large products' default
# UNROLL = 1 (the VEC = 4 default): the K step's inner loop written out (BK / 4 copies
# with the offset a constant, the swizzled indices folded). NVIDIA's driver left the
# loop of an 8 x 8 block rolled: its K loop was 378 instructions for 256 FFMAs before
# the fetch set-up was hoisted (2026-12-01i), and written out it is 1024 FFMAs in about
# 1090 instructions a K step (SASS of the 4096^3 GEMM, 2026-12-01j). Measured 0.82-0.90x
# of the rolled loop before that hoisting (2026-12-01f), 1.13x after. The rolled loop
# (UNROLL = 0) on the default tiles (the wide ones and 128 x 64) stays in the search, and
# on 128 x 128 tiles with and without ROWS.
MATMUL_ROLLED = (((*MATMUL_LARGE_TILES, 8, 4, 2), 1), ((128, 64, 8, 4, 16, 4, 2), 0),
                 ((128, 128, 8, 8, 16, 4, 2), 0), ((128, 128, 8, 8, 16, 4, 2), 1),
                 ((64, 64, 4, 4, 16, 4, 2), 0), ((64, 64, 4, 4, 16, 4, 2), 1))
MATMUL_TILES = ((16, 64, 1, 4), (64, 16, 4, 1), (32, 32, 2, 2), (64, 64, 4, 4),
                (64, 128, 4, 8), (128, 64, 8, 4), (128, 128, 8, 8))
MATMUL_BKS = (8, 16, 32)
MATMUL_VEC_VARIANTS = ((64, 64, 4, 4, 16, 4, 2), (64, 64, 4, 4, 8, 4, 1),
                       (64, 128, 4, 8, 16, 4, 2), (128, 64, 8, 4, 16, 4, 2),
                       # 17-32 output rows (the default there, staged 8 deep) and
                       # columns (not measured)
                       (32, 128, 4, 4, 8, 4, 2), (32, 128, 4, 4, 16, 4, 2),
                       (128, 32, 4, 4, 16, 4, 2),
                       # 8 x 8 blocks where one side is 64 (a convolution's 64 output
                       # channels, M in the 100,000s); in the search only, not measured
                       (256, 64, 8, 8, 8, 4, 2), (64, 256, 8, 8, 8, 4, 2),
                       # the large products' default where one side is under 512 per
                       # batch entry (convolutions of 128-256 output channels, with the
                       # batch in the grid); in the search only, not measured
                       (128, 128, 8, 8, 16, 4, 2))


def matmul_workgroup_bytes(knobs: dict) -> int:
    """Workgroup memory of a setting: BK-deep slices of A and B, once or twice, with
    MATMUL_PAD vec4s per k on each side that may be staged along its rows."""
    rows = knobs["ROWS"] and knobs["VEC"] == 4 and knobs["DB"] == 1
    return ((knobs["BM"] + knobs["BN"]) * 4 + (32 * MATMUL_PAD if rows else 0)) \
        * knobs["BK"] * knobs["DB"]


def matmul_space(m: int, n: int, k: int) -> list[dict]:
    """Tiles whose sides are at most twice the product's (rounded up to a power of two),
    BK at most K (rounded up), staged tiles within MATMUL_WORKGROUP_BYTES."""
    if m >= 512 and n >= 512:
        rows = MATMUL_VARIANTS
    else:
        rows = tuple((bm, bn, tm, tn, bk, 1, 1) for bm, bn, tm, tn in MATMUL_TILES
                     for bk in MATMUL_BKS) + MATMUL_VEC_VARIANTS
    space = ([{**dict(zip(_MATMUL_KNOBS, row)), "ROWS": 0, "UNROLL": int(row[5] == 4)}
              for row in rows]
             + [{**dict(zip(_MATMUL_KNOBS, row)), "ROWS": 1, "UNROLL": 1}
                for row in MATMUL_ALONG_ROWS]
             + [{**dict(zip(_MATMUL_KNOBS, MATMUL_ALONG_ROWS[0])), "ROWS": 2, "UNROLL": 1}]
             + [{**dict(zip(_MATMUL_KNOBS, row)), "ROWS": r, "UNROLL": 0}
                for row, r in MATMUL_ROLLED])
    if m >= 512 and n >= 512:  # the default tiles in bands of 8 tile rows (MATMUL_GROUP)
        space += [{**dict(zip(_MATMUL_KNOBS, MATMUL_VARIANTS[5])), "ROWS": 0, "UNROLL": 1,
                   "GROUP": 8},
                  {**dict(zip(_MATMUL_KNOBS, MATMUL_ALONG_ROWS[-1])), "ROWS": 1, "UNROLL": 1,
                   "GROUP": 8}]
    return [{"GROUP": MATMUL_GROUP, **s} for s in space
            if s["BM"] <= 2 * _pow2_ceil(m) and s["BN"] <= 2 * _pow2_ceil(n)
            and s["BK"] <= max(8, _pow2_ceil(k))
            and matmul_workgroup_bytes(s) <= MATMUL_WORKGROUP_BYTES]


def _contiguous_dim(v: Value, materialized) -> int | None:
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
    view): a loader the matmul may replace by vec4 loads. None otherwise."""
    if 0 in v.shape:
        return None
    if v.kind in ("input", "const") or v in materialized:
        return (v, 0, contiguous_strides(v.shape)) if v.dtype == "f32" else None
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
        st = _view_strides(x.shape, st, v.shape)
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

def _view_strides(shape, strides, new_shape) -> list[int] | None:
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


@dataclass
class _Operand:
    """One matmul operand as the tile code sees it: `rows` (BM or BN) rows of the tile
    along the output dim (m for A, n for B), `size` of that dim, the register block's
    `per` rows per invocation spread over `threads` invocations along `tid`."""

    name: str  # "a" or "b"
    rows: int
    size: int
    base: str  # the tile's first row: "m0" or "n0"
    tid: str  # "ty" or "tx"
    threads: int  # TY or TX
    per: int  # TM or TN
    row_dim: int  # the loader dim of the rows (A: 1, B: 2); K is the other of 1, 2
    contiguous: str | None  # "row", "k" or None (unknown): which dim is contiguous
    layout: str  # "O": fragments along the rows, "K": along K (vec4 only)
    width: int  # 1 (scalars) or 4 (vec4)
    view: tuple[str, int, list[int]] | None  # vec4 view name, offset, strides: 16-byte loads
    transpose: bool = False  # read along K, staged along the rows (ROWS): 4 stores a load
    lanes: int | None = None  # no view: the loader dim whose 4 values one call returns
    pad: int = 0  # vec4s of padding per k of the staged tile (MATMUL_PAD)

    @property
    def kstride(self) -> int:
        """Tile elements from one k to the next in a fragments-along-the-rows tile."""
        return self.rows // self.width + self.pad

    def call(self, row: str, k: str, suffix: str = "") -> str:
        return (f"load_a{suffix}(b, {row}, {k})" if self.name == "a"
                else f"load_b{suffix}(b, {k}, {row})")

    def row_of(self, i: int) -> str:
        """The tile row of the invocation's i-th row (A: m, B: n)."""
        if self.layout == "K":
            return f"{self.tid} + {i * self.threads}"
        w = self.width
        return f"({self.tid} + {i // w * self.threads}) * {w} + {i % w}"


def _matmul_operand(src, materialized, name: str, x: Value, knobs: dict) -> _Operand:
    vec = knobs["VEC"]
    a = name == "a"
    row_dim = 1 if a else 2
    cdim = _contiguous_dim(x, materialized)
    contiguous = None if cdim is None else ("row" if cdim == row_dim else "k")
    transpose = vec == 4 and contiguous == "k" and knobs["ROWS"] in ((1, 2) if a else (1,))
    layout = "K" if vec == 4 and contiguous == "k" and not transpose else "O"
    width = 1 if vec == 1 else 4
    view = None
    plain = plain_strides(x, materialized) if vec == 4 else None
    if plain is not None:
        root, offset, st = plain
        # the dim a vec4 load runs along; every other stride a multiple of 4, those of
        # size-1 dims too (stricter than vec4_view: relaxed, 4 suite plans change,
        # level1/005, 013, level3/018 and 019, not measured)
        vdim = row_dim if layout == "O" and not transpose else 3 - row_dim
        if (st[vdim] == 1 and x.shape[vdim] % 4 == 0 and offset % 4 == 0
                and all(s % 4 == 0 for d, s in enumerate(st) if d != vdim)):
            view = (src.view4(root), offset, st)
    # without a view, the 16 bytes an invocation fetches at once come from one loader
    # call (`load_a4`, `load_b4`: _loader with lanes), where their index arithmetic is
    # shared; measured on the H200 (2026-12-01h, bench/results/window_variants_h200.json)
    # on 3 x 3 convolutions, whose windows' pixels each call divided by the image width:
    # 128 channels at 56 x 56 2.55 -> 2.08 ms, 128 -> 192 at 64 x 64 2.85 -> 2.15 ms,
    # 64 channels at 128 x 128 1.94 -> 1.48 ms
    # Along K the four lanes must be all inside or all outside (a K tail reads zeros);
    # along the rows of a computed operand (a window, a prologue) a group may cross
    # their end: the lanes past it land in tile rows whose outputs are not stored
    # (WebGPU keeps any read in bounds). Measured on the H200 (2026-12-01m): 3 x 3
    # convolutions of 7 x 7 images 0.207 -> 0.157 ms, level1/060 (127-wide rows) 5.65
    # -> 4.32 ms; a plain B of 50 columns (each lane tested alone before) 1.41 -> 1.71
    # ms, so a plain operand keeps its lanes' own tests
    lanes = None
    if vec == 4 and view is None:
        ldim = row_dim if layout == "O" and not transpose else 3 - row_dim
        computed = plain is None
        lanes = (ldim if x.shape[ldim] % 4 == 0 or ldim == row_dim and computed
                 else None)
    return _Operand(name, knobs["BM" if a else "BN"], x.shape[row_dim], "m0" if a else "n0",
                    "ty" if a else "tx", knobs["BM"] // knobs["TM"] if a else
                    knobs["BN"] // knobs["TN"], knobs["TM" if a else "TN"], row_dim,
                    contiguous, layout, width, view, transpose, lanes,
                    MATMUL_PAD if transpose and knobs["DB"] == 1 else 0)


def _matmul_tile_code(op: _Operand, bk: int, nt: int, k: int, db: int):
    """Declarations, the per-invocation set-up and prefetch registers, and the code that
    fetches one staged tile of the operand into registers (at K offset `kb`) and stores
    it (at `{off}`). What does not depend on `kb` (an invocation's row and K offset in
    the tile, its staging slot, its row's bounds test, the address of a vec4 view but
    for the K term) is computed once before the K loop, and bounds tests that hold for
    every tile (M, N or K a multiple of the tile) are not written: the driver neither
    hoisted that arithmetic nor dropped those tests, so a plain GEMM's K step spent 110
    integer instructions beside its 256 FMAs (SASS read from NVIDIA's shader cache on
    the H200, 2026-12-01i)."""
    w, rows = op.width, op.rows
    vec_t = "f32" if w == 1 else "vec4<f32>"
    per_buffer = op.kstride * bk if op.layout == "O" else rows * bk // w
    decl = f"var<workgroup> tile_{op.name}: array<{vec_t}, {per_buffer * db}>;"
    chunks = bk // 4
    n = op.name
    if op.transpose:  # 4 k values of one row loaded, stored into 4 fragments' lanes
        units, groups = rows * bk // 4, op.kstride
        pos = ("({t} % {c}) * 4", "{t} / {c}")
    elif op.layout == "O":
        units, groups = per_buffer, op.kstride
        pos = (("{t} % {bk}", "{t} / {bk}") if op.contiguous == "k"
               else ("{t} / {g}", "{t} % {g}"))
    else:
        units = per_buffer
        pos = (("({t} / {rows}) * 4", "{t} % {rows}") if op.contiguous == "row"
               else ("({t} % {c}) * 4", "{t} / {c}"))
    rows_in = op.size % rows == 0  # every tile's rows inside the operand
    k_in = k % bk == 0  # every K step inside

    def inside(r: str, kk: str, first: str, row_ok: str) -> str:
        """The test that element (row r, K offset kk) of a fetch lies inside the operand
        ("" when every tile's is): its row's precomputed `row_ok` for the first row."""
        tests = [] if rows_in else [row_ok if r == first else f"{op.base} + {r} < {op.size}"]
        if not k_in:
            tests.append(f"kb + {kk} < {k}")
        return " && ".join(tests)

    def guarded(test: str, body: str) -> str:
        return f"if ({test}) {{ {body} }}" if test else body

    def filled(reg: str, test: str, body: str) -> str:  # zeros where the test fails
        return f"{reg} = vec4<f32>(0.0); {guarded(test, body)}" if test else body

    prefetch, fetch, store = [], [], []
    for u in range(-(-units // nt)):
        reg, t, kq, rq = f"p{n}{u}", f"t{n}{u}", f"q{n}{u}", f"r{n}{u}"
        kx, rx = (p.format(t=t, c=chunks, bk=bk, g=groups if op.layout == "O" else 0,
                           rows=rows) for p in pos)
        prefetch += [f"    var {reg}: {vec_t};",
                     f"    let {t} = lin + {u * nt}; let {kq} = {kx}; let {rq} = {rx};"]
        if op.transpose or op.layout == "K":
            elems = [(rq, f"{kq} + {e}") for e in range(4)]
        else:
            elems = [(f"{rq} * {w} + {e}" if w > 1 else rq, kq) for e in range(w)]
        row_ok = f"v{n}{u}"  # the row of the first element (all of a vec4 view's)
        if not rows_in:
            prefetch.append(f"    let {row_ok} = {op.base} + {elems[0][0]} < {op.size};")

        if op.view is not None:
            name, offset, st = op.view
            r, kk = elems[0]
            terms = [str(offset // 4)] if offset else []
            for dim, idx in ((0, "b"), (op.row_dim, f"({op.base} + {r})"),
                             (3 - op.row_dim, kk if " " not in kk else f"({kk})")):
                if st[dim] == 1:
                    terms.append(f"{idx} / 4")
                elif st[dim]:
                    terms.append(f"{idx} * {st[dim] // 4}")
            kst = st[3 - op.row_dim]  # kb, a multiple of 4, apart from the rest
            kterm = "(kb >> 2u)" if kst == 1 else f"kb * {kst // 4}"
            prefetch.append(f"    let i{n}{u} = {' + '.join(terms) or '0'};")
            body = filled(reg, inside(r, kk, elems[0][0], row_ok),
                          f"{reg} = {name}[i{n}{u} + {kterm}];")
        elif op.lanes is not None:  # the four lanes from one call, all in or all out
            r, kk = elems[0]
            body = filled(reg, inside(r, kk, elems[0][0], row_ok),
                          f"{reg} = {op.call(f'{op.base} + {r}', f'kb + {kk}', '4')};")
        else:
            body = f"{reg} = {vec_t}(0.0);"
            for e, (r, kk) in enumerate(elems):
                lane = f"{reg}.{_LANES[e]}" if w > 1 else reg
                body += " " + guarded(inside(r, kk, elems[0][0], row_ok),
                                      f"{lane} = {op.call(f'{op.base} + {r}', f'kb + {kk}')};")
        if op.transpose:
            prefetch.append(f"    let s{n}{u} = {kq} * {groups} + {rq} / 4; "
                            f"let l{n}{u} = {rq} % 4;")
            st_line = " ".join(f"tile_{n}[{{off}} + s{n}{u} + {e * groups}][l{n}{u}]"
                               f" = {reg}.{_LANES[e]};" for e in range(4))
        else:
            slot = (f"{kq} * {groups} + {rq}" if op.layout == "O"
                    else f"{rq} * {chunks} + (({kq} / 4) ^ {_swizzle(rq, chunks)})")
            prefetch.append(f"    let s{n}{u} = {slot};")
            st_line = f"tile_{n}[{{off}} + s{n}{u}] = {reg};"
        f_line, s_line = body, st_line
        if (u + 1) * nt > units:  # a last round that only part of the workgroup loads
            f_line = f"if ({t} < {units}) {{ {f_line} }}"
            s_line = f"if ({t} < {units}) {{ {s_line} }}"
        fetch.append(f"{{ {f_line} }}")
        store.append(f"{{ {s_line} }}")
    return decl, per_buffer, prefetch, fetch, store


def _swizzle(row: str, chunks: int) -> str:
    """The XOR swizzle of K-major vec4 tiles: row r's chunk c is stored at c ^ s(r), so
    that 8 consecutive rows read at one chunk hit 8 different 16-byte bank groups."""
    shift = max(0, 3 - (chunks.bit_length() - 1))  # rows per swizzle step: 8 / chunks
    return f"(({row} >> {shift}u) & {chunks - 1})" if shift else f"({row} & {chunks - 1})"


def _matmul_multiply(a: _Operand, b: _Operand, bk: int, vec: int) -> list[str]:
    """The unrolled register block of one K step (VEC = 1) or four (VEC = 4): A's values
    for the step held in registers, B's streamed, one fma per accumulator and k."""
    lines = []
    steps = 1 if vec == 1 else 4
    kv = "kk" if vec == 1 else "kq"

    def fragment(op: _Operand, g: int, c: int, off: str) -> str:
        """Tile element (vec4 or scalar) g of the operand's fragment at step c."""
        if op.layout == "K":
            chunks = bk // 4
            z = f"z{op.name}" if op.threads % 8 == 0 else _swizzle(f"({op.row_of(g)})", chunks)
            return f"tile_{op.name}[{off} + ({op.row_of(g)}) * {chunks} + (({kv} / 4) ^ {z})]"
        k = kv if c == 0 else f"{kv} + {c}"
        return f"tile_{op.name}[{off} + ({k}) * {op.kstride} + {op.tid} + {g * op.threads}]"

    def value(op: _Operand, var: str, i: int, c: int) -> str:
        if op.layout == "K":
            return f"{var}{i}.{_LANES[c]}"
        if op.width == 1:
            return f"{var}{i}_{c}"
        return f"{var}{i // 4}_{c}.{_LANES[i % 4]}"

    if a.layout == "K":
        lines += [f"let a{i} = {fragment(a, i, 0, 'aoff')};" for i in range(a.per)]
    else:
        lines += [f"let a{g}_{c} = {fragment(a, g, c, 'aoff')};"
                  for c in range(steps) for g in range(a.per // a.width)]
    if b.layout == "K":
        for j in range(b.per):
            lines.append(f"let b{j} = {fragment(b, j, 0, 'boff')};")
            lines += [f"acc_{i}_{j} = fma({value(a, 'a', i, c)}, {value(b, 'b', j, c)},"
                      f" acc_{i}_{j});" for c in range(steps) for i in range(a.per)]
    else:
        for c in range(steps):
            for g in range(b.per // b.width):
                lines.append(f"let b{g}_{c} = {fragment(b, g, c, 'boff')};")
                lines += [f"acc_{i}_{j} = fma({value(a, 'a', i, c)}, {value(b, 'b', j, c)},"
                          f" acc_{i}_{j});"
                          for j in range(g * b.width, (g + 1) * b.width) for i in range(a.per)]
    return lines


def _matmul(src, materialized, out, tnode, knobs=None):
    """The matmul kernel for the given knobs (module comment of kernels/matmul.wgsl).
    VEC = 4: each operand's staged tile holds vec4 fragments along its contiguous dim
    (A K-contiguous, as stored by a row-major A: [m][k/4], XOR-swizzled; A
    M-contiguous: [k][m/4]; B likewise with n), so the inner loop does 16-byte shared
    loads for both operands; the global loads are 16 bytes wide too when the loader is
    a plain buffer read whose contiguous dim is a multiple of 4 (a vec4 view of the
    buffer is bound next to it), else four scalar loader calls. DB = 2: two staged
    buffers; the next tile is fetched into registers while this one is multiplied and
    stored after it, one barrier per K step."""
    a, b = tnode.inputs
    nb, m, k = a.shape
    n = b.shape[2]
    # a prologue loaded once per element over a long K (one tile column: attention's
    # exp(S - lse) by V) takes the plain tiles (matmul_knobs, MATMUL_ONCE_PLAIN_MIN_K)
    prologue = any(_computes_on_loads(x, materialized)
                   and not (once and k >= MATMUL_ONCE_PLAIN_MIN_K)
                   for x, once in zip((a, b), matmul_loads_once(m, n)))
    knobs = _merge(matmul_knobs(m, n, nb, prologue, reads_window(a) or reads_window(b),
                                matmul_wide(m, n, k)), knobs)
    bm, bn, tm, tn, bk, vec, db = (knobs[name] for name in _MATMUL_KNOBS)
    _require(all(isinstance(v, int) and v >= 1 for v in (bm, bn, tm, tn, bk)), knobs,
             "tile sizes must be positive integers")
    _require(bm % tm == 0 and bn % tn == 0, knobs, "TM must divide BM and TN divide BN")
    _require((bm // tm) * (bn // tn) <= MAX_WG, knobs, f"more than {MAX_WG} invocations")
    _require(vec in (1, 4) and db in (1, 2), knobs, "VEC must be 1 or 4 and DB 1 or 2")
    _require(knobs["ROWS"] in (0, 1, 2) and knobs["UNROLL"] in (0, 1), knobs,
             "ROWS must be 0, 1 or 2 (A only) and UNROLL 0 or 1")
    _require(isinstance(knobs["GROUP"], int) and knobs["GROUP"] >= 0, knobs,
             "GROUP must be a non-negative integer")
    _require(vec == 1 or (tm % 4 == 0 and tn % 4 == 0 and bk % 4 == 0
                          and (bk // 4) & (bk // 4 - 1) == 0 and bk <= 32), knobs,
             "VEC = 4 needs TM, TN multiples of 4 and BK 4 times a power of two, at most 32")
    wg_bytes = matmul_workgroup_bytes(knobs)
    _require(wg_bytes <= MATMUL_WORKGROUP_BYTES, knobs,
             f"staged tiles exceed {MATMUL_WORKGROUP_BYTES} bytes")
    if nb > MAX_GRID:
        raise CompileError(f"matmul batch {nb} exceeds the grid limit {MAX_GRID}")
    # the scalar loaders first: they bind the operands' buffers (names in the key) before
    # any vec4 view of them
    scalar = [_loader(src, materialized, "load_a", a), _loader(src, materialized, "load_b", b)]
    tx, ty = bn // tn, bm // tm
    nt = tx * ty
    ops = [_matmul_operand(src, materialized, name, x, knobs) for name, x in (("a", a), ("b", b))]
    functions = "".join(f if op.lanes is None
                        else _loader(src, materialized, f"load_{op.name}4", x, lanes=op.lanes)
                        for f, op, x in zip(scalar, ops, (a, b)))
    tiles, prefetch, fetch, stores, sizes = [], [], [], [], []
    for op in ops:
        decl, per_buffer, pre, fet, sto = _matmul_tile_code(op, bk, nt, k, db)
        tiles.append(decl)
        prefetch += pre
        fetch += fet
        stores.append(sto)
        sizes.append(per_buffer)
        if op.layout == "K" and op.threads % 8 == 0:  # one swizzle for all of its rows
            prefetch.append(f"    let z{op.name} = {_swizzle(op.tid, bk // 4)};")

    def stored(off_a: str, off_b: str, indent: str) -> str:
        return "\n".join(indent + line.replace("{off}", off)
                         for off, lines in zip((off_a, off_b), stores) for line in lines)

    def fetched(indent: str) -> str:
        return "\n".join(indent + f for f in fetch)

    mult = "\n".join(f"            {line}" for line in _matmul_multiply(*ops, bk, vec))
    step = 1 if vec == 1 else 4
    kv = "kk" if vec == 1 else "kq"
    if knobs["UNROLL"]:
        inner = "\n".join(f"        {{\n            let {kv} = {i};\n{mult}\n        }}"
                          for i in range(0, bk, step))
    else:
        inner = f"        for (var {kv} = 0; {kv} < {bk}; {kv} += {step}) {{\n{mult}\n        }}"
    # A triangular operand (ops/linalg.k_range) bounds each tile's K loop: [klo, khi),
    # klo a multiple of BK; the loaders' masks still zero what lies outside the band.
    # An epilogue ending in where(mask, value, scalar) whose mask is a band of the
    # output (ir.where_band: causal attention's scores) needs no product in a tile
    # the band misses: its K range is empty
    at = tnode.attrs
    band = where_band(out) if out is not tnode.out and out.shape[-2:] == (m, n) else None
    missed = None  # no output of the tile in the band: from the range of n - m in it
    if band is not None:
        op, c, _ = band
        least, most = f"n0 - m0 - {bm - 1}", f"n0 - m0 + {bn - 1}"
        missed = {"le": f"{least} > {c}", "lt": f"{least} >= {c}", "ge": f"{most} < {c}",
                  "gt": f"{most} <= {c}", "eq": f"{least} > {c} || {most} < {c}"}[op]
    ranged = bool(at.get("k_from") or at.get("k_to") or missed)
    first, end = "0", str(k)
    if ranged:
        lows = [f"{ax}0 + {c}" for ax, c in at.get("k_from", [])]
        highs = [f"{ax}0 + {(bm if ax == 'm' else bn) + c}" for ax, c in at.get("k_to", [])]
        lo = "0"
        for t in lows:
            lo = f"max({lo}, {t})"
        hi = str(k)
        for t in highs:
            hi = f"min({hi}, {t})"
        first, end = "klo", "khi"
        # klo stays inside K: an empty range's first fetch still reads the operands
        klo = f"(min({lo}, {k - 1}) / {bk}) * {bk}" if lows else "0"
        # a tile the band misses stores nothing when nothing reads there (src.band_only:
        # ir.read_only_in_band), else the epilogue's value outside the band
        skip = f"    if ({missed}) {{ return; }}\n" if missed and src.band_only else ""
        if missed and not skip:
            hi = f"select({hi}, 0, {missed})"
        ranges = f"{skip}    let klo = {klo};\n    let khi = {hi};\n"
    if db == 1:
        loop = (f"    for (var k0 = {first}; k0 < {end}; k0 += {bk}) {{\n        let kb = k0;\n"
                f"{fetched('        ')}\n{stored('0', '0', '        ')}\n"
                f"        workgroupBarrier();\n        let aoff = 0;\n        let boff = 0;\n"
                f"{inner}\n        workgroupBarrier();\n    }}")
    else:
        # The next tile is fetched into registers during the multiply and stored into
        # the other buffer after it, unconditionally: the step whose next tile is past K
        # fetches the first tile again (no branch around the fetch and store, whose
        # merges cost the driver register moves; its store lands in a buffer no step
        # reads). Blocks of up to 32 accumulators take two steps per pass of the loop,
        # one per buffer, so that the buffer offsets are constants; with 64 the driver
        # shuffles them between the two steps (156 register moves in a 4096^3 GEMM's
        # loop, read from NVIDIA's shader cache), so they take one. Measured on the H200
        # (2026-12-01i, against the branches and a buffer computed from k0): 3 x 3
        # convolutions (64 x 64 and 128 x 64 tiles) 1.46 -> 1.30 ms (64 ch), 2.07 ->
        # 2.02 (128 ch), 2.16 -> 1.89 (128 -> 192); GEMM 4096^3 3.78 -> 3.84 ms, and
        # with two steps 4.59
        sa, sb = sizes
        steps = -(-k // bk)
        pair = tm * tn <= 32

        def k_step(cur: str, nxt: str, last: bool) -> str:
            """One K step on buffer `cur` (0, 1 or an expression), fetching the tile at
            `nxt`; `last`: `nxt` may be past K."""
            ind = "        "
            other = f"(1 - {cur})" if not cur.isdigit() else str(1 - int(cur))
            kb = f"select({nxt}, 0, {nxt} >= {end})" if last else nxt
            return (f"{ind}let kb = {kb};\n{fetched(ind)}\n{ind}let aoff = {cur} * {sa};\n"
                    f"{ind}let boff = {cur} * {sb};\n{inner}\n"
                    f"{stored(f'{other} * {sa}', f'{other} * {sb}', ind)}\n"
                    f"{ind}workgroupBarrier();")

        if pair:  # with an odd number of steps the second runs only while there is one
            # (a K range's parity is the tile's: both steps may be the last)
            one = textwrap.indent(k_step("0", f"k0 + {bk}", ranged or steps % 2 == 1), "    ")
            two = textwrap.indent(k_step("1", f"k0 + {2 * bk}", ranged or steps % 2 == 0),
                                  "    ")
            guard = "" if steps % 2 == 0 and not ranged else f"if (k0 + {bk} < {end}) "
            body = f"        {{\n{one}\n        }}\n        {guard}{{\n{two}\n        }}"
        else:
            body = (f"        let cur = ((k0 - {first}) / {bk}) % 2;\n" if ranged else
                    f"        let cur = (k0 / {bk}) % 2;\n") + k_step("cur", f"k0 + {bk}", True)
        loop = (f"    {{\n        let kb = {first};\n{fetched('        ')}\n    }}\n"
                f"{stored('0', '0', '    ')}\n    workgroupBarrier();\n"
                f"    for (var k0 = {first}; k0 < {end}; k0 += {(2 if pair else 1) * bk}) {{\n"
                f"{body}\n    }}")
    if ranged:
        loop = ranges + loop
    a_op, b_op = ops
    accs = [f"    var acc_{i}_{j} = 0.0;" for i in range(tm) for j in range(tn)]
    # the stores test M and N only where a tile can cross them
    test = " && ".join(t for t, inside in ((f"m < {m}", m % bm == 0), (f"n < {n}", n % bn == 0))
                       if not inside)

    def store(i: int, j: int) -> str:
        body = f"let gi = (b * {m} + m) * {n} + n; let acc = acc_{i}_{j}; $STORE"
        return f"if ({test}) {{ {body} }}" if test else body

    outs = [f"    {{ let m = m0 + {a_op.row_of(i)}; let n = n0 + {b_op.row_of(j)}; {store(i, j)} }}"
            for i in range(tm) for j in range(tn)]
    gx, gy = math.ceil(n / bn), math.ceil(m / bm)
    slots = dict(functions=functions, key_functions="".join(scalar), BM=bm, BN=bn, TX=tx,
                 TY=ty, ORIGIN=_tile_origin(knobs["GROUP"], gx, gy, bm, bn),
                 TILES="\n".join(tiles),
                 PREFETCH="\n".join(prefetch), ACCUMULATORS="\n".join(accs), K_LOOP=loop,
                 STORE_BLOCK="\n".join(outs), workgroup_bytes=wg_bytes)
    return "matmul", slots, (gx, gy, nb), knobs


def _tile_origin(group: int, gx: int, gy: int, bm: int, bn: int) -> str:
    """m0, n0: the first row and column of the workgroup's tile (MATMUL_GROUP)."""
    if group == 0 or gy == 1 or gx == 1:
        return f"    let m0 = i32(wid.y) * {bm};\n    let n0 = i32(wid.x) * {bn};"
    g = min(group, gy)
    rows = str(g) if gy % g == 0 else f"min({gy} - first, {g})"
    return (f"    let pid = i32(wid.y) * {gx} + i32(wid.x);\n"
            f"    let first = (pid / {g * gx}) * {g};\n"
            f"    let inside = pid - first * {gx};\n"
            f"    let rows = {rows};\n"
            f"    let m0 = (first + inside % rows) * {bm};\n"
            f"    let n0 = (inside / rows) * {bn};")


ATTENTION_WORKGROUP_BYTES = 32768  # as the matmul's: the device's limit is checked at build
ATTENTION_MAX_REGISTERS = 64  # outputs per invocation (RM x CV), at most
# Query rows and keys per block, invocations, fastest first as measured on the H200
# (2026-12-01f, bench/results/attention_variants_h200.json: 16 x 16 heads, L = S = 1024,
# E = 64; the order was the same with and without the causal mask): 32 rows of 16-key
# blocks on 128 invocations (4 rows each) took 5.33 ms unmasked and 2.89 ms causal, the
# previous first setting (64, 16, 128) 7.72 and 4.36 ms. (64, 32, 128) fits only heads
# narrower than 64 and is not measured.
ATTENTION_SETTINGS = ((32, 16, 128), (32, 32, 128), (64, 16, 256), (32, 16, 64),
                      (64, 16, 128), (64, 32, 128), (16, 16, 64), (32, 32, 64), (16, 16, 32))


def attention_knobs(e: int, ev: int) -> dict | None:
    """BQ query rows and BK keys per block, WG invocations: the first of
    ATTENTION_SETTINGS whose tiles fit (attention_config); None when none does."""
    for bq, bk, wg in ATTENTION_SETTINGS:
        knobs = {"BQ": bq, "BK": bk, "WG": wg}
        if attention_config(e, ev, knobs) is not None:
            return knobs
    return None


def attention_space(e: int, ev: int) -> list[dict]:
    return [k for k in ({"BQ": bq, "BK": bk, "WG": wg} for bq, bk, wg in ATTENTION_SETTINGS)
            if attention_config(e, ev, k) is not None]


def attention_config(e: int, ev: int, knobs: dict | None = None) -> dict | None:
    """The attention template's derived slots for head dims E (q, k) and EV (v) and the
    knobs (default: attention_knobs): RM rows per invocation (4 or 8: two or one 16-byte
    query loads per row group), CN keys and CV output columns per invocation, the tiles'
    strides and sizes. None when they do not fit: workgroup memory, invocations, or
    more than ATTENTION_MAX_REGISTERS outputs per invocation (ops/attention.py then
    decomposes instead)."""
    knobs = knobs or attention_knobs(e, ev)
    if knobs is None:
        return None
    bq, bk, wg = knobs["BQ"], knobs["BK"], knobs["WG"]
    if wg % 16 or wg > MAX_WG or bk % 16 or bq % (wg // 16):
        return None
    rm, cv = bq // (wg // 16), -(-ev // 16)
    if rm not in (4, 8) or rm * cv > ATTENTION_MAX_REGISTERS:
        return None
    qs, ks, evp = bq + 4, bk + 1, 16 * cv
    qwords, kvwords, pwords = e * qs // 4, max(e * ks, bk * evp), bq * bk // 4
    if 4 * (4 * qwords + kvwords + 4 * pwords) > ATTENTION_WORKGROUP_BYTES:
        return None
    return dict(BQ=bq, BK=bk, WG=wg, RM=rm, CN=bk // 16, CV=cv, QS=qs, KS=ks, EVP=evp,
                QWORDS=qwords, KVWORDS=kvwords, PWORDS=pwords,
                workgroup_bytes=4 * (4 * qwords + kvwords + 4 * pwords))


def _attention_code(cfg: dict, e: int, lq: int, ev: int, keep: str, mask: str) -> dict:
    """The unrolled parts of kernels/attention.wgsl: s_a_c scores, m_a / l_a the row's
    running maximum and this invocation's part of its sum, o_a_d the outputs (row r0 +
    a, key tx + 16 c, value column tx + 16 d)."""
    rm, cn, cv, bk, qs, ks, evp = (cfg[k] for k in ("RM", "CN", "CV", "BK", "QS", "KS", "EVP"))
    rows, keys, cols = range(rm), range(cn), range(cv)
    p8, p12 = " " * 8, " " * 12
    regs = [f"    var m_{a} = neg_inf;\n    var l_{a} = 0.0;" for a in rows]
    regs += [f"    var o_{a}_{d} = 0.0;" for a in rows for d in cols]
    comp = "xyzw"
    scores = [f"{p8}var s_{a}_{c} = 0.0;" for a in rows for c in keys]
    scores.append(f"{p8}for (var e = 0; e < {e}; e += 1) {{")
    scores += [f"{p12}let q{g} = q_tile[(e * {qs} + r0) / 4 + {g}];" for g in range(rm // 4)]
    scores += [f"{p12}let k{c} = kv_tile[e * {ks} + tx + {16 * c}];" for c in keys]
    scores += [f"{p12}s_{a}_{c} = fma(q{a // 4}.{comp[a % 4]}, k{c}, s_{a}_{c});"
               for a in rows for c in keys]
    scores.append(f"{p8}}}")
    for a in rows:
        for c in keys:
            scores.append(f"{p8}{{ let i = q0 + r0 + {a}; let j = k0 + tx + {16 * c}; "
                          f"if ({keep}) {{ s_{a}_{c} = s_{a}_{c}{mask}; }} else {{ "
                          f"s_{a}_{c} = neg_inf; }} }}")
        top = f"s_{a}_0"
        for c in range(1, cn):
            top = f"max({top}, s_{a}_{c})"
        scores.append(f"{p8}p_tile[((r0 + {a}) * {bk} + tx) / 4][tx % 4] = {top};")
    softmax = []
    for a in rows:
        base = f"(r0 + {a}) * {bk // 4}"
        softmax.append(f"{p8}let w{a} = max(max(p_tile[{base}], p_tile[{base} + 1]), "
                       f"max(p_tile[{base} + 2], p_tile[{base} + 3]));")
        softmax.append(f"{p8}let mn_{a} = max(m_{a}, max(max(w{a}.x, w{a}.y), "
                       f"max(w{a}.z, w{a}.w)));")
    softmax.append(f"{p8}workgroupBarrier();  // every row's maxima read")
    for a in rows:
        softmax.append(f"{p8}if (mn_{a} != neg_inf) {{")
        softmax.append(f"{p12}let alpha = select(exp(m_{a} - mn_{a}), 0.0, m_{a} == neg_inf);")
        softmax.append(f"{p12}l_{a} = l_{a} * alpha;")
        softmax += [f"{p12}o_{a}_{d} = o_{a}_{d} * alpha;" for d in cols]
        softmax.append(f"{p12}m_{a} = mn_{a};")
        softmax.append(f"{p8}}}")
        for c in keys:
            softmax.append(f"{p8}{{ let p = select(exp(s_{a}_{c} - m_{a}), 0.0, "
                           f"s_{a}_{c} == neg_inf); l_{a} = l_{a} + p; "
                           f"p_tile[((r0 + {a}) * {bk} + tx + {16 * c}) / 4][tx % 4] = p; }}")
    outputs = [f"{p12}let p{a} = p_tile[((r0 + {a}) * {bk} + j) / 4];" for a in rows]
    for jj in range(4):
        outputs += [f"{p12}let v{jj}_{d} = kv_tile[(j + {jj}) * {evp} + tx + {16 * d}];"
                    for d in cols]
        outputs += [f"{p12}o_{a}_{d} = fma(p{a}.{comp[jj]}, v{jj}_{d}, o_{a}_{d});"
                    for a in rows for d in cols]
    totals = [f"    p_tile[((r0 + {a}) * {bk} + tx) / 4][tx % 4] = l_{a};" for a in rows]
    totals.append("    workgroupBarrier();")
    for a in rows:
        base = f"(r0 + {a}) * {bk // 4}"
        totals.append(f"    let u{a} = p_tile[{base}] + p_tile[{base} + 1] + p_tile[{base} + 2]"
                      f" + p_tile[{base} + 3];")
        totals.append(f"    let lt_{a} = u{a}.x + u{a}.y + u{a}.z + u{a}.w;")
        totals.append(f"    let inv_{a} = select(1.0 / lt_{a}, 0.0, lt_{a} == 0.0);")
    stores = [f"    {{ let i = q0 + r0 + {a}; let col = tx + {16 * d}; if (i < {lq} && "
              f"col < {ev}) {{ let gi = (b * {lq} + i) * {ev} + col; "
              f"let acc = o_{a}_{d} * inv_{a}; $STORE }} }}" for a in rows for d in cols]
    return dict(REGISTERS="\n".join(regs), SCORES="\n".join(scores),
                SOFTMAX="\n".join(softmax), OUTPUTS="\n".join(outputs),
                TOTALS="\n".join(totals), STORES="\n".join(stores))


def _attention(src, materialized, out, tnode, knobs=None):
    q, k, v = tnode.inputs[:3]
    bh, lq, e = q.shape
    s, ev = k.shape[1], v.shape[2]
    at = tnode.attrs
    default = attention_knobs(e, ev)
    if default is None:
        raise CompileError(f"attention head dims {e}, {ev} do not fit the kernel's tiles")
    knobs = _merge(default, knobs)
    _require(all(isinstance(knobs[n], int) and knobs[n] >= 1 for n in knobs), knobs,
             "block sizes must be positive integers")
    cfg = attention_config(e, ev, knobs)
    _require(cfg is not None, knobs, "tiles exceed workgroup memory, invocations or "
             "registers")
    functions = (_loader(src, materialized, "load_q", q) + _loader(src, materialized, "load_k", k)
                 + _loader(src, materialized, "load_v", v))
    mask = ""
    if at["masked"]:
        functions += _loader(src, materialized, "load_mask", tnode.inputs[3])
        mask = " + load_mask(b, i, j)"
    keep, kend = f"j < {s} && i < {lq}", str(s)
    if at["causal"]:
        keep += " && j <= i"
        kend = f"min({s}, q0 + {cfg['BQ']})"
    nqb = math.ceil(lq / cfg["BQ"])
    groups = bh * nqb
    grid, gx = grid_1d(groups, 1)
    code = _attention_code(cfg, e, lq, ev, keep, mask)
    slots = dict(functions=functions, L=lq, S=s, E=e, EV=ev, NQB=nqb, GROUPS=groups,
                 GRID_X=gx, SCALE=literal(at["scale"], "f32"), KEND=kend, **cfg, **code)
    return "attention", slots, grid, knobs


# A copy's (materialize) VEC where it may be 4 (the tuner's space holds both). Measured
# on the H200 (2026-12-04b, bench/results/profile_copy_vec4_h200_2026-12-04b.json): the
# irregular GEMM's two aligned copies (3001 x 4093 -> 3004 x 4096, 4093 x 2999 -> 4096 x
# 3000) 0.080 ms with VEC 1, 0.057 with VEC 4; level1/013 1.827 -> 1.806 ms.
COPY_VEC = 4


def _materialize(src, materialized, out, tnode, knobs=None):
    """A copy of the node's input (computed inline by the loader) into its own buffer:
    the elementwise template with the loader's value as the epilogue's acc. VEC 4 (the
    default where the copy holds a multiple of 4 four-byte elements): `load_x4` computes
    four consecutive elements, their index arithmetic shared (Emitter.aligned), and
    they are stored 16 bytes at a time."""
    (x,) = tnode.inputs
    vec4 = out.numel % 4 == 0 and x.dtype == out.dtype and x.dtype in ("f32", "i32")
    knobs = {"VEC": COPY_VEC if vec4 else 1, **(knobs or {})}
    _require(knobs["VEC"] == 1 or vec4, knobs,
             "VEC 4 copies need a multiple of 4 elements of f32 or i32")
    em = Emitter(src, materialized)
    # the kernel's key (what it computes, whatever the knobs) names the scalar loader
    functions = key = em.function("load_x", ["gi: i32"], x.dtype,
                                  em.value(x, Index(x.shape, flat="gi")))
    final = "load_x(gi)"
    if knobs["VEC"] == 4:
        em, vals = Emitter(src, materialized), []
        for e in range(4):
            flat = f"(gi + {e})" if e else "gi"
            em.aligned[flat] = ("gi", e)
            vals.append(em.value(x, Index(x.shape, flat=flat)))
        t = f"vec4<{wgsl_type(x.dtype)}>"
        functions = em.function("load_x4", ["gi: i32"], t, f"{t}({', '.join(vals)})")
        final = "load_x4(gi)"
    tmpl, slots, grid, knobs = _elementwise(src, materialized, out, tnode, knobs, final)
    return tmpl, {**slots, "functions": functions, "key_functions": key, "final": final}, \
        grid, knobs


def _per_dim(**lists) -> dict:
    """Slots for the three spatial dims: NAME=[d, h, w] gives NAME_D, NAME_H, NAME_W."""
    return {f"{k}_{a}": v for k, vals in lists.items() for a, v in zip("DHW", vals)}


def pointwise_knobs() -> dict:
    """Templates with one invocation per output element (conv): 256 per workgroup."""
    return {"WG": 256}


def pointwise_space() -> list[dict]:
    return [{"WG": wg} for wg in (64, 128, 256)]


def conv_knobs(transposed: bool, out_w: int) -> dict:
    """The direct convolution: 256 invocations per workgroup, OPT outputs (adjacent along
    the last dim) per invocation. OPT 4 was measured on the H200 (bench/results/
    conv_direct_opt*_h200.json) at 1.7-2.9x the speed of OPT 1: depthwise 0.65 -> 0.23 ms,
    grouped 0.49 -> 0.27 ms. A row narrower than 4 takes the widest OPT it fills, and a
    transposed convolution computes one output per invocation."""
    opt = 1 if transposed else max(o for o in (1, 2, 4) if o <= max(out_w, 1))
    return {"WG": 256, "OPT": opt}


def conv_space(transposed: bool) -> list[dict]:
    opts = (1,) if transposed else (1, 2, 4)
    return [{"WG": k["WG"], "OPT": opt} for k in pointwise_space() for opt in opts]


def _conv_direct_code(opt: int) -> dict:
    """The generated parts of kernels/conv.wgsl for OPT outputs per invocation."""
    accs = "\n".join(f"    var acc{j} = 0.0;" for j in range(opt))
    stores = "\n".join(f"    if (ow0 + {j} < $OUT_W) {{ let gi = base + {j}; let acc = acc{j};"
                        f" $STORE }}" for j in range(opt))
    pad = " " * 16
    if opt == 1:  # the tap's column is tested once for all the input channels
        tap = (f"{pad}let iw = ow0 * $S_W - $P_W + kw * $DIL_W;\n"
               f"{pad}if (iw < 0 || iw >= $IN_W) {{\n{pad}    continue;\n{pad}}}\n"
               f"{pad}for (var ci = 0; ci < $CG; ci += 1) {{\n"
               f"{pad}    acc0 = fma(load_x(n, c0 + ci, id, ih, iw), "
               f"load_w(co, ci, kd, kh, kw), acc0);\n{pad}}}")
    else:
        lines = [f"{pad}for (var ci = 0; ci < $CG; ci += 1) {{",
                 f"{pad}    let wv = load_w(co, ci, kd, kh, kw);"]
        for j in range(opt):
            lines.append(f"{pad}    {{ let iw = (ow0 + {j}) * $S_W - $P_W + kw * $DIL_W;"
                         f" if (iw >= 0 && iw < $IN_W) {{ acc{j} = fma(load_x(n, c0 + ci,"
                         f" id, ih, iw), wv, acc{j}); }} }}")
        tap = "\n".join(lines + [f"{pad}}}"])
    return dict(ACCUMULATORS=accs, TAP=tap, STORES=stores)


def _conv(src, materialized, out, tnode, knobs=None):
    x, w = tnode.inputs
    c, size = x.shape[1], x.shape[2:]
    co, out_size = tnode.out.shape[1], tnode.out.shape[2:]
    at = tnode.attrs
    groups, stride, dil = at["groups"], at["stride"], at["dilation"]
    functions = _loader(src, materialized, "load_x", x) + _loader(src, materialized, "load_w", w)
    knobs = _merge(conv_knobs(at["transposed"], out_size[-1]), knobs)
    opt = knobs["OPT"]
    _require(opt in ((1,) if at["transposed"] else (1, 2, 4)), knobs,
             "OPT must be 1, 2 or 4 (1 for a transposed convolution)")
    per_dim = _per_dim(OUT=out_size, IN=size, K=w.shape[2:], S=stride, P=at["padding"], DIL=dil)
    owb = -(-out_size[2] // opt)
    numel = tnode.out.numel // out_size[2] * owb
    grid, row = grid_1d(numel, _check_wg(knobs))
    slots = dict(functions=functions, WG=knobs["WG"], ROW=row, NUMEL=numel, CO=co,
                 CG=c // groups, COG=co // groups, OWB=owb, OPT=opt, **per_dim)
    if not at["transposed"]:
        named = {k: v for k, v in slots.items() if k.isupper()}  # $STORE stays for later
        code = {k: string.Template(v).safe_substitute(named)
                for k, v in _conv_direct_code(opt).items()}
        return "conv", {**slots, **code}, grid, knobs
    # The taps k of a transposed convolution that reach an output are those with
    # k * DIL = o + P (mod S): with g = gcd(S, DIL) they exist when g divides o + P and
    # are k0 + j * S / g, k0 = (o + P) / g * INV mod S / g, INV the inverse of DIL / g.
    gcd = [math.gcd(s, d) for s, d in zip(stride, dil)]
    step = [s // g for s, g in zip(stride, gcd)]
    inv = [pow(d // g, -1, m) if m > 1 else 0 for d, g, m in zip(dil, gcd, step)]
    slots.update(_per_dim(G=gcd, M=step, INV=inv))
    return "conv_transpose", slots, grid, knobs


def pool_knobs(tnode: Node) -> dict:
    """The pool kernel: 256 invocations per workgroup; 4 outputs per invocation loaded 16
    bytes at a time (OPT 4, VEC 4) where `_pool_vec_ok` and the output rows hold 4, else
    one output per invocation with scalar loads. Measured on the H200 (2026-12-01m,
    bench/results/memory_variants_pool_h200_2026-12-01m.json), 3 x 3 stride-2 max pool
    of 32 x 64 x 256 x 256 (PyTorch 0.54 ms): OPT 1 0.258 ms (2.6 TB/s); OPT 2, 4, 8
    with scalar loads 0.228, 0.256, 0.474; with VEC 4 0.215, **0.178** (3.78 TB/s, 88%
    of the copy bandwidth), 0.201."""
    if tnode.out.shape[3] >= 4 and _pool_vec_ok(tnode, 4):
        return {"WG": 256, "OPT": 4, "VEC": 4}
    return {"WG": 256, "OPT": 1, "VEC": 1}


POOL_OPTS = (1, 2, 4, 8)


def _pool_row(tnode: Node) -> tuple[int, int, int, int] | None:
    """The windows along the last dim as (stride, taps, dilation, padding) when their
    size and spacing are static (every regular pooling; adaptive pooling where the
    output size divides the input's: windows of I / O taps, I / O apart), else None:
    OPT > 1 needs them (the union of its outputs' windows is then known)."""
    at, i, o = tnode.attrs, tnode.inputs[0].shape[3], tnode.out.shape[3]
    if not at["adaptive"]:
        return at["stride"][2], at["kernel"][2], at["dilation"][2], at["padding"][2]
    return (i // o, i // o, 1, 0) if i % o == 0 else None


def _pool_vec_ok(tnode: Node, opt: int) -> bool:
    """VEC 4 needs OPT > 1, rows of whole vec4s and a window offset that is the same in
    every invocation modulo 4 (OPT * stride a multiple of 4)."""
    row = _pool_row(tnode)
    return (opt > 1 and row is not None and tnode.inputs[0].shape[3] % 4 == 0
            and opt * row[0] % 4 == 0)


def pool_space(tnode: Node) -> list[dict]:
    """OPT 1 at WG 64, 128 and 256 (the former space); OPT 2, 4 and 8 (up to the row's
    width) at WG 128 and 256, each with scalar loads and, where `_pool_vec_ok`, vec4
    loads. Adaptive pooling whose windows along the last dim vary in size or spacing
    (the output size not dividing the input's) has OPT 1 only."""
    out_w = tnode.out.shape[3]
    opts = [o for o in POOL_OPTS[1:] if o <= out_w] if _pool_row(tnode) else []
    return ([{"WG": wg, "OPT": 1, "VEC": 1} for wg in (64, 128, 256)]
            + [{"WG": wg, "OPT": opt, "VEC": vec} for wg in (128, 256) for opt in opts
               for vec in (1, 4) if vec == 1 or _pool_vec_ok(tnode, opt)])


def _pool_columns(src, materialized, x: Value, opt: int, vec: int,
                  row: tuple[int, int, int, int]) -> tuple[str, str, str]:
    """The COLUMNS and ROW_TAPS code of kernels/pool.wgsl for OPT > 1 (ROW_TAPS without
    its folds: `_pool` appends them) and any extra loader: the columns w0 + c of the
    union of the OPT windows along the last dim, loaded once per window row into
    x<c> (their clamped index and whether they lie in the input set once, in COLUMNS)."""
    s, k, dil, p = row
    iw = x.shape[3]
    cols = sorted({j * s + t * dil for j in range(opt) for t in range(k)})
    columns = [f"    let okw{c} = w0 + {c} >= 0 && w0 + {c} < {iw};" for c in cols]
    pad, loads, extra = " " * 12, [], ""
    if vec == 1:
        columns += [f"    let cw{c} = clamp(w0 + {c}, 0, {iw - 1});" for c in cols]
        loads = [f"{pad}let x{c} = load_x(l, cd, ch, cw{c});" for c in cols]
        return "\n".join(columns), "\n".join(loads), extra
    # w0 + P = ow0 * S is a multiple of 4 (_pool_vec_ok): column c lies in vec4
    # b0 + (c - P) // 4, lane (c - P) % 4, for every invocation. A vec4 is wholly inside
    # the row or wholly outside it (IN_W % 4 == 0); one outside is loaded at a clamped
    # index and its columns do not count.
    blocks = {b: f"{'m' if b < 0 else ''}{abs(b)}" for b in sorted({(c - p) // 4 for c in cols})}
    columns.append(f"    let b0 = (w0 + {p}) / 4;")
    columns += [f"    let cb{n} = clamp(b0 {'-' if b < 0 else '+'} {abs(b)}, 0, {iw // 4 - 1});"
                for b, n in blocks.items()]
    names = {b: f"x4_{n}" for b, n in blocks.items()}
    plain = vec4_view(x, materialized, 3)  # rows starting on 16 bytes, contiguous
    if plain is not None:  # a plain buffer: 16-byte loads from its vec4 view
        root, offset, st = plain
        view = src.view4(root)
        loads.append(f"{pad}let r4 = ({offset} + l * {st[0]} + cd * {st[1]} + ch * {st[2]}) / 4;")
        loads += [f"{pad}let {names[b]} = {view}[r4 + cb{n}];" for b, n in blocks.items()]
    else:  # computed columns (a fused prologue, a strided view): 4 per loader call
        extra = _loader(src, materialized, "load_x4", x, lanes=3)
        loads += [f"{pad}let {names[b]} = load_x4(l, cd, ch, cb{n} * 4);"
                  for b, n in blocks.items()]
    loads += [f"{pad}let x{c} = {names[(c - p) // 4]}.{XYZW[(c - p) % 4]};" for c in cols]
    return "\n".join(columns), "\n".join(loads), extra


def _pool(src, materialized, out, tnode, knobs=None):
    (x,) = tnode.inputs
    size, out_size = x.shape[1:], tnode.out.shape[1:]
    at = tnode.attrs
    op, kernel, pad = at["op"], at["kernel"], at["padding"]
    knobs = _merge(pool_knobs(tnode), knobs)
    opt, vec = knobs["OPT"], knobs["VEC"]
    row = _pool_row(tnode)
    _require(opt in POOL_OPTS, knobs, f"OPT must be one of {POOL_OPTS}")
    _require(opt == 1 or row is not None, knobs, "OPT > 1 needs windows of a static size "
             "and spacing along the last dim (adaptive: the output size dividing the input's)")
    _require(vec == 1 or (vec == 4 and _pool_vec_ok(tnode, opt)), knobs,
             "VEC must be 1, or 4 with OPT > 1, a last dim of whole vec4s and OPT * stride "
             "a multiple of 4")
    outs = ["od", "oh", "ow0"]
    taps = [f"i{a}" for a in "dhw"]
    if at["adaptive"]:  # output o of O pools [floor(o I / O), ceil((o + 1) I / O))
        start = [f"({o} * {i}) / {n}" for o, i, n in zip(outs, size, out_size)]
        end = [f"(({o} + 1) * {i} + {n - 1}) / {n}" for o, i, n in zip(outs, size, out_size)]
        count = [f"{a}1 - {a}0" for a in "dhw"]  # exactly the window's taps
        ok, index = ["true"] * 3, taps
    else:
        start = [f"{o} * {s} - {p}" for o, s, p in zip(outs, at["stride"], pad)]
        end = list(size)
        count = list(kernel)
        ok = [f"{t} >= 0 && {t} < {a}1" for t, a in zip(taps, "dhw")]
        index = [f"clamp({t}, 0, {i - 1})" for t, i in zip(taps, size)]
    step = row[0] if row else 0  # output j's window starts at w0 + j * step

    def w_start(j: int) -> str:
        return f"(w0 + {j * step})" if j else "w0"

    def fold(j: int) -> str:
        if op == "avg":
            return f"acc{j} = acc{j} + select(0.0, v, ok);"
        # the first maximum in window order; a NaN wins (as PyTorch), tested on its
        # bits: compilers may fold `v != v` to false
        return (f"if (ok && (best{j} < 0 || v > acc{j} || {is_nan('v')})) "
                f"{{ acc{j} = v; best{j} = (id * {size[1]} + ih) * {size[2]} + iw; }}")

    def finish(j: int) -> str:
        if op != "avg":
            return ""
        if at["divisor"]:
            divisor = str(at["divisor"])
        elif at["count_include_pad"]:  # the window clipped to the padded input
            divisor = " * ".join(f"(min({a0} + {k}, {i + p}) - {a0})" for a0, k, i, p in
                                 zip(("d0", "h0", w_start(j)), kernel, size, pad))
        else:
            divisor = f"count{j}"
        return f"acc{j} = acc{j} / f32({divisor}); "

    init = "0.0" if op == "avg" else "bitcast<f32>(0xff800000u)"
    accs = "\n".join(f"    var acc{j}: f32 = {init};\n    var best{j} = -1;\n"
                     f"    var count{j} = 0;" for j in range(opt))
    # load_x first: its text (the key's) is then the same whatever the knobs bind
    load_x = _loader(src, materialized, "load_x", x)
    pad12, extra = " " * 12, ""
    if opt == 1:  # the loop over the window's taps
        columns = ""
        row_taps = "\n".join([
            f"{pad12}for (var kw = 0; kw < {count[2]}; kw += 1) {{",
            f"{pad12}    let iw = w0 + kw * {at['dilation'][2]};",
            f"{pad12}    let ok = ok_h && {ok[2]};",
            f"{pad12}    let v = load_x(l, cd, ch, {index[2]});",
            f"{pad12}    {fold(0)}",
            f"{pad12}    count0 += select(0, 1, ok);",
            f"{pad12}}}"])
    else:  # the union's columns, then each output's taps from them
        columns, loads, extra = _pool_columns(src, materialized, x, opt, vec, row)
        s, k, dil, _ = row
        folds = [f"{pad12}{{ let iw = w0 + {c}; let ok = ok_h && okw{c}; let v = x{c};\n"
                 f"{pad12}  {fold(j)}\n{pad12}  count{j} += select(0, 1, ok); }}"
                 for j in range(opt) for c in (j * s + t * dil for t in range(k))]
        row_taps = "\n".join([loads] + folds)
    res = "best" if op == "argmax" else "acc"
    stores = "\n".join(
        f"    {'' if j == 0 else f'if (ow0 + {j} < {out_size[2]}) '}{{ {finish(j)}"
        f"let gi = base + {j}; let res = {res}{j}; $STORE }}" for j in range(opt))
    owb = -(-out_size[2] // opt)
    numel = tnode.out.numel // out_size[2] * owb
    grid, grid_row = grid_1d(numel, _check_wg(knobs))
    slots = dict(functions=load_x + extra, key_functions=load_x, WG=knobs["WG"], ROW=grid_row,
                 NUMEL=numel, OWB=owb, OPT=opt, final="res", ACCUMULATORS=accs,
                 COLUMNS=columns, ROW_TAPS=row_taps, STORES=stores,
                 **_per_dim(OUT=out_size, DIL=at["dilation"], START=start,
                            END=end, TAPS=count, OK=ok, AT=index))
    return "pool", slots, grid, knobs


def _matmul_space(out, tnode):
    a, b = tnode.inputs
    return matmul_space(a.shape[1], b.shape[2], a.shape[2])


def _attention_space(out, tnode):
    q, _, v = tnode.inputs[:3]
    return attention_space(q.shape[2], v.shape[2])


# -- the accelerated precision mode: matmuls on the cooperative-matrix units -------------
PRECISIONS = ("strict", "accelerated")
_PRECISION: ContextVar[str] = ContextVar("kernelwright_precision", default="strict")


@contextmanager
def precision(mode: str) -> Iterator[None]:
    """Within this context kernels are generated for precision `mode`: "strict" (fp32
    everywhere) or "accelerated" (matmuls with f16 operands and f32 accumulation on the
    cooperative-matrix units, `matmul_coop`). Which device can run accelerated kernels
    is the compiler's decision (compiler.accelerated_unavailable)."""
    if mode not in PRECISIONS:
        raise ValueError(f"precision {mode!r} is none of {PRECISIONS}")
    token = _PRECISION.set(mode)
    try:
        yield
    finally:
        _PRECISION.reset(token)


def template_kind(tnode: Node | None) -> str:
    """The template that computes `tnode` (None: the elementwise kernel). In the
    accelerated mode an f32 matmul with M, N and K of at least one 16 x 16 x 16 tile goes
    to `matmul_coop`; smaller ones stay exact (fp32 `matmul`)."""
    if tnode is None:
        return "elementwise"
    if tnode.op == "matmul" and _PRECISION.get() == "accelerated":
        a, b = tnode.inputs
        if (tnode.out.dtype == "f32" and min(a.shape[1], a.shape[2], b.shape[2]) >= COOP_TILE):
            return "matmul_coop"
    return tnode.op


COOP_TILE = 16  # the cooperative matrices' side: 16 x 16 f16 operands, 16 x 16 f32 results
COOP_SUBGROUP = 32  # invocations per subgroup the template is written for (NVIDIA's warp)
# How the staged tiles meet the cooperative loads: the WGSL builtins used and the
# memory order they are taken to read. naga's coopLoad reads column-major (tiles laid
# out [k][m] and [n][k]); "row" and "rowT" lay the tiles out row-major for a coopLoad
# or a coopLoadT that reads rows (bench/coop_matmul.py tries all three on a device).
COOP_LOADS = {"col": ("coopLoad", "coopStore", False), "row": ("coopLoad", "coopStore", True),
              "rowT": ("coopLoadT", "coopStoreT", True)}
COOP_WARP_TILES = ((64, 64, 32, 32), (128, 64, 64, 32), (64, 128, 32, 64),
                   (128, 128, 64, 32), (128, 128, 32, 64), (128, 128, 64, 64))
COOP_BKS = (16, 32, 64)
COOP_WORKGROUP_BYTES = 49152  # the space keeps to 48 KiB (the defaults use 27 KiB)


def matmul_coop_knobs(m: int, n: int) -> dict:
    """128 x 128 tiles of 8 subgroups with 64 x 32 warp tiles for products of at least
    128 x 128, else 64 x 64 tiles of 4 subgroups with 32 x 32; BK 32; rows of the
    staged tiles padded by 8 f16 (16 bytes)."""
    bm, bn, wm, wn = (128, 128, 64, 32) if m >= 128 and n >= 128 else (64, 64, 32, 32)
    return {"BM": bm, "BN": bn, "WM": wm, "WN": wn, "BK": 32, "PAD": 8, "LOAD": "col"}


def _coop_layout(knobs: dict) -> dict:
    """Strides and sizes of the staged tiles for the knobs' LOAD (f16 elements)."""
    bm, bn, bk, pad = knobs["BM"], knobs["BN"], knobs["BK"], knobs["PAD"]
    load, store, row_major = COOP_LOADS[knobs["LOAD"]]
    if row_major:  # tile_a [m][k], tile_b [k][n]
        sa, sb = bk + pad, bn + pad
        a_words, b_words = bm * sa, bk * sb
    else:  # tile_a [k][m], tile_b [n][k]
        sa, sb = bm + pad, bk + pad
        a_words, b_words = bk * sa, bn * sb
    nsg = (bm // knobs["WM"]) * (bn // knobs["WN"])
    return dict(load=load, store=store, row_major=row_major, sa=sa, sb=sb, a_words=a_words,
                b_words=b_words, nsg=nsg, bytes=2 * (a_words + b_words) + 4 * nsg * 256)


def matmul_coop_space(m: int, n: int, k: int, load: str = "col") -> list[dict]:
    """Warp tilings and BK (the load order and padding stay the defaults'): tiles at
    most twice the product's sides (rounded up to a power of two), BK at most K's."""
    space = []
    for bm, bn, wm, wn in COOP_WARP_TILES:
        for bk in COOP_BKS:
            knobs = {"BM": bm, "BN": bn, "WM": wm, "WN": wn, "BK": bk, "PAD": 8, "LOAD": load}
            if (bm <= 2 * _pow2_ceil(m) and bn <= 2 * _pow2_ceil(n)
                    and bk <= max(16, _pow2_ceil(k))
                    and _coop_layout(knobs)["bytes"] <= COOP_WORKGROUP_BYTES):
                space.append(knobs)
    return space


def _matmul_coop(src, materialized, out, tnode, knobs=None):
    a, b = tnode.inputs
    nb, m, k = a.shape
    n = b.shape[2]
    knobs = _merge(matmul_coop_knobs(m, n), knobs)
    bm, bn, wm, wn, bk, pad = (knobs[x] for x in ("BM", "BN", "WM", "WN", "BK", "PAD"))
    t = COOP_TILE
    _require(knobs["LOAD"] in COOP_LOADS, knobs, f"LOAD must be one of {sorted(COOP_LOADS)}")
    _require(all(isinstance(v, int) and v >= 1 for v in (bm, bn, wm, wn, bk)), knobs,
             "tile sizes must be positive integers")
    _require(wm % t == 0 and wn % t == 0 and bk % t == 0, knobs,
             f"WM, WN and BK must be multiples of {t}")
    _require(bm % wm == 0 and bn % wn == 0, knobs, "WM must divide BM and WN divide BN")
    _require(isinstance(pad, int) and pad >= 0 and pad % 8 == 0, knobs,
             "PAD must be a multiple of 8 (16 bytes: cooperative loads want aligned rows)")
    lay = _coop_layout(knobs)
    nsg, wg = lay["nsg"], lay["nsg"] * COOP_SUBGROUP
    _require(wg <= MAX_WG, knobs, f"more than {MAX_WG} invocations")
    if nb > MAX_GRID:
        raise CompileError(f"matmul batch {nb} exceeds the grid limit {MAX_GRID}")
    functions = (_loader(src, materialized, "load_a", a) + _loader(src, materialized, "load_b", b))
    sa, sb, row_major = lay["sa"], lay["sb"], lay["row_major"]
    # Staging: consecutive invocations walk the operand's contiguous dim.
    a_idx = ("kk", "mm", bm) if _contiguous_dim(a, materialized) == 1 else ("mm", "kk", bk)
    b_idx = ("nn", "kk", bk) if _contiguous_dim(b, materialized) == 1 else ("kk", "nn", bn)
    a_at = "mm * {s} + kk" if row_major else "kk * {s} + mm"
    b_at = "kk * {s} + nn" if row_major else "nn * {s} + kk"
    operands = (
        ("a", a_idx, bm * bk, f"m0 + mm < {m} && k0 + kk < {k}", "load_a(b, m0 + mm, k0 + kk)",
         a_at.format(s=sa)),
        ("b", b_idx, bk * bn, f"k0 + kk < {k} && n0 + nn < {n}", "load_b(b, k0 + kk, n0 + nn)",
         b_at.format(s=sb)))
    loads = []
    for name, (hi, lo, width), count, cond, call, at in operands:
        for u in range(-(-count // wg)):
            load = (f"let t = lin + {u * wg}; let {hi} = t / {width}; let {lo} = t % {width};"
                    f" var v = 0.0; if ({cond}) {{ v = {call}; }} tile_{name}[{at}] = f16(v);")
            if (u + 1) * wg > count:  # a last round that only part of the workgroup loads
                load = f"if (lin + {u * wg} < {count}) {{ {load} }}"
            loads.append(f"        {{ {load} }}")
    ld, st = lay["load"], lay["store"]
    a_frag = "(wm + {o}) * {s} + kk" if row_major else "kk * {s} + wm + {o}"
    b_frag = "kk * {s} + wn + {o}" if row_major else "(wn + {o}) * {s} + kk"
    ti, tj = wm // t, wn // t
    mult = [f"            let a{i} = {ld}<coop_mat16x16<f16, A>>"
            f"(&tile_a[{a_frag.format(o=i * t, s=sa)}], {sa}u);" for i in range(ti)]
    mult += [f"            let b{j} = {ld}<coop_mat16x16<f16, B>>"
             f"(&tile_b[{b_frag.format(o=j * t, s=sb)}], {sb}u);" for j in range(tj)]
    mult += [f"            acc_{i}_{j} = coopMultiplyAdd(a{i}, b{j}, acc_{i}_{j});"
             for i in range(ti) for j in range(tj)]
    accs = [f"    var acc_{i}_{j} = {ld}<coop_mat16x16<f32, C>>(&tile_c[cbase], 16u);"
            for i in range(ti) for j in range(tj)]
    cell = "r * 16 + c" if row_major else "c * 16 + r"
    stores = []
    for i in range(ti):
        for j in range(tj):
            stores += [
                f"    {st}(acc_{i}_{j}, &tile_c[cbase], 16u);",
                "    workgroupBarrier();",
                f"    for (var e = i32(lane); e < 256; e += {COOP_SUBGROUP}) {{",
                f"        let r = e / 16; let c = e % 16;"
                f" let m = m0 + wm + {i * t} + r; let n = n0 + wn + {j * t} + c;",
                f"        if (m < {m} && n < {n}) {{ let gi = (b * {m} + m) * {n} + n;"
                f" let acc = tile_c[cbase + {cell}]; $STORE }}",
                "    }",
                "    workgroupBarrier();"]
    slots = dict(functions=functions, M=m, N=n, K=k, BM=bm, BN=bn, BK=bk, WG=wg, NSG=nsg,
                 WARPS_N=bn // wn, WM=wm, WN=wn, A_WORDS=lay["a_words"], B_WORDS=lay["b_words"],
                 ACCUMULATORS="\n".join(accs), LOAD_TILES="\n".join(loads),
                 MULTIPLY="\n".join(mult), STORE_BLOCK="\n".join(stores),
                 workgroup_bytes=lay["bytes"])
    return "matmul_coop", slots, (math.ceil(n / bn), math.ceil(m / bm), nb), knobs


def _matmul_coop_space(out, tnode):
    a, b = tnode.inputs
    return matmul_coop_space(a.shape[1], b.shape[2], a.shape[2])


# Each template: its fill function (knobs -> template name, slots, grid, knobs used)
# and its search space for one kernel.
TEMPLATES = {
    "elementwise": (_elementwise, lambda out, tnode: elementwise_space(
        out.numel, tiled=sum(size > 1 for size in out.shape) >= 2)),
    "materialize": (_materialize, lambda out, tnode: [
        k for k in elementwise_space(out.numel) if k["VEC"] == 1 or (
            tnode.inputs[0].dtype == out.dtype and out.dtype in ("f32", "i32"))]),
    "reduce": (_reduce, lambda out, tnode: reduce_space(*tnode.inputs[0].shape)),
    "rows": (None, None),  # a row kernel: generated with its phases (fill_kernel)
    "scan": (_scan, lambda out, tnode: scan_space(tnode.inputs[0].shape[1],
                                                  tnode.inputs[0].shape[2],
                                                  tnode.inputs[0].numel
                                                  // max(1, tnode.inputs[0].shape[1]))),
    "matmul": (_matmul, _matmul_space),
    "matmul_coop": (_matmul_coop, _matmul_coop_space),
    "attention": (_attention, _attention_space),
    "conv": (_conv, lambda out, tnode: conv_space(tnode.attrs["transposed"])),
    "pool": (_pool, lambda out, tnode: pool_space(tnode)),
}
