"""The kernel backend: fill a WGSL template for one scheduled kernel (its loaders,
epilogue and knobs). This module is the registry the scheduler and the tuner use; each
template family has its own module beside its .wgsl files (elementwise, rows, scan,
sort, matmul, matmul_coop, attention, attention_coop, attention_decode, attention_grad,
conv, pool, put:
knobs, search space, cost model, generator; gemv: products of few rows), common.py what
they share, cuts.py how a product is cut for the matmul and the gemv.

`generate(out, tnode, ...)` picks the template by the group's template node (none:
the elementwise kernel) and the compile's options (options.CompileOptions: the
precision, the waves), generates the loader functions for the node's inputs and the
epilogue for the stored value (codegen.Emitter), chooses the knobs (tile sizes,
workgroup size, elements per invocation) and returns the WGSL text with its
bindings, dispatch grid, knobs and a stable key.

Knobs are data. Each template's fill function takes an optional `knobs` dict (names
as the template's slots: BM, BN, TM, TN, BK for the matmul; WG, EPT and VEC for
elementwise kernels; WG, TPR, VEC and ORDER for reductions and row kernels; ...);
knobs left out take the template's heuristic default (its family's `*_knobs`, the one
place for defaults), and a setting the template cannot run correctly is a
CompileError. `knob_space` lists a small, shape-keyed set of settings per template:
the autotuner's search space (tune/). The key (`KernelKey`: template, operand shapes,
and a digest of the generated functions, the template node's attributes and the
template's text) names the computation independently of the knobs, so that the
tuner's cache can say which knobs were fastest for it; `generate` asks the options'
chooser (compile()'s default: the tuning cache, tune.choose_knobs) for them.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property

from ..codegen.codegen import (
    HELPERS,
    KERNEL_DIR,
    KernelSource,
    NotInPlace,
    template,
    to_buffer,
    with_f32_bits,
)
from ..dtypes import is_packed
from ..ir.ir import CompileError, Node, Value
from ..options import CompileOptions
from .attention import _attention, _attention_space, attention_config, attention_space
from .attention_coop import _attention_coop, _attention_coop_space, attention_template
from .attention_decode import _attention_decode, _attention_decode_space, decode_splits
from .attention_grad import _attention_grad, _attention_grad_space, attention_grad_knobs
from .common import (
    MAX_GRID,
    MAX_WG,
    WORKGROUP_BYTES,
    Generated,
    KernelKey,
    Placement,
    epilogue_function,
    placed_functions,
    plain_strides,
)
from .conv import _conv, conv_knobs, conv_space
from .cuts import WavePlan, product_plan
from .elementwise import (
    Without,
    _elementwise,
    _materialize,
    elementwise_space,
    packed_space,
)
from .gemv import GEMV_ROW_MAX, _gemv, gemv_blocks, gemv_layout, gemv_node, gemv_space
from .matmul import (
    MATMUL_BK,
    MATMUL_LARGE_TILES,
    MATMUL_PLAIN_TILES,
    _matmul,
    _matmul_space,
    large_tiles,
    matmul_knobs,
    matmul_loads_once,
    matmul_space,
    matmul_tiles,
    matmul_wave_cost,
    matmul_wide,
    product_reads_window,
    reads_window,
)
from .matmul_coop import COOP_TILE, _matmul_coop, _matmul_coop_space, accelerates, matrix_unit
from .pool import _pool, pool_space
from .put import _put, put_space
from .recur import _recur, recur_space
from .rows import (
    ROW_CACHE,
    ROW_LIMIT,
    _reduce,
    _rows,
    reduce_space,
    row_kernel_fits,
    row_major,
    rows_space,
)
from .scan import _scan, scan_space
from .sort import SORT_LIMIT, _sort, _sort_space, sort_space

__all__ = [
    "COOP_TILE", "GEMV_ROW_MAX", "Generated", "KernelKey", "KernelRequest", "KnobChooser",
    "MATMUL_BK", "MATMUL_LARGE_TILES", "MATMUL_PLAIN_TILES", "MAX_GRID", "MAX_WG", "PLACES",
    "Placement", "ROW_CACHE", "ROW_LIMIT", "SORT_LIMIT", "STORES_PUTS",
    "TEMPLATES", "WORKGROUP_BYTES", "WavePlan", "Without", "attention_config",
    "attention_grad_knobs", "attention_space", "attention_template", "conv_knobs", "conv_space",
    "decode_splits", "elementwise_space", "fill_kernel", "gemv_node", "generate",
    "kernel_key", "knob_space", "large_tiles", "matmul_knobs", "matmul_loads_once", "matmul_space",
    "matmul_tiles", "matmul_wave_cost", "matmul_wide", "matrix_unit", "plain_strides", "pool_space",
    "product_loads", "product_plan", "product_reads_window", "put_space", "reads_window",
    "reduce_space", "row_kernel_fits", "row_major", "rows_space", "scan_space", "sort_space",
    "template_kind",
]


# The templates that store the new slices of the puts their loaders read inline
# (kernels/put.fused_puts): schedule.fuse joins a put to such a kernel alone.
STORES_PUTS = ("attention_decode",)
# The templates whose every store is the one store statement at a flat index gi
# ($STORE), which a Placement redirects into the value their kernels fill together.
PLACES = ("matmul", "matmul_coop", "gemv")


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
    options: CompileOptions = CompileOptions()  # what the kernel is generated for
    inplace: Value | None = None  # read from the output's buffer (fill_kernel)

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
        rest = knob_space(self.kind, self.out, self.tnode, self.phases, self.options)
        return [self.default.knobs] + [k for k in rest if k != self.default.knobs]

    def generate(self, knobs: dict | None) -> Generated:
        return fill_kernel(self.out, self.tnode, self.materialized, self.buffer_of, knobs,
                           self.phases, self.order, self.band_only, self.options,
                           self.inplace)


# A chooser returns knobs, a whole kernel (a `Generated`: an optimized kernel from the
# tuning cache), or None for the template's defaults.
KnobChooser = Callable[[KernelRequest], "dict | Generated | None"]


def generate(out: Value, tnode: Node | None, materialized, buffer_of,
             options: CompileOptions, phases=(), band_only=False,
             inplace: Value | None = None, stores=None,
             place: Placement | None = None) -> Generated:
    """The kernel that stores `out`, computed by template node `tnode` (None: a plain
    elementwise kernel, or with `phases` (pairs of a reduce node and the value its group
    stores) a row kernel: those reductions, then `out` over the same rows, or where
    tnode is a reduction of those rows, tnode's value per row; where tnode is a gemv's
    product, the statistics of its A rows: kernels/gemv.py), for `options` (the
    precision, the waves). Its knobs
    are the template's defaults unless `options.choose` returns others for the kernel's request
    (knobs that no longer fit the template, e.g. stored by an older version, are
    ignored), or a whole kernel to use instead. `band_only`: no element of `out` outside
    its band is ever read (ir.read_only_in_band), so the kernel may leave them unwritten.
    `inplace`: a value the kernel reads from its output's buffer; `stores`: state
    updates it computes inline and stores over their states (fill_kernel); `place`: where
    it stores `out` in place (fill_kernel): such a kernel takes the knobs chosen for the
    kernel storing `out` in its own buffer (what the tuner runs), never a whole kernel."""
    phases = tuple(phases)
    gen = fill_kernel(out, tnode, materialized, buffer_of, None, phases, (), band_only,
                      options, inplace, stores, place)
    if options.choose is None or gen.writes:  # the tuner runs a kernel's reads and output
        return gen
    own = gen if place is None else fill_kernel(out, tnode, materialized, buffer_of, None,
                                                phases, (), band_only, options, inplace)
    request = KernelRequest(own, out, tnode, materialized, buffer_of, phases, (), band_only,
                            options, inplace)
    knobs = options.choose(request)
    if isinstance(knobs, Generated):
        if place is None:
            return knobs
        knobs = None  # (it stores into its own buffer)
    if knobs and knobs != gen.knobs:
        try:
            gen = fill_kernel(out, tnode, materialized, buffer_of, knobs, phases, (),
                              band_only, options, inplace, place)
        except CompileError:
            pass
    return gen


def fill_kernel(out: Value, tnode: Node | None, materialized, buffer_of,
                knobs: dict | None = None, phases=(), order=(), band_only=False,
                options: CompileOptions | None = None,
                inplace: Value | None = None, stores=None,
                place: Placement | None = None) -> Generated:
    """Generate the kernel with the given knobs (missing ones: the defaults) for
    `options` (None: the defaults; its chooser is not asked: generate asks it). `order`:
    values bound as its first reads in this order (another kernel's binding order, for a
    rewrite that must bind the same buffers as the kernel it replaces), whether or not
    the kernel reads them. `inplace`: a value whose buffer is the output's, which the
    kernel reads at the element it stores and then stores over (a state's update written
    over the state): a plain elementwise kernel only, else codegen.NotInPlace. `stores`:
    {new value: state} of state updates that the kernel computes inline and stores over
    their states at its own element (schedule.joining_updates; bound read_write between
    the views and the output: Generated.writes), likewise a plain elementwise kernel's
    whose output is not packed, reading each state only at that element. `place`: the
    kernel stores `out` into `place.root`'s buffer, each element where the placement puts
    it (computed there by `placed`), none where it puts it nowhere: a template of PLACES
    only, else a CompileError."""
    options = options or CompileOptions()
    stores = dict(stores or {})
    src = KernelSource(buffer_of, inplace, stores)
    src.reads = list(order)
    src.band_only = band_only
    # phases make a row kernel, or a gemv's row statistics (kernels/gemv.py)
    kind = template_kind(tnode, options)
    kind = "gemv" if phases and kind == "gemv" else "rows" if phases else kind
    if kind not in TEMPLATES:
        raise CompileError(f"no kernel template for '{kind}'")
    if inplace is not None and (kind != "elementwise" or tnode is not None):
        raise NotInPlace(f"a {kind} kernel does not read its output")
    if stores and (kind != "elementwise" or tnode is not None or is_packed(out.stored)):
        raise NotInPlace(f"a {kind} kernel of {out.stored} does not store state updates")
    if place is not None and (kind not in PLACES or phases):
        raise CompileError(f"a {kind} kernel does not store in place into another value")
    epi = "" if kind in ("rows", "reduce", "put") else epilogue_function(  # they write their own
        src, materialized, out, tnode.out if tnode else None,
        tnode.out.dtype if tnode else out.dtype)
    if kind == "gemv":
        tmpl, slots, grid, used = _gemv(src, materialized, out, tnode, knobs, options, phases)
    elif phases:  # a reduction (tnode) reading reductions of its rows is the last phase
        last = [] if tnode is None else [(tnode, out)]
        tmpl, slots, grid, used = _rows(src, materialized, out, [*phases, *last],
                                        tnode is None, knobs)
    else:
        tmpl, slots, grid, used = TEMPLATES[kind][0](src, materialized, out, tnode, knobs,
                                                     options)
    if src.puts and kind not in STORES_PUTS:
        raise CompileError(f"a {kind} kernel does not store the puts it reads inline")
    if any(not any(w is v for w in src.writes) for v in stores):
        raise NotInPlace("a state update the kernel was to store is not computed by it")
    workgroup_bytes = slots.pop("workgroup_bytes", 0)
    own_epi = slots.pop("epilogue", epi)  # a template's own (the transposing tile's, by dims)
    result = f"epilogue({slots.pop('final', 'acc')}, gi)" if tnode else "epilogue(gi)"
    store = f"out[gi] = {to_buffer(result, out.dtype)};"
    stored = out
    if place is not None:  # its functions before the bindings (they may read more)
        placed = placed_functions(src, materialized, place, out)
        epi, own_epi = epi + placed, own_epi + placed
        stored = place.root
        store = (f"{{ let oi = place(gi); if (oi >= 0) {{ out[oi] = "
                 f"{to_buffer(f'placed({result}, oi)', stored.dtype)}; }} }}")
    helpers = "".join(HELPERS[h] for h in sorted(src.helpers))
    body = slots.pop("functions")
    # the key is what the kernel computes, whatever the knobs: a template whose functions
    # vary with its knobs (the matmul's vec4 loaders) passes knob-free ones for it
    key_body = slots.pop("key_functions", body)
    functions, key_functions = helpers + body + own_epi, helpers + key_body + epi
    # Generated slot text may itself place the store statement ("$STORE").
    slots = {k: v.replace("$STORE", store) if isinstance(v, str) else v for k, v in slots.items()}
    source = with_f32_bits(template(tmpl).substitute(
        BINDINGS=src.bindings(stored), FUNCTIONS=functions, STORE=store, **slots))
    # a kernel that may skip the elements outside the band computes less than the whole
    key_functions += "band only" if band_only else ""
    key = kernel_key(kind, out, tnode, src.reads, key_functions)
    return Generated(kind, source, list(src.reads), grid, key, used, list(src.views),
                     workgroup_bytes, writes=list(src.writes))


def kernel_key(kind: str, out: Value, tnode: Node | None, reads: list[Value],
               functions: str) -> KernelKey:
    """Template, operand shapes (a template's inputs, else the buffers read) and a digest
    of everything else that decides what the kernel computes: the generated functions
    (loaders, epilogue), the template node's attributes and the template files."""
    operands = tnode.inputs if tnode else reads
    bucket = " ".join(f"{v.stored}[{','.join(map(str, v.shape))}]" for v in operands)
    bucket += f" -> {out.stored}[{','.join(map(str, out.shape))}]"
    attrs = json.dumps(tnode.attrs, sort_keys=True, default=str) if tnode else ""
    text = "\n".join((functions, attrs, _template_text(kind)))
    return KernelKey(kind, bucket.strip(), hashlib.sha1(text.encode()).hexdigest()[:16])


@cache
def _template_text(kind: str) -> str:
    names = {"reduce": ("rows",), "conv": ("conv", "conv_transpose"),
             "scan": ("scan", "scan_staged", "scan_regs", "scan_sums", "scan_rake",
                      "scan_cols"),
             "sort": ("sort", "sort_merge", "sort_load_values", "sort_load_pairs",
                      "sort_store_first", "sort_store_pairs"),
             "elementwise": ("elementwise", "transpose"),
             "gemv": ("gemv", "gemv_reduce"),
             "put": ("elementwise", "put_step", "put_position", "latest"),
             "materialize": ("elementwise",),
             "attention_grad": ("attention_grad_q", "attention_grad_kv")}.get(kind, (kind,))
    return "".join((KERNEL_DIR / f"{name}.wgsl").read_text() for name in names)


def knob_space(kind: str, out: Value, tnode: Node | None, phases=(),
               options: CompileOptions | None = None) -> list[dict]:
    """The settings the tuner tries for one kernel (besides its defaults), generated for
    `options` (None: the defaults; the accelerated matmul's tiles are multiples of its
    matrix unit's)."""
    if phases and kind == "rows":
        space = rows_space(phases[0][0].inputs[0].shape[1], len(phases) + 1)
    else:
        space = TEMPLATES[kind][1](out, tnode, options or CompileOptions())
    if is_packed(out.stored) and kind in ("rows", "reduce"):  # whole words (kernels.rows)
        rows = out.numel if tnode is None else math.prod(tnode.out.shape)
        space = [{**k, "VEC": 2} if tnode is None and k["VEC"] == 1 else k for k in space
                 if tnode is None or rows == 1 or k["TPR"] < k["WG"]]
    return space


def stores_packed(tnode: Node) -> bool:
    """Whether template node `tnode`'s kernel can store its value (or its epilogue's) in a
    packed half buffer itself, whole u32 words: a reduction pairs its rows' values in
    workgroup memory (kernels.rows). The other templates store one element an invocation
    (a matmul's or convolution's adjacent outputs can belong to different invocations, or
    workgroups), so a packed copy of their value stays a kernel of its own."""
    return tnode.op == "reduce" and tnode.attrs["op"] != "moments"


def template_kind(tnode: Node | None, options: CompileOptions | None = None) -> str:
    """The template that computes `tnode` (None: the elementwise kernel) for `options`
    (None: the defaults, strict).
    A matmul of few rows per batch entry goes to `gemv` (kernels/gemv.takes_gemv: the
    same rule that keeps kernels/cuts.product_plan from splitting its K), in either
    precision: it is bound by B's bytes, not by multiply-adds.
    In the accelerated precision an f32 matmul with M, N and K of at least one matrix of
    the options' matrix unit goes to `matmul_coop`; smaller ones stay exact (fp32
    `matmul`); an attention goes where attention_template says (`attention_decode` for
    few queries, `attention_coop` on subgroup matrices), one that also stores its rows'
    log-sum-exp (training's, for attention_grad) to the strict `attention`."""
    if tnode is None:
        return "elementwise"
    if tnode.op == "attention" and not tnode.attrs.get("lse"):
        q, _, v = tnode.inputs[:3]
        return attention_template(options, q.shape[1], q.shape[2], v.shape[2]) or tnode.op
    if tnode.op == "matmul" and gemv_node(tnode):
        return "gemv"
    if tnode.op == "matmul" and options is not None and options.precision == "accelerated":
        a, b = tnode.inputs
        if tnode.out.dtype == "f32" and accelerates(options.matrix, a.shape[1], b.shape[2],
                                                    a.shape[2]):
            return "matmul_coop"
    return tnode.op


def product_loads(tnode: Node, materialized, waves=None) -> tuple[int, int]:
    """How many times the kernel of matmul node `tnode` loads each element of A, of B
    (its loaders compute a prologue that often), with the default knobs: the gemv
    (template_kind) stages A once per workgroup along N (gemv_blocks) and reads B once;
    the tiled matmul loads A once per tile column and B once per tile row (matmul_tiles
    with a prologue; tuned knobs or the cooperative template may tile otherwise)."""
    a, b = tnode.inputs
    nb, m, k = a.shape
    n = b.shape[2]
    if gemv_node(tnode):
        return gemv_blocks(n, k, nb, gemv_layout(b, materialized), waves), 1
    bm, bn, _, _ = matmul_tiles(m, n, nb, prologue=True, window=product_reads_window(tnode))
    return -(-n // bn), -(-m // bm)


# Each template: its fill function (knobs -> template name, slots, grid, knobs used)
# and its search space for one kernel (out, template node, options).
TEMPLATES = {
    "elementwise": (_elementwise, lambda out, tnode, options: packed_space(out.numel)
                    if is_packed(out.stored) else elementwise_space(
                        out.numel, tiled=sum(size > 1 for size in out.shape) >= 2)),
    "materialize": (_materialize, lambda out, tnode, options: [
        k for k in elementwise_space(out.numel) if k["VEC"] == 1 or (
            tnode.inputs[0].dtype == out.dtype and out.stored in ("f32", "i32"))]),
    "reduce": (_reduce, lambda out, tnode, options: reduce_space(*tnode.inputs[0].shape)),
    "rows": (None, None),  # a row kernel: generated with its phases (fill_kernel)
    "scan": (_scan, lambda out, tnode, options: scan_space(tnode.inputs[0].shape[1],
                                                  tnode.inputs[0].shape[2],
                                                  tnode.inputs[0].numel
                                                  // max(1, tnode.inputs[0].shape[1]))),
    "sort": (_sort, _sort_space),
    "matmul": (_matmul, lambda out, tnode, options: _matmul_space(out, tnode)),
    "gemv": (_gemv, gemv_space),
    "matmul_coop": (_matmul_coop, _matmul_coop_space),
    "attention": (_attention, lambda out, tnode, options: _attention_space(out, tnode)),
    "attention_coop": (_attention_coop, _attention_coop_space),
    "attention_decode": (_attention_decode, _attention_decode_space),
    "attention_grad": (_attention_grad, _attention_grad_space),
    "conv": (_conv, lambda out, tnode, options: conv_space(tnode.attrs["transposed"])),
    "pool": (_pool, lambda out, tnode, options: pool_space(tnode)),
    "put": (_put, lambda out, tnode, options: put_space(tnode.inputs[2].numel)),
    "recur": (_recur, lambda out, tnode, options: recur_space()),
}
