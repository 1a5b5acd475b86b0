"""The elementwise family: plain elementwise kernels, the transposing tile
(kernels/transpose.wgsl) and copies (materialize); knobs, space, generator."""

from __future__ import annotations

import math

from ..codegen.codegen import (
    Emitter,
    Index,
    buffer_address,
    pack_pair,
    pack_words,
    to_buffer,
)
from ..dtypes import element_type, is_packed, wgsl_type
from ..ir.ir import Value
from ..options import CompileOptions
from .common import (
    XYZW,
    check_wg,
    epilogue_function,
    grid_1d,
    lane_args,
    merge_knobs,
    require,
    snippet,
)


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
    invocations; the epilogue takes the element's index along each dim (`epilogue_function`
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
    compute = snippet("transpose_tile").substitute(
        ROWS=rows, TB=tb, SIZE_A=size_a, SIZE_B=size_b, STRIDE_B=strides[b], ROW=tb + 1,
        VALUE=value)
    epilogue = epilogue_function(src, materialized, out, None, out.dtype, names)
    return "transpose", dict(
        functions="", epilogue=epilogue, TILE_T=element_type(out.dtype), TILES_A=tiles_a,
        TILES_B=tiles_b, GROUPS=groups, GRID_X=gx, SIZE_A=size_a, SIZE_B=size_b,
        STRIDE_B=strides[b], TB=tb, ROW=tb + 1, ROWS=rows, STAGED=32 * (tb + 1),
        REST="\n".join(rest), COMPUTE=compute,
        STORE_TILE=f"{pad}out[gi] = tile[tx * {tb + 1} + ty + j];",
        workgroup_bytes=32 * (tb + 1) * 4), grid, knobs


def _elementwise(src, materialized, out, tnode, knobs, options: CompileOptions,
                 acc4: str = ""):
    """A plain elementwise kernel (tnode None), or a materialize node's copy (the store
    then follows the template's epilogue: one element per step, or with VEC 4 four, the
    vec4 `acc4` their accs)."""
    if tnode is None and is_packed(out.stored):
        return _packed_elementwise(src, out, knobs)
    dims = _transposed_dims(out, materialized) if tnode is None else None
    knobs = merge_knobs(elementwise_knobs(out.numel, dims is not None and not src.lanes), knobs)
    wg, ept, vec = check_wg(knobs), knobs["EPT"], knobs["VEC"]
    require(isinstance(ept, int) and ept >= 1, knobs, "EPT must be a positive integer")
    require(vec in (1, 4), knobs, "VEC is 1 or 4")
    require(knobs["TILE"] in (0, 1), knobs, "TILE is 0 or 1")
    if knobs["TILE"]:
        require(tnode is None and vec == 1 and ept in TILE_EPTS and wg in TILE_WGS, knobs,
                f"TILE 1 is for plain elementwise kernels, with VEC 1, EPT in {TILE_EPTS}"
                f" and WG in {TILE_WGS}")
        dims = dims or _any_tile_dims(out)
        require(dims is not None, knobs, "TILE 1 needs two output dims of size > 1")
        return _transpose_tile(src, materialized, out, dims, knobs)
    require(out.numel % vec == 0, knobs, "VEC 4 needs a multiple of 4 elements")
    require(vec == 1 or tnode is None or acc4, knobs,
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
        _, (args,) = lane_args(src, 1, "q", "gi")
        body = f"let gi = q;\n            out[gi] = {to_buffer(f'epilogue(gi{args})', out.dtype)};"
    else:
        src.out_vec4 = True
        loads, args = lane_args(src, 4, "q", "gi")
        vals = [to_buffer(f"epilogue(gi{f' + {j}' if j else ''}{a})", out.dtype)
                for j, a in enumerate(args)]
        body = "\n            ".join(
            ["let gi = q * 4;"] + loads
            + [f"out[q] = vec4<{element_type(out.dtype)}>({', '.join(vals)});"])
    return "elementwise", dict(functions="", WG=wg, ROW=row, THREADS=threads, EPT=ept,
                               STEPS=steps, BODY=body), grid, knobs


def packed_knobs(numel: int) -> dict:
    """elementwise_knobs for an output of a packed half type: VEC 4 (four elements a step,
    two words stored as a vec2<u32>) where the count is a multiple of 4, else VEC 2 (one
    word a step)."""
    return {**elementwise_knobs(numel), "VEC": 4 if numel % 4 == 0 else 2}


def packed_space(numel: int) -> list[dict]:
    """The tuner's settings for an elementwise kernel storing a packed half type."""
    return [{**k, "VEC": vec} for k in elementwise_space(numel) if k["VEC"] == 1
            for vec in ((2, 4) if numel % 4 == 0 else (2,))
            if k["EPT"] == 1 or numel >= k["EPT"] * k["WG"] * vec]


def _packed_elementwise(src, out, knobs):
    """A plain elementwise kernel whose output is of a packed half type: each step
    computes VEC consecutive elements (2: one u32 word; 4: two, stored as a vec2<u32>),
    so that every word is written whole by one invocation; with an odd count the last
    word's high half repeats the last element."""
    knobs = merge_knobs(packed_knobs(out.numel), knobs)
    wg, ept, vec = check_wg(knobs), knobs["EPT"], knobs["VEC"]
    require(isinstance(ept, int) and ept >= 1, knobs, "EPT must be a positive integer")
    require(knobs["TILE"] == 0 and (vec == 2 or vec == 4 and out.numel % 4 == 0), knobs,
            "a packed half output is stored whole words a step: VEC 2, or 4 for a multiple"
            " of 4 elements; TILE 0")
    src.helpers.add("half")
    steps = -(-out.numel // vec)
    threads = math.ceil(steps / ept)
    grid, row = grid_1d(threads, wg)
    if vec == 4:
        src.out_vec2 = True
        loads, args = lane_args(src, 4, "q", "gi")
        lines = ["let gi = q * 4;", *loads]
        gis = ["gi", "gi + 1", "gi + 2", "gi + 3"]
    else:  # the second element's lanes at gj, inside the tensor (an odd count's last word)
        _, (lo,) = lane_args(src, 1, "q", "gi")
        _, (hi,) = lane_args(src, 1, "q", "gj")
        lines, gis, args = ["let gi = q * 2;", f"let gj = min(gi + 1, {out.numel - 1});"], \
            ["gi", "gj"], [lo, hi]
    vals = [f"epilogue({g}{a})" for g, a in zip(gis, args)]
    body = "\n            ".join(lines + [f"out[q] = {pack_words(vals, out.stored)};"])
    return "elementwise", dict(functions="", WG=wg, ROW=row, THREADS=threads, EPT=ept,
                               STEPS=steps, BODY=body), grid, knobs


# A copy's (materialize) VEC where it may be 4 (the tuner's space holds both). Measured
# on the H200 (2026-12-04b, bench/results/profile_copy_vec4_h200_2026-12-04b.json): the
# irregular GEMM's two aligned copies (3001 x 4093 -> 3004 x 4096, 4093 x 2999 -> 4096 x
# 3000) 0.080 ms with VEC 1, 0.057 with VEC 4; level1/013 1.827 -> 1.806 ms.
COPY_VEC = 4


def _materialize(src, materialized, out, tnode, knobs, options: CompileOptions):
    """A copy of the node's input (computed inline by the loader) into its own buffer:
    the elementwise template with the loader's value as the epilogue's acc. VEC 4 (the
    default where the copy holds a multiple of 4 four-byte elements): `load_x4` computes
    four consecutive elements, their index arithmetic shared (Emitter.aligned), and
    they are stored 16 bytes at a time."""
    (x,) = tnode.inputs
    if is_packed(out.stored):
        return _narrow(src, materialized, out, tnode, knobs)
    vec4 = out.numel % 4 == 0 and x.dtype == out.dtype and x.dtype in ("f32", "i32")
    knobs = {"VEC": COPY_VEC if vec4 else 1, **(knobs or {})}
    require(knobs["VEC"] == 1 or vec4, knobs,
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
    tmpl, slots, grid, knobs = _elementwise(src, materialized, out, tnode, knobs, options,
                                            final)
    return tmpl, {**slots, "functions": functions, "key_functions": key, "final": final}, \
        grid, knobs


def _narrow(src, materialized, out, tnode, knobs):
    """A copy into a buffer of a packed half type (an f16 or bf16 output): each step
    computes two elements (the loader, then the epilogue) and stores them as one word, so
    that no two invocations write halves of one word; the last step of an odd count
    repeats its last element in the unused half. VEC 1 only (a step is already a word)."""
    (x,) = tnode.inputs
    knobs = merge_knobs(elementwise_knobs(out.numel), {"VEC": 1, **(knobs or {})})
    wg, ept = check_wg(knobs), knobs["EPT"]
    require(isinstance(ept, int) and ept >= 1, knobs, "EPT must be a positive integer")
    require(knobs["VEC"] == 1 and knobs["TILE"] == 0, knobs,
            "a packed half output is stored a word (two elements) a step: VEC 1, TILE 0")
    em = Emitter(src, materialized)
    functions = em.function("load_x", ["gi: i32"], x.dtype,
                            em.value(x, Index(x.shape, flat="gi")))
    src.helpers.add("half")
    steps = -(-out.numel // 2)
    threads = math.ceil(steps / ept)
    grid, row = grid_1d(threads, wg)
    pair = pack_pair("epilogue(load_x(gi), gi)", "epilogue(load_x(gj), gj)", out.stored)
    body = "\n            ".join([
        "let gi = q * 2;", f"let gj = min(gi + 1, {out.numel - 1});", f"out[q] = {pair};"])
    return "elementwise", dict(functions=functions, WG=wg, ROW=row, THREADS=threads, EPT=ept,
                               STEPS=steps, BODY=body), grid, knobs
