"""Output checks where the outputs are: two buffers compared on the GPU.

The sandbox (optimize/sandbox.py) checks a candidate kernel against the compiler's on
several input sets at the kernel's full size. Read back and compared on the CPU, a
2 GB output cost two 2 GB reads and a compare per input set, and the inputs were read
back again to see that the candidate left them alone; six searches side by side ran
out of host memory and past their time limit on the H200's host. `compare_buffers`
reads back six words instead:

- the verdict of `check.tolerance.compare`, element by element: fp32 within `KERNEL_ATOL * max(1,
  max |want|)` where `want` is finite (the peak found by a first pass; the tolerance
  computed from it on the host exactly as `compare` does), else the same infinity or
  a NaN for a NaN; other dtypes (and `exact`) bit for bit;
- the count of elements outside it and the first one's index;
- how many are NaN where a finite value was expected (poison left in place);
- the largest |got - want| over the finite expected elements (fp32).

A mismatch is then read back and described by `check.tolerance.compare` on the CPU, which has
the last word. NaN and infinity are told by their bits: WGSL lets a shader compiler
assume that floats are finite.

`check_kernel` is the one check of a candidate kernel against a reference kernel, for
the sandbox (a search's candidates) and the tuner (a template's settings) alike: both
run on `trials` input sets, drawn one at a time, the outputs poisoned with NaN first
and compared here, the inputs compared with the reference's copies (a kernel must
leave them as uploaded), and a mismatch described, or called a cheat, on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import wgpu

from ..check.inputs import KERNEL_DISTRIBUTIONS
from ..check.tolerance import compare, kernel_atol
from ..harness.gpulock import GpuLock

WG = 256
MAX_GROUPS = 4096  # a grid-stride loop covers the rest
_STATS = 6  # words: peak, bad, first, unwritten, max err, limit

_PREAMBLE = """@group(0) @binding(0) var<storage, read> want: array<u32>;
@group(0) @binding(1) var<storage, read> got: array<u32>;
@group(0) @binding(2) var<storage, read_write> stats: array<atomic<u32>>;
const N: u32 = {n}u;
const STRIDE: u32 = {stride}u;
fn finite(b: u32) -> bool {{ return (b & 0x7f800000u) != 0x7f800000u; }}
fn is_nan(b: u32) -> bool {{ return (b & 0x7fffffffu) > 0x7f800000u; }}
"""

# Pass 1 (fp32): max |want| over the finite elements, as bits (non-negative floats order
# as their bits do); one global atomic per workgroup.
_PEAK = """var<workgroup> w_peak: atomic<u32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    if (li == 0u) { atomicStore(&w_peak, 0u); }
    workgroupBarrier();
    var m = 0u;
    for (var i = gid.x; i < N; i += STRIDE) {
        let w = want[i];
        if (finite(w)) { m = max(m, w & 0x7fffffffu); }
    }
    atomicMax(&w_peak, m);
    workgroupBarrier();
    if (li == 0u) { atomicMax(&stats[0], atomicLoad(&w_peak)); }
}
"""

# Pass 2: the element-wise verdict (FLOAT: check.tolerance.compare's fp32 rule, the tolerance in
# stats[5]; else bit for bit), counted per workgroup, then once per workgroup globally.
_COUNT = """const FLOAT: bool = $FLOAT;
var<workgroup> w_bad: atomic<u32>;
var<workgroup> w_first: atomic<u32>;
var<workgroup> w_unwritten: atomic<u32>;
var<workgroup> w_err: atomic<u32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    if (li == 0u) {
        atomicStore(&w_bad, 0u);
        atomicStore(&w_first, 0xffffffffu);
        atomicStore(&w_unwritten, 0u);
        atomicStore(&w_err, 0u);
    }
    workgroupBarrier();
    let limit = bitcast<f32>(atomicLoad(&stats[5]));
    var bad = 0u;
    var first = 0xffffffffu;
    var unwritten = 0u;
    var err = 0u;
    for (var i = gid.x; i < N; i += STRIDE) {
        let w = want[i];
        let g = got[i];
        var wrong = false;
        if (!FLOAT) {
            wrong = w != g;
        } else if (finite(w)) {
            if (!finite(g)) {
                wrong = true;
                if (is_nan(g)) { unwritten += 1u; }
            } else {
                let d = abs(bitcast<f32>(g) - bitcast<f32>(w));
                let db = bitcast<u32>(d);
                if (!finite(db) || d > limit) { wrong = true; }
                if (finite(db)) { err = max(err, db); }
            }
        } else {
            wrong = !(w == g || (is_nan(w) && is_nan(g)));
        }
        if (wrong) {
            bad += 1u;
            first = min(first, i);
        }
    }
    atomicAdd(&w_bad, bad);
    atomicMin(&w_first, first);
    atomicAdd(&w_unwritten, unwritten);
    atomicMax(&w_err, err);
    workgroupBarrier();
    if (li == 0u) {
        atomicAdd(&stats[1], atomicLoad(&w_bad));
        atomicMin(&stats[2], atomicLoad(&w_first));
        atomicAdd(&stats[3], atomicLoad(&w_unwritten));
        atomicMax(&stats[4], atomicLoad(&w_err));
    }
}
"""


@dataclass
class Verdict:
    """What `compare_buffers` found."""

    bad: int  # elements outside the tolerance (or not bit-equal)
    first: int | None  # index of the first of them
    unwritten: int  # NaN where a finite value was expected
    max_abs_err: float  # max |got - want| over the finite expected elements (fp32)

    @property
    def ok(self) -> bool:
        return self.bad == 0


def compare_buffers(device, want: wgpu.GPUBuffer, got: wgpu.GPUBuffer, n: int,
                    dtype: str) -> Verdict:
    """Compare the first `n` elements of two buffers on `device` (a runtime.Device):
    `dtype` "f32" by check.tolerance.compare's rule, anything else ("i32", "bool", "exact") bit for
    bit (see the module docstring)."""
    d = device.device
    n = max(1, int(n))
    groups = min(MAX_GROUPS, -(-n // WG))
    head = _PREAMBLE.format(n=n, stride=groups * WG)
    stats = d.create_buffer(size=4 * _STATS, usage=wgpu.BufferUsage.STORAGE
                            | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC)
    init = np.zeros(_STATS, np.uint32)
    init[2] = 0xFFFFFFFF
    d.queue.write_buffer(stats, 0, init)
    is_float = dtype == "f32"

    def dispatch(source: str) -> np.ndarray:
        pipe = device.pipeline(source, trusted=True)
        group = device.bind_group(source, pipe, [want, got, stats])
        enc = d.create_command_encoder()
        p = enc.begin_compute_pass()
        p.set_pipeline(pipe)
        p.set_bind_group(0, group)
        p.dispatch_workgroups(groups, 1, 1)
        p.end()
        d.queue.submit([enc.finish()])
        return np.frombuffer(d.queue.read_buffer(stats), dtype=np.uint32).copy()

    if is_float:
        peak = float(np.array(dispatch(head + _PEAK)[0], np.uint32).view(np.float32))
        limit = np.float32(kernel_atol(peak))  # exactly as check.tolerance.compare
        d.queue.write_buffer(stats, 4 * 5, np.array([limit], np.float32).view(np.uint32))
    words = dispatch(head + _COUNT.replace("$FLOAT", "true" if is_float else "false"))
    bad = int(words[1])
    return Verdict(bad=bad, first=int(words[2]) if bad else None, unwritten=int(words[3]),
                   max_abs_err=float(np.array(words[4], np.uint32).view(np.float32))
                   if is_float else 0.0)


@dataclass
class KernelCheck:
    """What `check_kernel` found: status "correct", "mismatch" or "rejected" (a cheat:
    poison left in place, an input written, an output equal to an input or constant
    where the reference's varies), the message, the largest error over the input sets,
    and input set 0 (kept for timing)."""

    status: str
    message: str
    max_abs_err: float
    first: list


def check_kernel(device, reference, candidate, input_set: Callable[[int], list],
                 trials: int, lock=None) -> KernelCheck:
    """Check `candidate` against `reference` (two runtime.Executable of one kernel each,
    the same buffers) on input sets `input_set(0) .. input_set(trials - 1)` (see the
    module docstring); `lock` a harness.gpulock.GpuLock held shared around the GPU work
    (default: the harness's, from the environment)."""
    if lock is None:
        lock = GpuLock.from_env()
    out_r, out_c = reference.plan.outputs[0], candidate.plan.outputs[0]
    dtype = reference.plan.buffers[out_r.buffer].dtype
    n_out = int(np.prod(out_c.shape))
    first, max_err = None, 0.0
    for t in range(max(1, trials)):
        arrays = input_set(t)
        first = arrays if t == 0 else first
        with lock.shared():
            for e in (reference, candidate):
                e.poison()
                e.dispatch(arrays)
            verdict = compare_buffers(device, reference.buffers[out_r.buffer],
                                      candidate.buffers[out_c.buffer], n_out, dtype)
            # the reference (a kernel of kernelwright's) leaves its inputs as uploaded
            written = [k for k, (r, c) in enumerate(zip(reference.plan.inputs,
                                                        candidate.plan.inputs))
                       if not compare_buffers(device, reference.buffers[r.buffer],
                                              candidate.buffers[c.buffer], arrays[k].size,
                                              "exact").ok]
        if written:
            return KernelCheck("rejected", f"writes into input buffer {written[0]}", max_err,
                               first)
        found = None
        if not verdict.ok:  # read back and described by check.tolerance.compare, which decides
            with lock.shared():
                want, got = reference.read(out_r), candidate.read(out_c)
            found = compare(want, got, dtype)
        if found is not None:
            label = f"input set {t} ({KERNEL_DISTRIBUTIONS[t % len(KERNEL_DISTRIBUTIONS)]})"
            return KernelCheck(*_cheat_or_mismatch(label, found, arrays, got), max_err, first)
        max_err = max(max_err, verdict.max_abs_err)
    return KernelCheck("correct", f"matches the reference on {max(1, trials)} input sets "
                       f"(max |err| {max_err:.3g})", max_err, first)


def _cheat_or_mismatch(label: str, found, arrays: list, got: np.ndarray) -> tuple[str, str]:
    if found.unwritten:
        return "rejected", (f"{label}: {found.unwritten} of {found.size} output elements left "
                            f"unwritten (the NaN poison is still there); {found.describe()}")
    for k, a in enumerate(arrays):
        if a.size == got.size and np.array_equal(a.reshape(-1).view(np.uint32),
                                                 got.reshape(-1).view(np.uint32)):
            return "rejected", (f"{label}: the output is a copy of input buffer {k}; "
                                f"{found.describe()}")
    flat = got.reshape(-1)
    if flat.size > 1 and np.all(flat == flat[0]):
        return "rejected", (f"{label}: the output is the constant {flat[0]} everywhere; "
                            f"{found.describe()}")
    return "mismatch", f"{label}: {found.describe()}"
