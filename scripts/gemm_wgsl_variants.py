"""Exploratory: hand-made variants of the matmul template's WGSL for one GEMM (text
edits of the kernel the compiler makes), each checked against PyTorch and timed against
cuBLAS in the same process. Not the compiler: what wins goes into templates.py and is
measured again through bench/kernels.py.

    python scripts/gemm_wgsl_variants.py M K N VARIANT[,VARIANT...] [--knobs JSON]
                                         [--json OUT.jsonl]

VARIANTS: base (the compiler's kernel), unroll (the K step's inner loop written out; the
default since 2026-12-01j, so it applies with --knobs ... "UNROLL": 0),
warp8x4 / warp4x8 (invocations numbered so that a warp covers 8 x 4 or 4 x 8 of the
16 x 16 block grid instead of 16 x 2), warp8x4_unroll, store_half / store_quarter (the
next tile's stores moved half or a quarter of the way into the written-out K step).
--knobs forces the template's
knobs (tune.choosing). On the H200, `h200_session.sh gemmvar` runs one variant per
process with NVIDIA's shader cache kept, so that each one's machine code can be read
here with scripts/nv_shader_stats.py DIR --sass OUT. Results of 2026-12-01j:
bench/results/gemm_wgsl_variants_h200_2026-12-01j.jsonl.
"""
import json
import os
import re
import statistics
import sys
import warnings

import numpy as np
import torch

from kernelwright import tune
from kernelwright.bench.timing import keep_gpu_awake
from kernelwright.compiler import plan_module
from kernelwright.runtime import Executable


class MM(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


def block_end(src, start):
    depth = 0
    for i in range(start, len(src)):
        if src[i] == "{":
            depth += 1
        elif src[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced")


def unroll(src):
    m = re.search(r"for \(var kq = 0; kq < (\d+); kq \+= 4\) \{", src)
    if not m:
        return None
    end = block_end(src, m.end() - 1)
    body = src[m.end():end]
    copies = "".join(f"{{ let kq = {q};{body}}}\n" for q in range(0, int(m.group(1)), 4))
    return src[:m.start()] + copies + src[end + 1:]


def warp_layout(wx):
    """Warps of wx x (32 / wx) invocations instead of rows of 16."""
    wy = 32 // wx
    def f(src):
        old = "    let tx = i32(lid.x);\n    let ty = i32(lid.y);\n    let lin = i32(li);"
        if old not in src:
            return None
        tx_warps = 16 // wx
        new = ("    let lin = i32(li);\n"
               f"    let tx = ((lin >> 5u) % {tx_warps}) * {wx} + (lin % {wx});\n"
               f"    let ty = ((lin >> 5u) / {tx_warps}) * {wy} + ((lin % 32) / {wx});")
        return src.replace(old, new)
    return f


def store_at(fraction):
    """The next tile's stores (into the buffer no step reads) moved from the end of the
    written-out K step to before its block `fraction` of the way through, so that the
    driver cannot sink the tile's global loads to late in the step (it placed them about
    three quarters of the way through, 2026-12-01j)."""
    def f(src):
        store = r"\n        \{ tile_[ab]\[\(1 - cur\) \* \d+ \+ s[ab]\d+\] = p[ab]\d+; \}"
        stores = re.findall(store, src)
        blocks = re.findall(r"\n        \{\n            let kq = (\d+);", src)
        if not stores or len(blocks) < 2:
            return None
        at = int(blocks[int(len(blocks) * fraction)])
        for line in stores:
            src = src.replace(line, "", 1)
        mark = f"\n        {{\n            let kq = {at};"
        return src.replace(mark, "".join(stores) + mark, 1)
    return f


VARIANTS = {
    "base": lambda s: s,
    "unroll": unroll,
    "warp8x4": warp_layout(8),
    "warp4x8": warp_layout(4),
    "warp8x4_unroll": lambda s: unroll(warp_layout(8)(s)),
    "store_half": store_at(0.5),  # before the third of four vec4 blocks (BK 16)
    "store_quarter": store_at(0.25),
}


def main():
    os.environ["KERNELWRIGHT_TUNE"] = "off"  # the template's defaults, no tuning cache
    warnings.filterwarnings("ignore")
    M, K, N = (int(x) for x in sys.argv[1:4])
    names = sys.argv[4].split(",")
    knobs = json.loads(sys.argv[sys.argv.index("--knobs") + 1]) if "--knobs" in sys.argv else None
    keep_gpu_awake()
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    if torch.cuda.is_available():
        ca, cb = a.cuda(), b.cuda()
        ref = (ca @ cb).cpu().numpy()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        for _ in range(10):
            ca @ cb
        ts = []
        for _ in range(50):
            ev[0].record()
            ca @ cb
            ev[1].record()
            torch.cuda.synchronize()
            ts.append(ev[0].elapsed_time(ev[1]))
        torch_ms = statistics.median(ts)
    else:
        ref, torch_ms = (a.double() @ b.double()).float().numpy(), float("nan")
    if knobs:
        with tune.choosing(lambda req: knobs):
            plan = plan_module(MM(), [a, b], "strict")
    else:
        plan = plan_module(MM(), [a, b], "strict")
    assert len(plan.kernels) == 1, [k.name for k in plan.kernels]
    base_src = plan.kernels[0].source
    out = []
    for name in names:
        src = VARIANTS[name](base_src)
        if src is None:
            print(f"{name}: not applicable", flush=True)
            continue
        plan.kernels[0].source = src
        exe = Executable(plan)
        res = exe.run([a.numpy(), b.numpy()])[0]
        err = float(np.abs(res - ref).max()) / float(np.abs(ref).max())
        exe.gpu_times_ms([[a.numpy(), b.numpy()]], 10)
        ms = statistics.median(exe.gpu_times_ms([[a.numpy(), b.numpy()]], 40))
        row = dict(variant=name, M=M, K=K, N=N, knobs=plan.kernels[0].knobs, ms=ms,
                   torch_ms=torch_ms, ratio=torch_ms / ms, rel_err=err,
                   tflops=2 * M * N * K / ms / 1e9)
        print(json.dumps(row), flush=True)
        out.append(row)
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "a") as f:
            for r in out:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
