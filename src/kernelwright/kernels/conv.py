"""Direct convolutions and transposed convolutions: knobs, space, generator
(kernels/conv.wgsl, kernels/conv_transpose.wgsl)."""

from __future__ import annotations

import math
import string

from ..options import CompileOptions
from .common import (
    check_wg,
    dim_slots,
    grid_1d,
    loader,
    merge_knobs,
    require,
)


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


def _conv(src, materialized, out, tnode, knobs, options: CompileOptions):
    x, w = tnode.inputs
    c, size = x.shape[1], x.shape[2:]
    co, out_size = tnode.out.shape[1], tnode.out.shape[2:]
    at = tnode.attrs
    groups, stride, dil = at["groups"], at["stride"], at["dilation"]
    functions = loader(src, materialized, "load_x", x) + loader(src, materialized, "load_w", w)
    knobs = merge_knobs(conv_knobs(at["transposed"], out_size[-1]), knobs)
    opt = knobs["OPT"]
    require(opt in ((1,) if at["transposed"] else (1, 2, 4)), knobs,
            "OPT must be 1, 2 or 4 (1 for a transposed convolution)")
    per_dim = dim_slots(OUT=out_size, IN=size, K=w.shape[2:], S=stride, P=at["padding"], DIL=dil)
    owb = -(-out_size[2] // opt)
    numel = tnode.out.numel // out_size[2] * owb
    grid, row = grid_1d(numel, check_wg(knobs))
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
    slots.update(dim_slots(G=gcd, M=step, INV=inv))
    return "conv_transpose", slots, grid, knobs
