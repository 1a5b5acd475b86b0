"""The accelerated matmul on a real GPU's matrix units: what works, whether it is
right, and how fast it is against cuBLAS's f16 GEMM.

Run on the GPU machine (KERNELWRIGHT_RUNTIME=dawn: Dawn's subgroup matrices; else
wgpu-native's cooperative matrices, which no released wgpu-py enables):

    python tools/coop_matmul.py [--out results.json] [--sizes 4096,8192] [--quick | --space]

It writes a JSON (to --out, else $OUT/coop_matmul.json, else ./coop_matmul.json) and
prints as it goes:

1. the adapter: info, features, limits; the device's granted features and, if the
   cooperative-matrix feature was refused, why (runtime.Device.coop_error);
2. on wgpu-native, basic kernels, each alone in a try/except with naga's or the
   driver's error text: one 16x16 f16 x f16 -> f32 tile read with coopLoad and with
   coopLoadT (and which memory order each reads: column- or row-major), 8x8 f32, 16x16
   f16 -> f16 (on Dawn the adapter's subgroup-matrix configs and the unit chosen);
3. compiler.accelerated_unavailable: the probe compile(precision="accelerated") runs;
4. the matmul_coop template (kernelwright's real kernel, through build_plan) in
   several variants (VARIANTS: LOAD order, warp tiling, BK, and the pipeline's knobs
   VEC, PREFETCH, STAGES, GROUP, EPI; --quick: QUICK; --space: the whole knob space at
   the first size), each checked at an odd shape with
   partial tiles against torch.matmul of the f16-rounded operands (fp16 tolerance:
   atol = rtol = 1e-2) and then, if correct, checked and timed (GPU timestamps) at
   M = N = K = each size against torch's f16 matmul (cuBLAS, CUDA events) and
   kernelwright's strict fp32 matmul;
5. kernelwright.compile(nn.Linear, precision="accelerated") end to end, with its label.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import wgpu

from kernelwright import compiler, kernels
from kernelwright.ir.ir import CompileError, GraphBuilder
from kernelwright.options import CompileOptions, MatrixUnit
from kernelwright.runtime import runtime
from kernelwright.schedule.schedule import build_plan

TOL = 1e-2  # the fp16 tolerance: |kw - ref| <= TOL + TOL * |ref|

PIPE = {"VEC": 4, "PREFETCH": 1, "STAGES": 2}  # wide loads, prefetched, two stages
VARIANTS = {  # name -> knobs over matmul_coop_knobs' defaults for a large product
    "default": {},
    "load-row": {"LOAD": "row"},
    "load-rowT": {"LOAD": "rowT"},
    "load-col": {"LOAD": "col"},
    "load-k": {"LOAD": "k"},
    "load-mn": {"LOAD": "mn"},
    "warp64x64": {"WM": 64, "WN": 64},
    "warp32x64": {"WM": 32, "WN": 64},
    "bk16": {"BK": 16},
    "bk64": {"BK": 64},
    "pad0": {"PAD": 0},
    "tile128x64": {"BN": 64, "WM": 64, "WN": 32},
    "tile64x64": {"BM": 64, "BN": 64, "WM": 32, "WN": 32},
    # one knob of the pipeline at a time, then together (docs/DECISIONS.md)
    "vec4": {"VEC": 4},
    "prefetch": {"PREFETCH": 1},
    "stages2": {"STAGES": 2},
    "vec4-prefetch": {"VEC": 4, "PREFETCH": 1},
    "pipe": PIPE,
    "pipe-row": {**PIPE, "EPI": "row"},
    "pipe-group8": {**PIPE, "GROUP": 8},
    "pipe-bk16": {**PIPE, "BK": 16},
    "pipe-bk64": {**PIPE, "BK": 64},
    "pipe-pad16": {**PIPE, "PAD": 16},
    "pipe-pad0": {**PIPE, "PAD": 0},
    "pipe-warp64x64": {**PIPE, "WM": 64, "WN": 64},
    "pipe-tile128x256": {**PIPE, "BN": 256, "WM": 64, "WN": 64, "BK": 16},
    "pipe-tile256x128": {**PIPE, "BM": 256, "WM": 64, "WN": 64, "BK": 16},
    "pipe-tile128x256-bk32": {**PIPE, "BN": 256, "WM": 64, "WN": 64, "BK": 32},
    "all-tile128x256": {**PIPE, "BN": 256, "WM": 64, "WN": 64, "BK": 16, "EPI": "row",
                        "GROUP": 8},
}
# --quick (the `coop` task of tools/h200_session.sh): the load orders and the pipeline's
# knobs, alone and together, and the larger tiles
QUICK = ["default", "vec4", "prefetch", "stages2", "vec4-prefetch", "pipe", "pipe-row",
         "pipe-group8", "pipe-bk16", "pipe-bk64", "pipe-pad16", "pipe-warp64x64",
         "pipe-tile128x256", "pipe-tile256x128", "pipe-tile128x256-bk32", "all-tile128x256"]


def log(*args) -> None:
    print(*args, flush=True)


def err_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:4000]


# -- 1. the adapter ---------------------------------------------------------------------
def adapter_report(dev: runtime.Device) -> dict:
    a = dev.adapter
    rep = {"info": {k: str(v) for k, v in dict(a.info).items()},
           "adapter_features": sorted(a.features),
           "adapter_limits": dict(a.limits),
           "device_features": sorted(dev.device.features),
           "has_coop_matrix": dev.has_coop_matrix, "coop_error": dev.coop_error,
           "runtime": dev.runtime,
           "subgroup_matrix_configs": [str(c) for c in dev.subgroup_matrix_configs],
           "wgpu": wgpu.__version__}
    try:
        from wgpu.backends.wgpu_native import _ffi
        rep["wgpu_native"] = ".".join(map(str, _ffi.get_lib_version_info()))
    except Exception as exc:  # noqa: BLE001
        rep["wgpu_native"] = err_text(exc)
    log("adapter:", rep["info"])
    log("adapter features:", rep["adapter_features"])
    log("device features:", rep["device_features"])
    log("cooperative-matrix granted:", dev.has_coop_matrix, dev.coop_error or "")
    log("subgroup-matrix configs:", rep["subgroup_matrix_configs"])
    return rep


# -- 2. basic kernels -------------------------------------------------------------------
BASIC = """enable f16;
enable wgpu_cooperative_matrix;
@group(0) @binding(0) var<storage, read> a: array<{ab}>;
@group(0) @binding(1) var<storage, read> b: array<{ab}>;
@group(0) @binding(2) var<storage, read_write> c: array<{cr}>;
@compute @workgroup_size({wg})
fn main() {{
    var acc = {load}<coop_mat{t}x{t}<{cr}, C>>(&c[0], {t}u);
    for (var k = 0u; k < {kt}u; k += 1u) {{
        let x = {load}<coop_mat{t}x{t}<{ab}, A>>(&a[k * {t}u * {t}u], {t}u);
        let y = {load}<coop_mat{t}x{t}<{ab}, B>>(&b[k * {t}u * {t}u], {t}u);
        acc = coopMultiplyAdd(x, y, acc);
    }}
    {store}(acc, &c[0], {t}u);
}}
"""


def run_raw(dev: runtime.Device, source: str, arrays: list[np.ndarray], out_like: np.ndarray,
            grid=(1, 1, 1)) -> np.ndarray:
    d = dev.device
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
    bufs = []
    for arr in arrays + [out_like]:
        buf = d.create_buffer(size=max(16, (arr.nbytes + 15) // 16 * 16), usage=usage)
        d.queue.write_buffer(buf, 0, np.ascontiguousarray(arr))
        bufs.append(buf)
    module = d.create_shader_module(code=source)
    pipe = d.create_compute_pipeline(layout="auto", compute={"module": module,
                                                             "entry_point": "main"})
    group = d.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
        {"binding": i, "resource": {"buffer": b}} for i, b in enumerate(bufs)])
    enc = d.create_command_encoder()
    p = enc.begin_compute_pass()
    p.set_pipeline(pipe)
    p.set_bind_group(0, group)
    p.dispatch_workgroups(*grid)
    p.end()
    d.queue.submit([enc.finish()])
    raw = d.queue.read_buffer(bufs[-1])
    return np.frombuffer(raw, dtype=out_like.dtype, count=out_like.size).reshape(out_like.shape)


def basic_kernels(dev: runtime.Device) -> list[dict]:
    """Single-tile products straight from storage buffers; for each, whether the result
    matches the product with the tiles read column-major or row-major."""
    cases = [("f16xf16->f32 16 coopLoad", "f16", "f32", 16, "coopLoad", "coopStore"),
             ("f16xf16->f32 16 coopLoadT", "f16", "f32", 16, "coopLoadT", "coopStoreT"),
             ("f32xf32->f32 8 coopLoad", "f32", "f32", 8, "coopLoad", "coopStore"),
             ("f16xf16->f16 16 coopLoad", "f16", "f16", 16, "coopLoad", "coopStore")]
    npt = {"f16": np.float16, "f32": np.float32}
    results = []
    rng = np.random.default_rng(1)
    for name, ab, cr, t, load, store in cases:
        rec = {"name": name}
        kt = 2
        src = BASIC.format(ab=ab, cr=cr, t=t, wg=32, kt=kt, load=load, store=store)
        a = rng.standard_normal((kt, t, t)).astype(npt[ab])
        b = rng.standard_normal((kt, t, t)).astype(npt[ab])
        c0 = rng.standard_normal((t, t)).astype(npt[cr])
        try:
            got = run_raw(dev, src, [a, b], c0.copy()).astype(np.float64)
            # The same memory read as column-major (each stored tile transposed) or row-major.
            A, B, C = a.astype(np.float64), b.astype(np.float64), c0.astype(np.float64)
            col = sum(A[k].T @ B[k].T for k in range(kt)) + C.T  # result in column-major
            row = sum(A[k] @ B[k] for k in range(kt)) + C
            tol = 5e-2 if cr == "f16" else 1e-3
            rec["matches_column_major"] = bool(np.allclose(got.T, col, atol=tol, rtol=tol))
            rec["matches_row_major"] = bool(np.allclose(got, row, atol=tol, rtol=tol))
            rec["ok"] = rec["matches_column_major"] or rec["matches_row_major"]
        except Exception as exc:  # noqa: BLE001
            rec["ok"] = False
            rec["error"] = err_text(exc)
        log("basic:", rec)
        results.append(rec)
    return results


# -- 4. the template ----------------------------------------------------------------------
def template_plan(m: int, k: int, n: int, knobs: dict, unit: MatrixUnit):
    """A one-matmul plan through build_plan with the coop template for matrix unit
    `unit` and these knobs; raises CompileError when the template refuses them."""
    b = GraphBuilder()
    x, y = b.input((m, k), "f32", "x"), b.input((k, n), "f32", "y")
    out = b.matmul(x, y)
    b.graph.outputs.append(out)
    full = {**kernels.matmul_coop.matmul_coop_knobs(m, n, unit), **knobs}
    refusal: list[str] = []

    def choose(request):
        try:
            request.generate(full)
        except CompileError as exc:
            refusal.append(str(exc))
        return full

    plan = build_plan(b.graph, "single", {x: "float32", y: "float32", out: "float32"},
                      CompileOptions("accelerated", choose=choose, matrix=unit))
    if refusal:
        raise CompileError(refusal[0])
    kernel = plan.kernels[0]
    if not kernel.key.startswith("matmul_coop"):
        raise CompileError(f"the coop template was not selected: {kernel.key}")
    return plan, full


def reference(xs: np.ndarray, ys: np.ndarray, cuda: bool) -> torch.Tensor:
    """torch.matmul of the f16-rounded operands, in f32 (TF32 off)."""
    dev = "cuda" if cuda else "cpu"
    x = torch.from_numpy(xs).to(dev).half().float()
    y = torch.from_numpy(ys).to(dev).half().float()
    return torch.matmul(x, y)


def check(got: np.ndarray, ref: torch.Tensor) -> dict:
    g = torch.from_numpy(np.ascontiguousarray(got)).to(ref.device)
    diff = (g - ref).abs()
    bound = TOL + TOL * ref.abs()
    bad = int((~(diff <= bound)).sum())
    return {"correct": bad == 0, "bad_elements": bad, "max_abs_err": float(diff.max()),
            "max_ref": float(ref.abs().max())}


def time_kw(exe: runtime.Executable, sets: list, reps: int) -> float:
    exe.gpu_times_ms(sets, 3)  # warm-up
    return float(np.median(exe.gpu_times_ms(sets, reps)))


def time_cublas(s: int, reps: int) -> dict:
    a = torch.randn(s, s, device="cuda", dtype=torch.float16)
    b = torch.randn(s, s, device="cuda", dtype=torch.float16)
    times = []
    for i in range(reps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b)
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end))
    ms = float(np.median(times))
    return {"ms": ms, "tflops": 2 * s ** 3 / ms / 1e9}


def variant_knobs(dev: runtime.Device, unit: MatrixUnit, sizes: list[int], quick: bool,
                  space: bool) -> dict[str, dict]:
    """The variants to run, name -> knobs over the defaults: --space, every knob set of
    matmul_coop_space at the first size within the device's workgroup memory; --quick,
    the spelling's load orders and QUICK; else all of VARIANTS the spelling has."""
    loads = kernels.matmul_coop.MATRIX_LOADS[unit.api]
    if space:
        s = sizes[0]
        limit = dev.limits.get("max-compute-workgroup-storage-size", 16384)
        return {f"space{i}": knobs for i, knobs in enumerate(
            kernels.matmul_coop.matmul_coop_space(s, s, s, unit, workgroup_bytes=limit))}
    names = (QUICK[:1] + [f"load-{load}" for load in loads] + QUICK[1:] if quick
             else list(VARIANTS))
    return {name: VARIANTS[name] for name in names
            if VARIANTS[name].get("LOAD", loads[0]) in loads}


def template_variants(dev: runtime.Device, unit: MatrixUnit, sizes: list[int],
                      variants: dict[str, dict], cuda: bool, out: dict, save) -> None:
    """Each variant checked at an odd shape, then the correct ones timed at each size,
    recorded into `out` and saved (`save()`) after each, so that a run stopped at its
    time limit keeps what it measured."""
    rng = np.random.default_rng(2)
    odd = (1000, 1100, 900)  # M, K, N: partial tiles on every side
    xs = rng.standard_normal(odd[:2]).astype(np.float32)
    ys = rng.standard_normal(odd[1:]).astype(np.float32)
    ref_odd = reference(xs, ys, cuda)
    out.update({"odd_shape": odd, "variants": {}, "sizes": {}})
    correct = []
    for name, over in variants.items():
        rec: dict = {"knobs_over_defaults": over}
        try:
            plan, knobs = template_plan(*odd, over, unit)
            rec["knobs"] = knobs
            (got,) = runtime.Executable(plan, dev).run([xs, ys])
            rec.update(check(got, ref_odd))
            if rec["correct"]:
                correct.append(name)
        except Exception as exc:  # noqa: BLE001
            rec["correct"] = False
            rec["error"] = err_text(exc)
        log(f"variant {name} at {odd}:", {k: v for k, v in rec.items() if k != "knobs"})
        out["variants"][name] = rec
        save()
    for s in sizes:
        reps = 20 if s <= 4096 else 10
        srec: dict = {"flops": 2 * s ** 3}
        xs = rng.standard_normal((s, s)).astype(np.float32)
        ys = rng.standard_normal((s, s)).astype(np.float32)
        ref = reference(xs, ys, cuda)
        sets = [[xs, ys]]
        if cuda:
            try:
                srec["cublas_f16"] = time_cublas(s, reps)
            except Exception as exc:  # noqa: BLE001
                srec["cublas_f16"] = {"error": err_text(exc)}
        log(f"size {s}: cuBLAS f16", srec.get("cublas_f16"))
        try:  # kernelwright's strict fp32 kernel, for scale
            b = GraphBuilder()
            x, y = b.input((s, s), "f32", "x"), b.input((s, s), "f32", "y")
            o = b.matmul(x, y)
            b.graph.outputs.append(o)
            plan = build_plan(b.graph, "single", {x: "float32", y: "float32", o: "float32"},
                              CompileOptions())
            ms = time_kw(runtime.Executable(plan, dev), sets, max(5, reps // 2))
            srec["kw_strict_fp32"] = {"ms": ms, "tflops": 2 * s ** 3 / ms / 1e9}
        except Exception as exc:  # noqa: BLE001
            srec["kw_strict_fp32"] = {"error": err_text(exc)}
        log(f"size {s}: kw strict fp32", srec["kw_strict_fp32"])
        srec["variants"] = {}
        out["sizes"][str(s)] = srec
        for name in correct:
            rec = {}
            try:
                plan, _ = template_plan(s, s, s, variants[name], unit)
                exe = runtime.Executable(plan, dev)
                (got,) = exe.run([xs, ys])
                rec.update(check(got, ref))
                ms = time_kw(exe, sets, reps)
                rec.update(ms=ms, tflops=2 * s ** 3 / ms / 1e9)
                cub = srec.get("cublas_f16", {}).get("ms")
                if cub:
                    rec["fraction_of_cublas_f16"] = cub / ms
            except Exception as exc:  # noqa: BLE001
                rec["error"] = err_text(exc)
            log(f"size {s}: variant {name}", rec)
            srec["variants"][name] = rec
            save()


# -- 5. end to end ------------------------------------------------------------------------
def end_to_end(dev: runtime.Device) -> dict:
    import kernelwright

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 384), torch.nn.ReLU()).eval()
    x = torch.randn(200, 512)
    rec: dict = {}
    try:
        cm = kernelwright.compile(model, [x], device=dev, precision="accelerated")
        rec["precision"] = cm.precision
        rec["kernels"] = [k.key.split(" ")[0] for k in cm.plan.kernels]
        got = cm(x)
        lin = model[0]
        want = torch.relu(x.half().float() @ lin.weight.half().float().T + lin.bias)
        diff = (got - want).abs()
        rec["max_abs_err"] = float(diff.max())
        rec["correct"] = bool((diff <= TOL + TOL * want.abs()).all())
    except Exception as exc:  # noqa: BLE001
        rec["error"] = err_text(exc)
        rec["traceback"] = traceback.format_exc()[-3000:]
    log("end to end:", {k: v for k, v in rec.items() if k != "traceback"})
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="JSON path (default $OUT/coop_matmul.json)")
    ap.add_argument("--sizes", default="4096,8192", help="square sizes to time")
    ap.add_argument("--quick", action="store_true",
                    help="the LOAD variants, the pipeline's knobs and the larger tiles")
    ap.add_argument("--space", action="store_true",
                    help="every knob set of matmul_coop_space, at the first size only")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else Path(os.environ.get("OUT", ".")) / "coop_matmul.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.perf_counter()
    dev = runtime.default_device()
    result: dict = {"torch": torch.__version__, "cuda": cuda,
                    "cuda_device": torch.cuda.get_device_name() if cuda else None}

    def save() -> None:
        result["wall_s"] = time.perf_counter() - t0
        out.write_text(json.dumps(result, indent=1, default=str))

    result["adapter"] = adapter_report(dev)
    save()
    unit = compiler.device_matrix(dev)
    result["matrix_unit"] = str(unit)
    log("matrix unit:", unit)
    if unit is None:
        log("no matrix unit on this device:", compiler._no_matrix_unit(dev))
        save()
        return 1
    if unit.api == "cooperative-matrix":
        result["basic"] = basic_kernels(dev)
        save()
    result["probe"] = compiler.accelerated_unavailable(dev)
    log("accelerated_unavailable:", result["probe"])
    save()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.space:
        sizes = sizes[:1]
    variants = variant_knobs(dev, unit, sizes, args.quick, args.space)
    result["template"] = {}
    try:
        template_variants(dev, unit, sizes, variants, cuda, result["template"], save)
    except KeyboardInterrupt:  # the session's time limit (SIGINT): keep what was measured
        result["template"]["stopped"] = "interrupted at the time limit"
        save()
        log(f"interrupted; wrote {out}")
        return 1
    save()
    result["end_to_end"] = end_to_end(dev)
    save()
    log(f"wrote {out} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
