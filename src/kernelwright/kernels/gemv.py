"""The matrix-vector template for products of few rows (kernels/gemv.wgsl): which
products take it, how their K is cut, knobs, space and generator.

A product of M <= GEMV_MAX_M rows per batch entry (a decoding step's one token times a
weight; attention's one query against the cached keys and values) is bound by reading
B: each element of B feeds M multiply-adds. The tiled matmul gives it 16-row tiles (at
M = 1, 15 of 16 rows padding) of 64 columns, a K loop of 16-deep steps per workgroup,
and for the few workgroups that makes, split-K and a reduce kernel summing the partial
products. The gemv gives a workgroup BN columns of all M rows and the whole of K, its
invocations split along K (KS slices) and along the columns (CT groups), their partial
sums added in workgroup memory: one kernel, B read once, 16 bytes at a time along its
contiguous dim. The bound on M is a model, not a measurement: at M = 8 a 16-byte load
of B feeds 32 multiply-adds (2 per byte), a fifth of the 10 an H100 does per byte of
memory bandwidth (33.5 T fp32 FMA/s over 3.35 TB/s), so the kernel stays bound by B's
bytes, and an invocation holds 4 * M = 32 accumulators (layout N); from 9 rows on, the
matmul's 16-row tiles are less than half padding and it takes them."""

from __future__ import annotations

import math

from ..dtypes import wgsl_type
from ..ir.ir import Value
from ..options import CompileOptions, Waves
from .common import (
    MAX_GRID,
    MAX_WG,
    contiguous_dim,
    loader,
    merge_knobs,
    pow2_ceil,
    require,
    snippet,
    vec4_view,
)
from .matmul import output_index, product_reads_window
from .rows import phase_bytes, phase_functions, phase_passes, row_loop, row_phases

GEMV_MAX_M = 8  # rows per batch entry up to which a product takes the gemv (module doc)
GEMV_STAGE = 2048  # A's elements staged in workgroup memory per K chunk (8 KiB)
# The longest K whose row statistics (an RMSNorm's, a LayerNorm's) a gemv computes itself
# (schedule.fuse_rows): each workgroup reads its M rows once more before staging them, at
# most 8 x 8192 elements (256 KiB of f32, the same for every workgroup: L2 hits), 64
# 16-byte loads per invocation of 256, about what staging A costs it; beyond that the
# statistic's own row kernel (one launch, A read once) is the cheaper. A model.
GEMV_ROW_MAX = 8192
# Workgroups the knobs aim for: GEMV_WAVES per slot of the plain matmul tiles (about one
# per SM: options.Waves.plain), or GEMV_SLOTS slots where the device's waves are unknown.
# Two 256-invocation workgroups per SM, each invocation with four 16-byte loads of B in
# flight, hold 32 KiB of loads per SM: about what an H100's SM needs in flight to draw its
# share of the bandwidth (25 GB/s at about 1 us of latency). A model, not measured.
GEMV_WAVES = 2
GEMV_SLOTS = 132
# Column groups per workgroup at most and at least: layout N (B contiguous along N, 4
# columns a group) 16 (64 columns: 256 contiguous bytes of a row of B) down to 2 (a
# 32-byte sector of each row); layout K (contiguous along K, one column a group, its
# slices reading 16 * KS contiguous bytes) 16 down to 1.
GEMV_GROUPS = {"N": (16, 2), "K": (16, 1)}
# Invocations per workgroup at least (a warp): a short K (attention's 8-dim heads: 2
# slices) takes more column groups rather than leave most of a warp idle
GEMV_MIN_WG = 32
# K quads (4 k) per invocation from which a product whose gemv grid is smaller than its
# target has K cut into chunks (gemv_chunks: split-K, their partial sums reduced)
GEMV_LONG_LOOP = 32
GEMV_MAX_CHUNKS = 64


def takes_gemv(m: int, window: bool = False) -> bool:
    """Whether a product of M rows per batch entry takes the gemv template: M at most
    GEMV_MAX_M and no operand reading a convolution's windows (an implicit GEMM of few
    output channels keeps the matmul: its plans were measured so, the gemv's are not)."""
    return m <= GEMV_MAX_M and not window


def gemv_node(tnode) -> bool:
    """Whether matmul node `tnode` is computed by the gemv template (takes_gemv; a product
    whose batch is folded into its columns, a convolution's, keeps the matmul)."""
    a = tnode.inputs[0]
    return takes_gemv(a.shape[1], product_reads_window(tnode))


def gemv_target(waves: Waves | None) -> int:
    """The workgroups a gemv's knobs aim for on a device of these waves."""
    return GEMV_WAVES * (waves.plain if waves is not None else GEMV_SLOTS)


def gemv_knobs(n: int, k: int, nb: int, layout: str,
               waves: Waves | None = None) -> dict:
    """CT column groups and KS K slices per workgroup: the most column groups (up to
    GEMV_GROUPS' most) whose workgroups, nb * ceil(N / BN), still reach gemv_target, else
    the fewest; then as many slices as fit MAX_WG invocations, no more than K's quads
    (rounded up to a power of two), so that each invocation's loop is short, and at
    least GEMV_MIN_WG invocations (more column groups where K is short). The rows
    change neither: an invocation holds M accumulators (times 4 in layout N)."""
    most, least = GEMV_GROUPS[layout]
    width = 4 if layout == "N" else 1
    target = gemv_target(waves)
    ct = most
    while ct > least and nb * math.ceil(n / (ct * width)) < target:
        ct //= 2
    ks = max(1, min(MAX_WG // ct, pow2_ceil(math.ceil(k / 4))))
    return {"CT": max(ct, GEMV_MIN_WG // ks), "KS": ks}


def gemv_blocks(n: int, k: int, nb: int, layout: str, waves: Waves | None = None) -> int:
    """Workgroups along N of a gemv with the default knobs (gemv_knobs): each stages all
    of A's rows of its batch entry once, so A's prologue is computed that many times."""
    ct = gemv_knobs(n, k, nb, layout, waves)["CT"]
    return math.ceil(n / (ct * (4 if layout == "N" else 1)))


def gemv_chunks(n: int, k: int, nb: int, waves: Waves | None = None) -> int:
    """K chunks of a gemv product (kernels/cuts.product_plan): 1 unless its grid at the
    fewest columns per workgroup stays under gemv_target and each invocation would
    still walk more than GEMV_LONG_LOOP quads (a long dot product of a few columns);
    then enough chunks to reach the target or that loop, whichever is fewer."""
    width, least = 4, GEMV_GROUPS["N"][1]  # layout N: the larger blocks, fewer workgroups
    grid = nb * math.ceil(n / (least * width))
    loop = math.ceil(k / 4 / (MAX_WG // least))
    target = gemv_target(waves)
    if grid >= target or loop <= GEMV_LONG_LOOP:
        return 1
    return max(1, min(math.ceil(target / grid), math.ceil(loop / GEMV_LONG_LOOP),
                      GEMV_MAX_CHUNKS))


def gemv_layout(b: Value, materialized) -> str:
    """"K" where B [nb, K, N] is contiguous along K (a weight stored [N, K] and read
    transposed, attention's keys), else "N" (along N, or computed)."""
    return "K" if contiguous_dim(b, materialized) == 1 else "N"


def gemv_space(out, tnode, options: CompileOptions) -> list[dict]:
    """The tuner's settings: CT and KS powers of two within MAX_WG invocations."""
    a, b = tnode.inputs
    quads = pow2_ceil(math.ceil(a.shape[2] / 4))
    return [{"CT": ct, "KS": ks} for ct in (1, 2, 4, 8, 16, 32) for ks in (8, 16, 32, 64, 128)
            if ct * ks <= MAX_WG and ks <= max(8, quads)]


def _fragment(src, materialized, b: Value, layout: str) -> str:
    """`fn frag_b(b, k, n) -> vec4<f32>`: layout N, B at (k, n .. n + 3); layout K, at
    (k .. k + 3, n), n or k a multiple of 4. A vec4 view of B's buffer where B is one f32
    buffer read at an affine index whose fragment dim is contiguous (common.vec4_view),
    else the loader's four lanes from one call (its dim a multiple of 4), else four
    calls, each lane past its dim's end zero. Layout N's k past K is zero."""
    nb, k, n = b.shape
    fd = 2 if layout == "N" else 1
    size = b.shape[fd]
    view = vec4_view(b, materialized, fd) if size % 4 == 0 else None
    head = "fn frag_b(b: i32, k: i32, n: i32) -> vec4<f32> {\n"
    guard = f"    if (k >= {k}) {{ return vec4<f32>(0.0); }}\n" if layout == "N" and k % 4 else ""
    if view is not None:
        root, offset, st = view
        terms = [str(offset // 4)] if offset else []
        for d, idx in enumerate(("b", "k", "n")):
            if d == fd:
                terms.append(f"{idx} / 4")
            elif b.shape[d] > 1 and st[d]:
                terms.append(f"{idx} * {st[d] // 4}")
        return (head + guard + f"    return {src.view4(root)}[{' + '.join(terms)}];\n}}\n")
    if size % 4 == 0:
        return loader(src, materialized, "load_b4", b, lanes=fd) + (
            head + guard + "    return load_b4(b, k, n);\n}\n")
    lanes = []
    for e in range(4):
        at = ("k", f"n + {e}") if layout == "N" else (f"k + {e}", "n")
        lanes.append(f"    if ({at[fd - 1]} < {size}) {{ f.{'xyzw'[e]} = "
                     f"load_b(b, {at[0]}, {at[1]}); }}\n")
    return (head + guard + "    var f = vec4<f32>(0.0);\n" + "".join(lanes)
            + "    return f;\n}\n")


def _gemv(src, materialized, out, tnode, knobs, options: CompileOptions, phases=()):
    """The gemv kernel (kernels/gemv.wgsl) for the given knobs; `phases` (reduce node,
    the value its group stores): reductions over K of A's rows (O = nb * M rows of K,
    row o = b * M + m: an RMSNorm's statistic) that A's prologue reads, computed by each
    workgroup before A is staged (_row_statistics)."""
    a, b = tnode.inputs
    nb, m, k = a.shape
    n = b.shape[2]
    layout = gemv_layout(b, materialized)
    knobs = merge_knobs(gemv_knobs(n, k, nb, layout, options.waves), knobs)
    ct, ks = knobs["CT"], knobs["KS"]
    require(all(isinstance(v, int) and v >= 1 and v & (v - 1) == 0 for v in (ct, ks)),
            knobs, "CT and KS must be powers of two")
    require(ct * ks <= MAX_WG, knobs, f"more than {MAX_WG} invocations")
    require(nb <= MAX_GRID, knobs, f"batch {nb} exceeds the grid limit {MAX_GRID}")
    wg = ct * ks
    width = 4 if layout == "N" else 1
    bn = ct * width
    kc = min(-(-k // 4) * 4, max(4, GEMV_STAGE // m // 4 * 4))
    qc = kc // 4
    workgroup_bytes = 4 * (m * kc + wg * width)
    # the scalar loaders first: they bind the operands' buffers before any vec4 view
    # A's prologue reads row m's statistics from workgroup memory
    stat = {root: f"row_stat_{j}[i1]" for j, (_, root) in enumerate(phases)}
    scalar = [loader(src, materialized, "load_a", a, bound=stat),
              loader(src, materialized, "load_b", b)]
    if k % 4 == 0:
        functions = loader(src, materialized, "load_a4", a, lanes=2, bound=stat)
        load_a = "            if (k < $K) { a = load_a4(b, m, k); }"
    else:
        functions = ""
        load_a = "\n".join(f"            if (k + {e} < $K) {{ a.{'xyzw'[e]} = "
                           f"load_a(b, m, k + {e}); }}" for e in range(4))
    stats, stat_functions, stat_shared, stat_bytes = _row_statistics(
        src, materialized, phases, nb, m, k, wg, knobs)
    scalar += stat_functions
    functions = "".join(scalar) + functions + _fragment(src, materialized, b, layout)
    acc_t = "vec4<f32>" if layout == "N" else "f32"
    accs = "\n".join(f"    var acc{i} = {acc_t}(0.0);" for i in range(m))
    a_rows = [f"            let a{i} = tile_a[{i * qc} + q];" for i in range(m)]
    if layout == "N":
        step = a_rows + [f"            {{ let f = frag_b(b, k + {j}, n0 + c * 4); "
                         + " ".join(f"acc{i} += a{i}.{'xyzw'[j]} * f;" for i in range(m))
                         + " }" for j in range(4)]
        slice_, column, stride = f"lin / {ct}", f"lin % {ct}", str(ct)
        live = f"n0 + c * 4 < {n}"
    else:
        step = a_rows + ["            let f = frag_b(b, k, n0 + c);"] + [
            f"            acc{i} += dot(a{i}, f);" for i in range(m)]
        slice_, column, stride = f"lin % {ks}", f"lin / {ks}", "1"
        live = f"n0 + c < {n}"
    gi = output_index(tnode)
    # an integer product is summed in f32 (exact below 2^24) and rounded back
    dtype = tnode.out.dtype
    total = "{}" if dtype == "f32" else f"{wgsl_type(dtype)}(round({{}}))"
    reduce = []
    for i in range(m):
        if layout == "N":
            test = f"if (n < {n}) " if n % 4 else ""  # (live: the group's first column)
            stores = "\n".join(
                f"        {{ let n = n0 + c * 4 + {e}; {test}{{ let gi = {gi}; "
                f"let acc = {total.format('v.' + 'xyzw'[e])}; $STORE }} }}" for e in range(4))
        else:
            stores = (f"        {{ let n = n0 + c; let gi = {gi}; "
                      f"let acc = {total.format('v')}; $STORE }}")
        reduce.append(snippet("gemv_reduce").substitute(
            ACC=f"acc{i}", HALF=ks // 2, STRIDE=stride, ROW=i, STORE=stores))
    blocks = math.ceil(n / bn)
    gx = min(blocks, MAX_GRID)
    gy = math.ceil(blocks / gx)
    guard = f"    if (blk >= {blocks}) {{ return; }}" if gx * gy != blocks else ""
    shared = "\n".join([f"var<workgroup> tile_a: array<vec4<f32>, {m * qc}>;",
                        f"var<workgroup> red: array<{acc_t}, {wg}>;", *stat_shared])
    workgroup_bytes += stat_bytes
    slots = dict(functions=functions, key_functions="".join(scalar), SHARED=shared, WG=wg,
                 STATISTICS=stats,
                 GX=gx, GUARD=guard, BN=bn, SLICE=slice_, COLUMN=column, LIVE=live,
                 ACCUMULATORS=accs, K=k, KC=kc, QC=qc, KS=ks, STAGED=m * qc,
                 LOAD_A=load_a.replace("$K", str(k)), STEP="\n".join(step),
                 REDUCE="\n".join(reduce), workgroup_bytes=workgroup_bytes)
    return "gemv", slots, (gx, gy, nb), knobs


def _row_statistics(src, materialized, phases, nb: int, m: int, k: int, wg: int, knobs):
    """The gemv's row statistics (_gemv's `phases`): the row template's passes
    (kernels/rows.row_phases) over the workgroup's M rows of K, each row taken by WG / M'
    invocations (M' = M rounded up to a power of two) reading it from memory VEC at a
    time, the row's value stored in `row_stat_<j>[m]` for A's loader. Returns the WGSL
    block (run before the K loop, whose first barrier publishes the values), functions,
    workgroup arrays and their bytes."""
    if not phases:
        return "", [], [], 0
    o, r = phases[0][0].inputs[0].shape
    require((o, r) == (nb * m, k), knobs, "a gemv's row statistics are over A's rows")
    functions, pending, finals = row_phases(src, materialized, phases, knobs=knobs)
    tpr = wg // pow2_ceil(m)
    vec = 4 if k % 4 == 0 else 1
    body, shared = phase_passes(finals, lambda fn: row_loop(src, vec, tpr, k, str(k // vec), fn),
                                vec, tpr, 1, wg)
    functions += phase_functions(pending, phases, src.lane_params())
    types = [wgsl_type(root.dtype) for _, root in phases]
    shared += [f"var<workgroup> row_stat_{j}: array<{t}, {m}>;" for j, t in enumerate(types)]
    keep = " ".join(f"row_stat_{j}[slot] = rv{j};" for j in range(len(phases)))
    block = [
        "    {",
        "    let li = lin;",
        f"    let slot = li / {tpr};",
        f"    let t = li % {tpr};",
        f"    let lead = slot * {tpr};",
        f"    let o = b * {m} + slot;",
        f"    let live = slot < {m};",
        *body,
        f"    if (live && t == 0) {{ {keep} }}",
        "    }",
    ]
    nbytes = (phase_bytes(finals, wg) if tpr > 1 else 0) + 4 * m * len(phases)
    return "\n".join(block), functions, shared, nbytes
