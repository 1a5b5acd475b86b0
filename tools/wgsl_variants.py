"""Kernels rewritten by hand: the compiler's kernel for a case of tools/kernels.py, timed
as generated and with its WGSL text (or a weight constant) edited, each edit checked
against PyTorch and timed as the harness times (harness.timing.time_candidate) against
PyTorch on the same GPU. What wins goes into the templates and is measured again by
tools/kernels.py.

    python tools/wgsl_variants.py [--only CASE,...] [--variants NAME,...]
                                  [--knobs JSON] [--out FILE]

--knobs forces the matmul template's knobs (e.g. '{"UNROLL": 0}' over the defaults).

Window variants, on a 3x3 convolution's implicit GEMM (WINDOW_CASES): where it loses
time against the same product from stored operands.
  plain_b     load_b reads B as if it were a stored [K, N] matrix (no window
              arithmetic, same scalar loader calls): a timing bound, not a result
  no_select   the window's bounds test dropped (clamped indices kept): wrong at the
              image border, a timing bound
  tap_major   K ordered (kh, kw, ci) instead of (ci, kh, kw): the weight constant
              permuted to match, the loader's K decode a shift and a mask for the
              channel; a correct kernel
  shared_decode  an invocation's 4 consecutive positions loaded by one function that
              divides the position once (lane e = column + e); a correct kernel, the
              compiler's own since 2026-12-01h (then an error: nothing to rewrite)
  tap_major_shared  both
GEMM variants, on the matmul kernel of the GEMM cases (GEMM_CASES), written for one K
step a pass of 128 x 128 tiles (8 x 8 blocks; the default before 2026-12-01k, so now
with --knobs '{"BN": 128, "TN": 8}'):
  warp8x4, warp4x8  invocations numbered so that a warp covers 8 x 4 or 4 x 8 of the
              16 x 16 block grid instead of 16 x 2 (fewer shared-memory wavefronts)
  store_half, store_quarter  the next tile's stores moved half or a quarter of the way
              into the written-out K step, so that the driver cannot sink the tile's
              global loads (it put them three quarters of the way through, 2026-12-01j);
              these and the two below also apply to the wide tiles (the default)
  store_ahead the fetch a tile further ahead: each K step stores the tile fetched in the
              step before, then fetches the one after next, then multiplies
  fetch_branch  each K step's fetch inside a branch the driver cannot decide (always
              taken), to keep the global loads at the top of the step (any tiles)
  ahead_branch  store_ahead with fetch_branch's branch around its fetches
  a_rows_warp the wide tiles' fetch along rows renumbered: a warp takes 32 consecutive
              rows at one half of the K step (its transposing stores on 32 banks)
  a_frag_late each k's A fragments read right before its first B fragment
  unroll2     two K steps per pass, each buffer's offsets constants
  a_both      a_rows_warp and a_frag_late
  acc_vec4    the accumulators as vec4s (a row's four columns of one B fragment), each
              multiply-add a vector fma of the row's A value splatted
  k_shift     the staged buffer's index as (k0 >> 3) & 1, no signed division
  acc_vec4_k_shift  both
Permute variants, on the NCHW -> NHWC permute (PERMUTE_CASES), written by hand for a
4-d input (each checked against PyTorch):
  affine, affine_TCxTW_rR  the transposing tile of kernels/transpose.wgsl (TC channels
              by TW columns, 32 x R invocations) with each element's address from the
              tile's (n, h) and its (c, w), no division of its output index
  vec4, vec4_cTC_wTW[_WG]  16-byte loads along W and 16-byte stores along C through a
              staged tile of TC x TW
Every case also runs `generated`, the compiler's kernel. `h200_session.sh gemmvar` runs
one variant per process with NVIDIA's shader cache kept, for tools/nv_shader_stats.py
--sass. The JSON is written after each variant."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import re
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels import case_reference  # noqa: E402

import kernelwright  # noqa: E402
from kernelwright.compiler import CompiledModule  # noqa: E402
from kernelwright.harness.timing import keep_gpu_awake, time_candidate  # noqa: E402  # noqa: E402

WINDOW_CASES = ("conv3x3_128ch_56x56_b64", "conv3x3_128to192_64x64_b32",
                "conv3x3_64ch_128x128_b32")
GEMM_CASES = ("gemm_4096", "gemm_irregular_3001x4093x2999", "linear_8192x1024x4096",
              "gemm_8192x1024x4096")
PERMUTE_CASES = ("permute_nchw_to_nhwc_64x256x128x128",)


def _load_b(src: str) -> tuple[str, str]:
    """The B loader's text and body: `load_b` (one element) or, since 2026-12-01h,
    `load_b4` (four consecutive positions, their index arithmetic shared)."""
    m = re.search(r"fn load_b4?\(i0: i32, i1: i32, i2: i32\) -> (f32|vec4<f32>) \{\n(.*?)\n"
                  r"\}\n", src, re.S)
    if m is None:
        raise RuntimeError("no load_b in the kernel")
    return m.group(0), m.group(2)


def plain_b(src: str, plan, conv) -> tuple[str, dict]:
    whole, body = _load_b(src)
    buf = re.search(r"in(\d+)\[t\d+\]", body).group(1)
    cin = conv.in_channels
    hw = int(re.search(r"i0 \* (\d+)", body).group(1)) // cin
    at = [f"in{buf}[i0 * {cin * hw} + (i1 % {cin}) * {hw} + i2 + {e}]" for e in range(4)]
    if "load_b4" in whole:
        new = (f"fn load_b4(i0: i32, i1: i32, i2: i32) -> vec4<f32> {{\n"
               f"    return vec4<f32>({', '.join(at)});\n}}\n")
    else:
        new = f"fn load_b(i0: i32, i1: i32, i2: i32) -> f32 {{\n    return {at[0]};\n}}\n"
    return src.replace(whole, new), {}


def no_select(src: str, plan, conv) -> tuple[str, dict]:
    whole, body = _load_b(src)
    new_body = re.sub(r"select\(f32\(0\.0\), (in\d+\[t\d+\]), [^;]*\);", r"\1;", body)
    if new_body == body:
        raise RuntimeError("no select in load_b")
    return src.replace(whole, whole.replace(body, new_body)), {}


def tap_major(src: str, plan, conv) -> tuple[str, dict]:
    """K = (kh, kw, ci): the decode lines t2 (ci), t3 (kh), t4 (kw) rewritten; the
    weight constant (the A operand, read through its vec4 view) permuted to match."""
    whole, body = _load_b(src)
    cin = conv.in_channels
    kh, kw = conv.kernel_size
    decode = {f"let t2: i32 = (t1 / {kh * kw});": f"let t2: i32 = (t1 % {cin});",
              f"let t3: i32 = ((t1 / {kw}) % {kh});": f"let t3: i32 = (t1 / {cin * kw});",
              f"let t4: i32 = (t1 % {kw});": f"let t4: i32 = ((t1 / {cin}) % {kw});"}
    if not all(line in body for line in decode):
        raise RuntimeError("unexpected K decode in load_b:\n" + body)
    new_body = body
    for old, new in decode.items():
        new_body = new_body.replace(old, new)
    w = conv.weight.detach().numpy()
    want = np.ascontiguousarray(w.reshape(w.shape[0], -1))
    (bid,) = [b for b, arr in plan.constants.items() if arr.size == w.size
              and np.array_equal(arr.reshape(want.shape), want)]
    constants = {bid: np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(-1)}
    return src.replace(whole, whole.replace(body, new_body)), constants


def shared_decode(src: str, plan, conv) -> tuple[str, dict]:
    """The four loader calls of an invocation's vec4 of consecutive positions made one
    call (`load_b4`) that divides the position once: lane e's column is the first's
    plus e (the image width is a multiple of 4, so the four share their row)."""
    whole, body = _load_b(src)
    if "load_b4" in whole:
        raise RuntimeError("the compiler's kernel loads four positions a call already")
    lines = body.splitlines()
    (col,) = [i for i, line in enumerate(lines) if re.search(r"= \(t5 % \d+\);", line)]
    var = re.search(r"let (t\d+):", lines[col]).group(1)
    ret = re.search(r"return (t\d+);", body).group(1)
    lanes = []
    for e in range(4):
        for line in lines[col + 1:]:
            if line.strip().startswith("return"):
                continue
            line = re.sub(rf"\b{var}\b", f"({var} + {e})", line)
            lanes.append(re.sub(r"\b(t(\d+))\b", lambda m, e=e: m.group(1) if int(m.group(2))
                                <= int(var[1:]) else f"{m.group(1)}_{e}", line))
    fn = ("fn load_b4(i0: i32, i1: i32, i2: i32) -> vec4<f32> {\n"
          + "\n".join(lines[:col + 1] + lanes)
          + f"\n    return vec4<f32>({', '.join(f'{ret}_{e}' for e in range(4))});\n}}\n")
    lane = (r"if \(n0 \+ rq \* 4 \+ \d < (\d+) && kb \+ kq < (\d+)\) "
            r"\{ (pb\d+)\.[xyzw] = load_b\(b, kb \+ kq, n0 \+ rq \* 4 \+ \d\); \}")
    pattern = re.compile(" ".join([lane] * 4))
    new, count = pattern.subn(lambda m: f"if (n0 + rq * 4 < {m.group(1)} && kb + kq < "
                              f"{m.group(2)}) {{ {m.group(3)} = "
                              "load_b4(b, kb + kq, n0 + rq * 4); }", src)
    if not count:
        raise RuntimeError("no vec4 of load_b calls in the fetch")
    return new.replace(whole, whole + fn), {}


def tap_major_shared(src: str, plan, conv) -> tuple[str, dict]:
    src, constants = tap_major(src, plan, conv)
    return (src if "fn load_b4" in src else shared_decode(src, plan, conv)[0]), constants


def warp_layout(wx: int):
    """Warps of wx x (32 / wx) invocations of the 16 x 16 grid instead of rows of 16."""
    def rewrite(src: str, plan, module) -> tuple[str, dict]:
        old = "    let tx = i32(lid.x);\n    let ty = i32(lid.y);\n    let lin = i32(li);"
        if old not in src or "@workgroup_size(16, 16)" not in src:
            raise RuntimeError("not a 16 x 16 matmul kernel")
        per_row = 16 // wx
        new = ("    let lin = i32(li);\n"
               f"    let tx = ((lin >> 5u) % {per_row}) * {wx} + (lin % {wx});\n"
               f"    let ty = ((lin >> 5u) / {per_row}) * {32 // wx} + ((lin % 32) / {wx});")
        return src.replace(old, new), {}
    return rewrite


# a K step's store of the next tile into the other staged buffer (one line per register)
NEXT_TILE_STORE = r"\n        \{ tile_[ab]\[\(1 - cur\) \* \d+ \+ [^\n]*; \}"


def store_at(fraction: float):
    """The next tile's stores (into the buffer no step reads) moved from the end of the
    written-out K step to before its block `fraction` of the way through."""
    def rewrite(src: str, plan, module) -> tuple[str, dict]:
        stores = re.findall(NEXT_TILE_STORE, src)
        blocks = re.findall(r"\n        \{\n            let kq = (\d+);", src)
        if not stores or len(blocks) < 2:
            raise RuntimeError("no written-out K step with two staged buffers")
        for line in stores:
            src = src.replace(line, "", 1)
        mark = f"\n        {{\n            let kq = {blocks[int(len(blocks) * fraction)]};"
        return src.replace(mark, "".join(stores) + mark, 1), {}
    return rewrite


def store_ahead(src: str, plan, module) -> tuple[str, dict]:
    """The fetch one tile further ahead: a K step first stores the tile fetched during
    the step before (into the buffer no step reads), then fetches the tile after next
    into the same registers, then multiplies. A fetch then has a whole step to arrive
    before its store, whatever the driver's scheduling inside the step."""
    stores = re.findall(NEXT_TILE_STORE, src)
    kb = re.search(r"\n        let kb = select\(k0 \+ (\d+), 0, k0 \+ \d+ >= (\d+)\);", src)
    first = re.search(r"\n    \{\n        let kb = 0;\n(.*?)\n    \}\n", src, re.S)
    if not stores or kb is None or first is None:
        raise RuntimeError("no K step of one buffer index with two staged buffers")
    bk, k = int(kb.group(1)), int(kb.group(2))
    for line in stores:
        src = src.replace(line, "", 1)
    ahead = f"select(k0 + {2 * bk}, 0, k0 + {2 * bk} >= {k})"
    src = src.replace(kb.group(0), f"\n        let kb = {ahead};" + "".join(stores), 1)
    barrier = "\n    workgroupBarrier();\n    for (var k0"
    second = (f"\n    {{\n        let kb = {bk if bk < k else 0};\n{first.group(1)}\n    }}")
    return src.replace(barrier, second + barrier, 1), {}


def fetch_branch(src: str, plan, module) -> tuple[str, dict]:
    """Each K step's fetch of the next tile inside a branch the driver cannot decide
    (kb against the output's length, always true), so that its global loads stay at the
    top of the step instead of being sunk towards their stores."""
    fetch = re.compile(r"(\n(\s*)let kb = [^\n]*;(?:\n\s*\{ tile_[^\n]*)*)"
                       r"((?:\n\s*\{ p[ab]\d+ = [^\n]*; \})+)")
    found = fetch.findall(src)
    if len(found) < 2:
        raise RuntimeError("no K step fetching the next tile into registers")

    def wrap(m):
        ind = m.group(2)
        body = m.group(3).replace("\n", "\n    ")
        return f"{m.group(1)}\n{ind}if (kb < i32(arrayLength(&out))) {{{body}\n{ind}}}"
    return fetch.sub(wrap, src), {}


def ahead_branch(src: str, plan, module) -> tuple[str, dict]:
    """store_ahead with its fetches in fetch_branch's branch: the loads pinned at the top
    of the step before the one that stores them."""
    src, _ = store_ahead(src, plan, module)
    return fetch_branch(src, plan, module)


def _permute_shape(plan) -> tuple[int, int, int, int]:
    (spec,) = plan.inputs
    if len(spec.shape) != 4:
        raise RuntimeError("the permute variants are written for NCHW -> NHWC")
    return spec.shape


def _tile_origin(plan, tc: int, tw: int) -> tuple[str, dict]:
    """The permute variants' workgroup -> tile: WGSL setting c0, w0 (the tile's first
    channel and column), hh and nn (its row and image), and the kernel's grid."""
    n, c, h, w = _permute_shape(plan)
    groups = (c // tc) * (w // tw) * n * h
    gx = min(groups, 65535)
    text = f"""    let flat = i32(wid.x) + i32(wid.y) * {gx};
    if (flat >= {groups}) {{
        return;
    }}
    let c0 = (flat % {c // tc}) * {tc};
    let w0 = ((flat / {c // tc}) % {w // tw}) * {tw};
    let r = flat / {(c // tc) * (w // tw)};
    let hh = r % {h};
    let nn = r / {h};"""
    return text, dict(grid=(gx, -(-groups // gx), 1), workgroup_bytes=tc * (tw + 1) * 4)


def permute_affine(tc: int = 32, tw: int = 64, rows: int = 8):
    """The transposing tile as generated (32 x `rows` invocations, scalar loads along W,
    scalar stores along C) but each load's address from the tile's (n, h) and the
    element's (c, w): no division of the output index per element."""
    def rewrite(src: str, plan, module):
        n, c, h, w = _permute_shape(plan)
        origin, fields = _tile_origin(plan, tc, tw)
        text = f"""@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<workgroup> tile: array<f32, {tc * (tw + 1)}>;

@compute @workgroup_size(32, {rows})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
{origin}
    let tx = i32(lid.x);
    let ty = i32(lid.y);
    let src = nn * {c * h * w} + hh * {w} + w0 + tx;
    for (var j = 0; j < {tc}; j += {rows}) {{
        for (var k = 0; k < {tw}; k += 32) {{
            tile[(ty + j) * {tw + 1} + tx + k] = in0[src + (c0 + ty + j) * {h * w} + k];
        }}
    }}
    workgroupBarrier();
    let dst = (nn * {h} + hh) * {w * c} + c0 + tx;
    for (var j = 0; j < {tw}; j += {rows}) {{
        out[dst + (w0 + ty + j) * {c}] = tile[tx * {tw + 1} + ty + j];
    }}
}}
"""
        return text, {}, fields
    return rewrite


def permute_vec4(tc: int = 32, tw: int = 64, wg: int = 256):
    """Tiles of tc channels x tw columns, loaded 16 bytes at a time along W (tw / 4
    invocations a channel row) and stored 16 bytes at a time along C (tc / 4 invocations
    a column), transposed through workgroup memory rows of tw + 1 floats."""
    def rewrite(src: str, plan, module):
        n, c, h, w = _permute_shape(plan)
        if c % tc or w % tw or tc % 4 or tw % 4:
            raise RuntimeError("the tile does not divide C x W")
        vecs = tc * tw // 4
        if vecs % wg:
            raise RuntimeError("the tile's vec4s are not a multiple of the workgroup")
        origin, fields = _tile_origin(plan, tc, tw)
        row = tw + 1
        text = f"""@group(0) @binding(0) var<storage, read> in0: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;
var<workgroup> tile: array<f32, {tc * row}>;

@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
{origin}
    let t = i32(lid);
    let src = (nn * {c * h * w} + c0 * {h * w} + hh * {w} + w0) / 4;
    for (var i = 0; i < {vecs}; i += {wg}) {{
        let q = t + i;
        let cr = q / {tw // 4};
        let wq = q % {tw // 4};
        let v = in0[src + cr * {h * w // 4} + wq];
        let at = cr * {row} + wq * 4;
        tile[at] = v.x;
        tile[at + 1] = v.y;
        tile[at + 2] = v.z;
        tile[at + 3] = v.w;
    }}
    workgroupBarrier();
    let dst = ((nn * {h} + hh) * {w * c} + w0 * {c} + c0) / 4;
    for (var i = 0; i < {vecs}; i += {wg}) {{
        let q = t + i;
        let wr = q / {tc // 4};
        let cq = q % {tc // 4};
        let at = cq * {4 * row} + wr;
        out[dst + wr * {c // 4} + cq] = vec4<f32>(tile[at], tile[at + {row}],
                                                  tile[at + {2 * row}], tile[at + {3 * row}]);
    }}
}}
"""
        return text, {}, fields
    return rewrite


STORE_LINE = re.compile(r"    \{ let m = ([^;]+); let n = ([^;]+) \+ (\d); let gi = ([^;]+); "
                        r"let acc = (acc_\d+_\d+); out\[gi\] = epilogue\(acc, gi\); \}")


def store_vec4(src: str, plan, module) -> tuple[str, dict]:
    """The store block's four consecutive columns of an invocation written as one vec4
    (the output bound as array<vec4<f32>>; tiles with no bounds tests only)."""
    decl = re.search(r"var<storage, read_write> out: array<f32>;", src)
    lines = STORE_LINE.findall(src)
    if decl is None or not lines or len(lines) % 4:
        raise RuntimeError("no store block of unguarded scalar stores")
    out = []
    for q in range(0, len(lines), 4):
        group = lines[q:q + 4]
        m, base, _, gi, _ = group[0]
        if [int(g[2]) for g in group] != [0, 1, 2, 3] or any(g[1] != base for g in group):
            raise RuntimeError("the store block's columns are not in fours")
        vals = ", ".join(f"epilogue({g[4]}, gi + {e})" for e, g in enumerate(group))
        out.append(f"    {{ let m = {m}; let n = {base} + 0; let gi = {gi}; "
                   f"out[gi / 4] = vec4<f32>({vals}); }}")
    first = STORE_LINE.search(src)
    body = STORE_LINE.sub("", src)
    body = body[:first.start()] + "\n".join(out) + body[first.start():]
    body = body.replace(decl.group(0), "var<storage, read_write> out: array<vec4<f32>>;")
    return body, {}


def a_rows_warp(src: str, plan, module) -> tuple[str, dict]:
    """The fetch of each BK-8 tile staged along its rows (A's; B's too where B is read
    along K, as a linear's weight) renumbered so that a warp's 32 invocations take 32
    consecutive rows at one half of the K step (instead of 16 rows at both halves): the
    transposing scalar stores then fall on 32 different banks (two invocations per bank
    before), and each global load reads half a 32-byte sector whose other half the warp
    64 invocations on reads."""
    old = re.compile(r"let q([ab])(\d) = \(t\1\2 % 2\) \* 4; let r\1\2 = t\1\2 / 2;")
    if len(old.findall(src)) not in (2, 4) or "@workgroup_size(8, 16)" not in src:
        raise RuntimeError("not the wide tiles' fetch along rows (two vec4 per row)")

    def new(m) -> str:
        t = f"t{m[1]}{m[2]}"
        return (f"let q{m[1]}{m[2]} = (({t} / 64) % 2) * 4; "
                f"let r{m[1]}{m[2]} = ({t} % 64) + ({t} / 128) * 64;")
    return old.sub(new, src), {}


def a_frag_late(src: str, plan, module) -> tuple[str, dict]:
    """Each k's A fragments read from workgroup memory right before that k's first B
    fragment instead of all four k's at the top of the block (fewer registers live
    across the block, if the driver keeps the order)."""
    frag = re.compile(r"\n            let (a\d+_(\d+)) = tile_a\[[^\n]*;")
    found = frag.findall(src)
    if not found:
        raise RuntimeError("no A fragments read from workgroup memory")
    lines: dict[str, list[str]] = {}  # k -> its fragment lines (the same in every block)
    for m in frag.finditer(src):
        if m[0] not in lines.setdefault(m[2], []):
            lines[m[2]].append(m[0])
    src = frag.sub("", src)
    for j, group in lines.items():
        src = re.sub(rf"(\n            let b0_{j} = )", lambda m, g=group: "".join(g) + m[1], src)
    return src, {}


def unroll2(src: str, plan, module) -> tuple[str, dict]:
    """Two K steps per pass of the loop with two staged buffers: the buffer index of
    each a constant (0, then 1), so no offset is computed at run time (K a multiple of
    two steps)."""
    head = re.search(r"\n    for \(var k0 = 0; k0 < (\d+); k0 \+= (\d+)\) \{\n"
                     r"        let cur = \(k0 / \d+\) % 2;\n", src)
    if head is None:
        raise RuntimeError("no K loop over two staged buffers")
    k, bk = int(head[1]), int(head[2])
    if k % (2 * bk):
        raise RuntimeError("K is not a multiple of two steps")
    end = src.index("\n        workgroupBarrier();\n    }\n", head.end())
    body = src[head.end():end] + "\n        workgroupBarrier();"
    ind = lambda t: t.replace("\n", "\n    ")  # noqa: E731
    loop = (f"\n    for (var kk = 0; kk < {k}; kk += {2 * bk}) {{"
            f"\n        {{\n            let k0 = kk;\n            let cur = 0;\n    "
            f"{ind(body)}\n        }}"
            f"\n        {{\n            let k0 = kk + {bk};\n            let cur = 1;\n    "
            f"{ind(body)}\n        }}\n    }}\n")
    return src[:head.start()] + loop + src[end + len("\n        workgroupBarrier();\n    }\n"):], {}


FMA_LINE = re.compile(r"\n( *)acc_(\d+)_(\d+) = fma\(([^,]+), (b\d+_\d+)\.([xyzw]), "
                      r"acc_\2_\3\);")


def acc_vec4(src: str, plan, module) -> tuple[str, dict]:
    """The accumulators held as vec4s, one per row and four consecutive columns (one B
    fragment's), each multiply-add a vector fma of the row's A value splatted against
    the fragment: 8 x 4 vec4 accumulators instead of 128 scalars, the same arithmetic.
    Does the driver allocate registers differently (fewer moves per K step)?"""
    decl = re.compile(r"\n    var acc_(\d+)_(\d+) = 0\.0;")
    cells = [(int(r), int(c)) for r, c in decl.findall(src)]
    if not cells or any(c % 4 == 0 and (r, c + 3) not in cells for r, c in cells):
        raise RuntimeError("no scalar accumulators in fours of columns")
    rows = sorted({r for r, _ in cells})
    groups = sorted({c // 4 for _, c in cells})
    first = decl.search(src)
    src = decl.sub("", src)
    vecs = "".join(f"\n    var accv_{r}_{g} = vec4<f32>();" for r in rows for g in groups)
    src = src[:first.start()] + vecs + src[first.start():]

    def fma(m) -> str:
        ind, r, c, a, frag, comp = m.groups()
        if comp != "xyzw"[int(c) % 4]:
            raise RuntimeError(f"fragment {frag}.{comp} feeds column {c}")
        if comp != "x":
            return ""
        g = int(c) // 4
        return f"\n{ind}accv_{r}_{g} = fma(vec4<f32>({a}), {frag}, accv_{r}_{g});"
    src = FMA_LINE.sub(fma, src)
    src = re.sub(r"\bacc_(\d+)_(\d+)\b",
                 lambda m: f"accv_{m[1]}_{int(m[2]) // 4}.{'xyzw'[int(m[2]) % 4]}", src)
    return src, {}


def k_shift(src: str, plan, module) -> tuple[str, dict]:
    """The staged buffer's index from a shift and a mask instead of a signed division
    and remainder (no sign fix-up in the K loop)."""
    old = re.compile(r"let cur = \(k0 / (\d+)\) % 2;")
    m = old.search(src)
    if m is None or int(m[1]) & (int(m[1]) - 1):
        raise RuntimeError("no K loop over two staged buffers with a power-of-two step")
    return old.sub(f"let cur = (k0 >> {int(m[1]).bit_length() - 1}u) & 1;", src), {}


WINDOW_VARIANTS = {"plain_b": plain_b, "no_select": no_select, "tap_major": tap_major,
                   "shared_decode": shared_decode, "tap_major_shared": tap_major_shared}
GEMM_VARIANTS = {"store_vec4": store_vec4, "warp8x4": warp_layout(8), "warp4x8": warp_layout(4),
                 "store_half": store_at(0.5), "store_quarter": store_at(0.25),
                 "store_ahead": store_ahead, "fetch_branch": fetch_branch,
                 "ahead_branch": ahead_branch, "a_rows_warp": a_rows_warp,
                 "a_frag_late": a_frag_late, "unroll2": unroll2,
                 "acc_vec4": acc_vec4, "k_shift": k_shift,
                 "acc_vec4_k_shift": lambda s, p, m: k_shift(acc_vec4(s, p, m)[0], p, m),
                 "a_both": lambda s, p, m: a_frag_late(a_rows_warp(s, p, m)[0], p, m)}
PERMUTE_VARIANTS = {
    "affine": permute_affine(), "affine_32x32_r8": permute_affine(32, 32, 8),
    "affine_32x32_r4": permute_affine(32, 32, 4), "affine_32x32_r2": permute_affine(32, 32, 2),
    "affine_32x64_r4": permute_affine(32, 64, 4),
    "vec4": permute_vec4(), "vec4_128": permute_vec4(wg=128),
    "vec4_c64_w32": permute_vec4(64, 32), "vec4_c32_w32": permute_vec4(32, 32, 128),
    "vec4_c32_w32_64": permute_vec4(32, 32, 64), "vec4_c16_w32": permute_vec4(16, 32, 128),
    "vec4_c32_w16": permute_vec4(32, 16, 128), "vec4_c16_w64": permute_vec4(16, 64, 128),
    "vec4_c16_w16": permute_vec4(16, 16, 64), "vec4_c32_w128": permute_vec4(32, 128),
    "vec4_c64_w64": permute_vec4(64, 64)}
# (cases, variants, the kernel they rewrite: a word of its name)
FAMILIES = [(WINDOW_CASES, WINDOW_VARIANTS, "matmul"), (GEMM_CASES, GEMM_VARIANTS, "matmul"),
            (PERMUTE_CASES, PERMUTE_VARIANTS, "")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="cases whose names contain one of these")
    ap.add_argument("--variants", default="", help="variants to run (default: all)")
    ap.add_argument("--knobs", default="", help="matmul knobs over the defaults (JSON)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default="baselines/wgsl_variants.json")
    args = ap.parse_args()
    keep_gpu_awake()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    dev = kernelwright.runtime.default_device()
    force = json.loads(args.knobs) if args.knobs else {}
    out = dict(device=dev.description, torch=torch.__version__, knobs=force, cases=[])
    for cases, family, word in FAMILIES:
        variants = {"generated": None, **family}
        if args.variants:
            variants = {n: f for n, f in variants.items() if n in args.variants.split(",")}
        for name in cases:
            if not variants or args.only and not any(o in name
                                                     for o in args.only.split(",")):
                continue
            module, sets, ref, ref_ms = case_reference(name, args.reps)
            base = kernelwright.compile(module, sets[0],
                                        choose=lambda r: {**r.default.knobs, **force}
                                               if force and r.kind == "matmul" else None)
            row = dict(case=name, torch_ms=ref_ms, variants=[])
            out["cases"].append(row)
            for vname, fn in variants.items():
                row["variants"].append(measure(vname, fn, base, module, sets, ref, ref_ms,
                                               word))
                print(json.dumps(dict(case=name, **row["variants"][-1])), flush=True)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


def measure(vname, fn, base, module, sets, ref, ref_ms, word: str = "matmul") -> dict:
    """One variant of the compiled case: its kernel whose name holds `word` (the only
    kernel for "") rewritten by `fn` (None: as generated; `fn` returns the source, new
    constants and, optionally, other fields of the kernel, e.g. its grid), checked
    against PyTorch's result and timed."""
    v = dict(variant=vname)
    try:
        plan = copy.deepcopy(base.plan)
        (k,) = [k for k in plan.kernels if word in k.name]
        v["knobs"] = k.knobs
        if fn is not None:
            source, constants, *fields = fn(k.source, plan, module)
            plan.kernels[plan.kernels.index(k)] = dataclasses.replace(
                k, source=source, **(fields[0] if fields else {}))
            plan.constants.update(constants)
        compiled = CompiledModule(plan)
        got = compiled(*sets[0], poison=True)
        err = (got - ref).abs().max().item()
        ms = time_candidate(compiled, sets).median_ms
        v.update(ms=round(ms, 4), ratio=round(ref_ms / ms, 4), max_abs_err=err,
                 correct=err <= 1e-4 * max(1.0, ref.abs().max().item()))
    except Exception as exc:  # noqa: BLE001 - recorded, the rest measured
        v["error"] = f"{type(exc).__name__}: {exc}"[:400]
    return v


if __name__ == "__main__":
    sys.exit(main())
