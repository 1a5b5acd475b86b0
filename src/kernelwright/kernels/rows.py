"""Row kernels: reductions along rows or columns (reduce) and fused row kernels
(norms, softmax: rows); knobs, space, generator (kernels/rows.wgsl)."""

from __future__ import annotations

from ..codegen.codegen import (
    Emitter,
    Index,
    _cast,
    buffer_address,
    pack_words,
    to_buffer,
)
from ..dtypes import element_type, is_packed, wgsl_type
from ..ir.ir import Value, where_band
from ..options import CompileOptions
from .common import (
    MAX_GRID,
    MAX_WG,
    check_wg,
    fold_vals,
    lane_args,
    merge_knobs,
    pow2_ceil,
    require,
    snippet,
)

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
        tpr = 1 if o >= COL_MANY_ROWS else max(8, pow2_ceil(-(-(1 << 16) // o)))
        return {"WG": MAX_WG, "TPR": min(MAX_WG, tpr, pow2_ceil(r // vec)), "VEC": vec,
                "ORDER": "col"}
    tpr = min(MAX_WG, pow2_ceil(-(-(r // vec) // 8)))
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
                    if (tpr <= max(1, pow2_ceil(r // vec))
                            and (passes == 1 or items * vec <= ROW_CACHE)):
                        space.append({"WG": wg, "TPR": tpr, "VEC": vec, "ORDER": order})
    return space


def row_share(r: int, tpr: int) -> int:
    """Elements of a row of R that each of its TPR invocations holds (at the default VEC)."""
    vec = 4 if r % 4 == 0 else 1
    return -(-(r // vec) // tpr) * vec


def row_kernel_fits(r: int, lanes: int, paired: bool = False) -> bool:
    """Whether a row kernel of several passes can hold rows of R elements of `lanes`
    buffers on chip (MAX_WG invocations per row; _rows raises TPR that far; MAX_WG / 2
    where `paired`: a reduction whose rows' values are stored packed, two rows of a
    workgroup a word)."""
    return row_share(r, MAX_WG // 2 if paired else MAX_WG) * lanes <= ROW_CACHE


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


def _reduce(src, materialized, out, tnode, knobs, options: CompileOptions):
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


def row_phases(src, materialized, phases, consumer: bool = False, knobs=None):
    """The generated parts of a row kernel's reductions `phases` (reduce node, the value
    its group stores), each over x [O, R]: the accumulator structs and combine / leaf
    functions, the pending loader (`load_<j>(o, r, gi, lanes.., rv..)`, its buffers at the
    row's elements lanes) and finish (`finish_<j>(acc, o, rv..)`: the reduction's
    epilogue) functions, written by phase_functions once the lanes are known, and each
    phase's (accumulator type, init, final). A phase reads the earlier ones' row values
    as rv<k> (phase_passes names them). Shared by the row template and the gemv's row
    statistics (kernels/gemv.py)."""
    o, r = phases[0][0].inputs[0].shape
    functions, pending, bound, finals = [], [], {}, []
    for j, (tn, root) in enumerate(phases):
        x = tn.inputs[0]
        require(x.shape == (o, r), knobs or {}, "the phases of a row kernel share O and R")
        xt = "i32" if x.dtype in ("i32", "bool") else "f32"
        acc_t, init, combine, leaf, final = (
            s.format(**fold_vals(xt)).replace("ArgAcc", f"ArgAcc{j}")
            for s in REDUCERS[tn.attrs["op"]])
        em = Emitter(src, materialized, lanes="gi", bound=dict(bound))
        val = em.value(x, Index(x.shape, dims=["o", "r"], flat="gi"))
        if x.dtype != xt:
            val = _cast(val, {}, x.dtype, xt)
        pending.append((em, f"load_{j}", ["o: i32", "r: i32", "gi: i32"], xt, val, True, j))
        if acc_t.startswith("ArgAcc"):
            functions.append(f"struct {acc_t} {{ v: {xt}, i: i32 }}\n")
        moments = acc_t == "Moments"  # alone in its kernel: stores (mean, M2) per row
        require(not moments or (len(phases) == 1 and not consumer and root is tn.out),
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
    return functions, pending, finals


def phase_functions(pending, phases, lanes: list[str]) -> list[str]:
    """The pending functions of row_phases (and a row kernel's epilogue), written with
    the kernel's lane parameters and the earlier phases' row values."""
    functions = []
    for em, name, params, dtype, val, uses_lanes, n in pending:
        prior = [f"rv{k}: {wgsl_type(phases[k][1].dtype)}" for k in range(n)]
        functions.append(em.function(name, params + (lanes if uses_lanes else []) + prior,
                                     dtype, val))
    return functions


def row_loop(src, vec: int, tpr: int, r: int, qend: str, fn) -> list[str]:
    """One pass over row o from memory: invocation t of the row's TPR takes every TPR-th
    step q of VEC elements (up to `qend`), loads the lanes and emits fn(args)."""
    loads, args = lane_args(src, vec, f"o * {r // vec} + q", "g")
    return ([f"    if (live) {{ for (var q = t; q < {qend}; q += {tpr}) {{",
             f"        let g = o * {r} + q * {vec};"]
            + [f"        {s}" for s in loads] + [f"        {s}" for s in fn(args)]
            + ["    } }"])


def _at(e: int) -> str:
    return f" + {e}" if e else ""


def phase_passes(finals, steps, vec: int, tpr: int, ts: int, wg: int) -> tuple[list, list]:
    """The passes of row_phases' reductions over row o (WGSL lines; `steps(fn)`: one pass
    over the row's elements, emitting fn(args) per step) and their workgroup arrays:
    each phase folds its invocations' elements, combines the row's TPR partials by a
    tree (kernels/rows_tree.wgsl; `ts`: from one invocation's partial to the next) and
    lets rv<j>, the row's value, which later passes read. Names the kernel provides: o,
    t (the invocation's place in its row), lead (the row's first partial), li, live."""
    body, shared = [], []
    for j, (acc_t, init, final) in enumerate(finals):
        body.append(f"    var a{j}: {acc_t} = {init};")
        prior = "".join(f", rv{k}" for k in range(j))
        # an argmax's combine branches: its step's loads are written before the first
        # combine, so that they are in flight together (else one load per branch)
        first = acc_t.startswith("ArgAcc")

        def step(args, j=j, prior=prior, first=first, acc_t=acc_t) -> list[str]:
            loads = [f"load_{j}(o, q * {vec}{_at(e)}, g{_at(e)}{a}{prior})"
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
            return lets + [f"a{j} = combine_{j}(a{j}, leaf_{j}({v}, q * {vec}{_at(e)}));"
                           for e, v in enumerate(values)]

        body += steps(step)
        if tpr > 1:
            shared.append(f"var<workgroup> partial_{j}: array<{acc_t}, {wg}>;")
            body += snippet("rows_tree").substitute(J=j, HALF=tpr // 2, TS=ts).split("\n")
            total = f"partial_{j}[lead]"
        else:
            total = f"a{j}"
        if acc_t == "Moments":
            body.append(f"    let rv{j} = {total};")
        else:
            body.append(f"    let rv{j} = finish_{j}({final.replace('acc', total)}, o{prior});")
    return body, shared


def phase_bytes(finals, wg: int) -> int:
    """Workgroup memory of phase_passes' partials (a tree where TPR > 1)."""
    return sum(wg * _ACC_BYTES.get(f[0].rstrip("0123456789"), 4) for f in finals)


def _rows(src, materialized, out, phases, consumer: bool, knobs=None):
    """The row template (kernels/rows.wgsl): for each of O rows of R elements, the
    reductions `phases` (reduce node, the value its group stores: the reduction and its
    epilogue chain) one after the other, each able to read the ones before as per-row
    values, then either the elementwise `out` over the row's elements (consumer: a
    fused softmax or norm, stored at o * R + r) or the last phase's value (a plain
    reduction, stored at o). The buffers read at the row's own elements are lanes
    (codegen); a kernel of several passes loads them once into registers (c<i>_<k>)
    and every pass reads them there: the row is read from memory once.

    An `out` of a packed half type is stored whole words: the elementwise `out` VEC 2 or
    4 elements a step (R even: a word never straddles two rows, whose statistics two
    invocations hold), a reduction's values two rows a word, the even row's lead
    invocation packing its neighbour's value from workgroup memory (at least two rows a
    workgroup)."""
    x0 = phases[0][0].inputs[0]
    o, r = x0.shape
    passes = len(phases) + consumer
    col = not consumer and len(phases) == 1 and not row_major(x0, materialized)
    cached = passes > 1
    functions, pending, finals = row_phases(src, materialized, phases, consumer, knobs)
    bound = {root: f"rv{j}" for j, (_, root) in enumerate(phases)}
    shared: list[str] = []
    if consumer:
        em = Emitter(src, materialized, lanes="gi", bound=dict(bound), computes=out)
        val = em.value(out, Index(out.shape, flat="gi"))
        pending.append((em, "epilogue", ["gi: i32"], out.dtype, val, True, len(phases)))
    lanes = src.lane_params()
    nl = max(1, len(src.lanes))
    packed = is_packed(out.stored)
    paired = packed and not consumer and o > 1  # two rows' values a word
    defaults = rows_knobs(o, r, col)
    if packed and consumer and r % 4:
        defaults["VEC"] = 2
    most = MAX_WG // 2 if paired else MAX_WG
    defaults["TPR"] = min(defaults["TPR"], most)
    while cached and defaults["TPR"] < most and row_share(r, defaults["TPR"]) * nl > ROW_CACHE:
        defaults["TPR"] *= 2  # more invocations per row, until the row fits on chip
    knobs = merge_knobs(defaults, knobs)
    wg = check_wg(knobs, pow2=True)
    tpr, vec, order = knobs["TPR"], knobs["VEC"], knobs["ORDER"]
    require(isinstance(tpr, int) and 1 <= tpr <= wg and tpr & (tpr - 1) == 0, knobs,
            "TPR must be a power of two up to WG")
    require(vec in ((2, 4) if packed and consumer else (1, 4)) and r % vec == 0, knobs,
            "VEC is 1, or 4 when R is a multiple of 4 (a packed half output's row: 2 or 4)")
    require(not paired or wg // tpr >= 2, knobs,
            "a reduction stored packed pairs rows in a workgroup: TPR at most WG / 2")
    require(order in ("row", "col"), knobs, "ORDER is 'row' or 'col'")
    rv = r // vec  # steps per row
    items = -(-rv // tpr)  # steps per invocation
    rpw = wg // tpr
    held = items * vec * nl
    require(not cached or held <= ROW_CACHE, knobs,
            f"{held} elements per invocation exceed the on-chip row cache ({ROW_CACHE})")
    functions += phase_functions(pending, phases, lanes)
    rvs = "".join(f", rv{k}" for k in range(len(phases)))
    end = None if consumer else _row_band_end(phases, r)
    qend = str(rv) if end is None else "qend"  # the row's steps that are loaded

    def steps(fn) -> list[str]:
        """The steps of one pass over the row: unrolled over the cached items, else a
        loop loading the lanes from memory."""
        if not cached:
            return row_loop(src, vec, tpr, r, qend, fn)
        lines = []
        for k in range(items):
            _, args = lane_args(src, vec, "", "g", {i: f"c{i}_{k}" for i in src.lanes})
            lines += [f"    {{ let q = {k * tpr} + t; if (live && q < {qend}) {{",
                      f"        let g = o * {r} + q * {vec};"]
            lines += [f"        {s}" for s in fn(args)] + ["    } }"]
        return lines

    ts = 1 if order == "row" else rpw  # partial index step between a row's invocations
    body, partials = phase_passes(finals, steps, vec, tpr, ts, wg)
    shared += partials
    if consumer:
        out_t = element_type(out.dtype)

        def store(args):
            vals = [to_buffer(f"epilogue(g{_at(e)}{a}{rvs})", out.dtype)
                    for e, a in enumerate(args)]
            if packed:  # VEC elements: whole words of the row
                return [f"out[o * {rv} + q] = {pack_words(vals, out.stored)};"]
            if vec == 1:
                return [f"out[g] = {vals[0]};"]
            return [f"out[o * {rv} + q] = vec4<{out_t}>({', '.join(vals)});"]
        src.out_vec4 = vec == 4 and not packed
        src.out_vec2 = vec == 4 and packed
        if packed:
            src.helpers.add("half")
        body += steps(store)
    elif finals[-1][0] == "Moments":
        body.append("    if (live && t == 0) { out[2 * o] = rv0.m; out[2 * o + 1] = rv0.q; }")
    elif packed:  # row o's value in the low half of word o / 2, row o + 1's in the high
        src.helpers.add("half")
        last = f"rv{len(phases) - 1}"
        shared.append(f"var<workgroup> row_values: array<f32, {rpw}>;")
        hi = (f"row_values[select(slot + 1, slot, o + 1 >= {o})]" if paired
              else "row_values[slot]")
        body += [f"    if (live && t == 0) {{ row_values[slot] = {last}; }}",
                 "    workgroupBarrier();",
                 f"    if (live && t == 0 && o % 2 == 0) {{ out[o / 2] = "
                 f"{pack_words(['row_values[slot]', hi], out.stored)}; }}"]
    else:
        body.append(f"    if (live && t == 0) {{ out[o] = "
                    f"{to_buffer(f'rv{len(phases) - 1}', out.dtype)}; }}")
    if cached:  # fill the registers first: each lane's vector (or element) per item
        fill = []
        for i, v in sorted(src.lanes.items()):
            t_ = element_type(v.dtype)
            for k in range(items):
                fill.append(f"    var c{i}_{k}: {f'vec{vec}<{t_}>' if vec > 1 else t_};")
        for k in range(items):
            loads = []
            for i, v in sorted(src.lanes.items()):
                if vec == 1:
                    loads.append(f"c{i}_{k} = in{i}[o * {r} + q];")
                elif vec == 2:
                    g = f"(o * {rv} + q) * 2"
                    loads.append(f"c{i}_{k} = vec2<{element_type(v.dtype)}>(in{i}[{g}], "
                                 f"in{i}[{g} + 1]);")
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
                 workgroup_bytes=(phase_bytes(finals, wg) if tpr > 1 else 0)
                 + (4 * rpw if packed and not consumer else 0))
    return "rows", slots, (gx, -(-nwg // gx), 1), knobs
