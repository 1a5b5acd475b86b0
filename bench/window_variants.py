"""Where a convolution's implicit GEMM loses time against the same product from stored
operands: the generated kernel of a 3x3 convolution, timed as generated and with its
window loader (`load_b`) rewritten by hand, each rewrite checked against PyTorch.

    python bench/window_variants.py [--only NAME,...] [--out FILE]

Variants (all from the default plan of the case, only the WGSL text or the weight
constant changed):
  generated   the compiler's kernel
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
The JSON is written after each variant."""

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
from kernelwright.bench.timing import time_candidate  # noqa: E402
from kernelwright.compiler import CompiledModule  # noqa: E402

WINDOW_CASES = ("conv3x3_128ch_56x56_b64", "conv3x3_128to192_64x64_b32",
                "conv3x3_64ch_128x128_b32")


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


VARIANTS = {"generated": None, "plain_b": plain_b, "no_select": no_select,
            "tap_major": tap_major, "shared_decode": shared_decode,
            "tap_major_shared": tap_major_shared}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default="bench/results/window_variants.json")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    dev = kernelwright.runtime.default_device()
    out = dict(device=dev.description, torch=torch.__version__, cases=[])
    for name in WINDOW_CASES:
        if args.only and not any(o in name for o in args.only.split(",")):
            continue
        module, sets, ref, ref_ms = case_reference(name, args.reps)
        base = kernelwright.compile(module, sets[0])
        row = dict(case=name, torch_ms=ref_ms, variants=[])
        out["cases"].append(row)
        for vname, fn in VARIANTS.items():
            v = dict(variant=vname)
            try:
                plan = copy.deepcopy(base.plan)
                (k,) = [k for k in plan.kernels if "matmul" in k.name]
                if fn is not None:
                    source, constants = fn(k.source, plan, module)
                    plan.kernels[plan.kernels.index(k)] = dataclasses.replace(k, source=source)
                    plan.constants.update(constants)
                compiled = CompiledModule(plan)
                got = compiled(*sets[0], poison=True)
                err = (got - ref).abs().max().item()
                ms = time_candidate(compiled, sets).median_ms
                v.update(ms=round(ms, 4), ratio=round(ref_ms / ms, 4),
                         max_abs_err=err, correct=err <= 1e-4 * max(1.0, ref.abs().max().item()))
            except Exception as exc:  # noqa: BLE001 - recorded, the rest measured
                v["error"] = f"{type(exc).__name__}: {exc}"[:400]
            row["variants"].append(v)
            print(json.dumps(dict(case=name, **v)), flush=True)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
