"""Verification: judge a candidate against the PyTorch reference, whoever made it.

`verify` takes the reference model, the problem's own input generator and a
*candidate factory* ``make(model, example_inputs) -> callable``; kernelwright's own
factory is ``lambda m, x: kernelwright.compile(m, x)``, the search agent's are
others. Nothing here depends on how a candidate was made. It hands back a
`Verification`: the `Verdict` (compiled, correct, the reason for a rejection, the
trials run, the compile time) and the candidate itself, for timing.

Each defence answers one loophole that fooled published kernel agents:

- fresh inputs every trial, several seeds and distributions: the problem's own,
  normal and heavy-tailed (Student-t, clipped) with the own inputs' range kept
  (positive stays positive, [0, 1] stays [0, 1]; integer inputs as drawn), so
  analytic shortcuts that hold only for uniform inputs fail;
- the candidate runs *before* the reference in every trial and every reference
  output is filled with NaN once compared, so memory still holding an old
  reference output can never be the right answer ("nan/poison", "mismatch");
- one trial writes new values in place into the *same* tensor objects as an
  earlier trial, catching outputs cached by input identity ("stale-on-reuse"),
  then calls the candidate again on them ("not-deterministic-on-reuse");
- outputs poisoned before each run (``poison=True`` where the candidate takes it),
  every element checked: shape, dtype, no NaN/Inf where the reference is finite,
  ``|a - b| <= atol + rtol * |b|`` with tolerances by the output's dtype
  (check.tolerance: 1e-2 for fp16/bf16, as KernelBench; ``bench --dtype``); in strict
  mode a float output outside it is judged again against a float64 run of the
  reference, within the tolerance or 4x PyTorch's own error there (FP32_NOISE_FACTOR):
  long fp32 sums added in another order than PyTorch's pass, fp16/TF32 arithmetic in
  an fp32 problem does not; a half problem's PyTorch reference, rounded at every op, may
  be further from float64 than a candidate computing in f32 and rounding once;
- degenerate problems (reference output constant or near zero) are flagged;
  a near-zero output must also carry the reference's signal to 10%, and a
  reference that is constant on every distribution tried cannot tell a real
  kernel from a do-nothing one, so no candidate passes it ("degenerate-*");
  but an output below the tolerance on every input that still varies (a softmax
  over a row of 50000 uniform values: every probability ~2e-5) is "tiny": its
  outputs are checked with atol scaled to max |ref| of each output (rtol as usual),
  and a candidate that passes is correct with the flag "scaled-tolerance";
- another shape where the problem allows: the leading dimension changed, a new
  candidate made by the factory, and verified ("alt-shape-failed");
- the candidate runs under a dispatch mode that records PyTorch's ATen ops; any
  compute op means PyTorch did the work ("calls-pytorch");
- the reference is a private copy of the model, and PyTorch's functions and the
  model's classes are checked unchanged after the candidate ran
  ("tampered-reference").
- a module with state (a call changes its buffers or tensor attributes: a KV cache written
  in place, batch norm's running statistics in training mode; found by comparing the
  reference's state before and after its first call, or from a non-empty ``state()`` of
  the candidate, as kernelwright's `CompiledModule` has) is judged in *sequences*
  (`Verdict.sequence`): the candidate, made from the module as built, and a fresh copy of
  the reference start from the same state and make the same calls in the same order,
  `SEQUENCE_CALLS` per trial on inputs of consecutive seeds, every output compared; after
  each trial the candidate's ``state()``, where it has one, is compared with the
  reference's ("state"). The screens run on a copy of their own, so no extra call advances
  the state compared; a float64 re-judgement reruns the trial's calls so far in float64
  from the state the trial started with; the alt-shape candidate, made anew, is compared
  with a fresh reference.

How it runs, and what it holds: every trial is first *screened* (its inputs drawn,
the reference run on them, outputs poisoned at once) for the distributions the
problem allows and the output ranges the degenerate check needs; then the candidate
is made from example inputs of their own seed, which are not kept; then each trial's
inputs are drawn again from the trial's seed, identically, and checked. So at most
one trial's inputs exist at a time, besides trial 0's tensors kept for the reuse
trial, and none while the factory runs; a finished trial's tensors are emptied but
kept (`retire`), so that no later one has the identity of one the candidate saw
before, as when every trial's inputs were held. Inputs are drawn on the device
`own_inputs` draws on (the bench's worker draws them on the reference's GPU) and
copied to the CPU for the candidate only (`for_candidate`). Normal and heavy-tailed
values are drawn with torch generators; on the CPU chunk by chunk on a pool of
threads, each chunk seeded from the trial's seed (`fill_random`): the same values for
the same seed, whatever the number of threads. The reference's outputs stay on its
device (the GPU in the bench), where they are compared.
"""

from __future__ import annotations

import copy
import inspect
import math
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch._dynamo  # noqa: F401 - before any snapshot: see TamperGuard
from torch.utils._python_dispatch import TorchDispatchMode

from ..check.inputs import draw, seed_key
from ..check.tolerance import Tolerance, all_within, outside
from .oom import is_out_of_memory, reraise_oom

Candidate = Callable[..., Any]
Factory = Callable[[torch.nn.Module, list], Candidate]
InputSource = Callable[[int], list]
GpuSection = Callable[[], AbstractContextManager]

# Why a candidate was rejected: the short reason stored with each result.
REASONS = {
    "compile": "the factory failed to make a candidate (e.g. CompileError)",
    "runtime": "the candidate raised",
    "calls-pytorch": "the candidate ran PyTorch compute ops",
    "tampered-reference": "PyTorch or the reference model was changed by the candidate",
    "structure": "a different number or kind of outputs",
    "shape": "an output of the wrong shape",
    "dtype": "an output of the wrong dtype",
    "nan/poison": "NaN/Inf where the reference is finite (unwritten poisoned output)",
    "mismatch": "elements outside the tolerance",
    "stale-on-reuse": "wrong after new values were written into the same input tensors",
    "not-deterministic-on-reuse": "a second call on the same inputs gave another answer",
    "alt-shape-failed": "wrong, or failed to build, at another input shape",
    "degenerate-zero": "the reference is (near) zero and the candidate does not carry it",
    "degenerate-constant": "the reference is constant on every input: nothing can be verified",
    "state": "the state a call leaves (buffers it changes) differs from the reference's",
}

# ATen ops that only move data in and out; anything else is PyTorch computing.
ALLOWED_TORCH_OPS = frozenset({
    "_to_copy", "to", "clone", "copy_", "detach", "detach_", "alias", "lift_fresh",
    "lift_fresh_copy", "view", "_unsafe_view", "_reshape_alias", "reshape",
    "contiguous", "empty", "empty_like", "empty_strided", "new_empty",
    "new_empty_strided", "resolve_conj", "resolve_neg", "_local_scalar_dense",
    "set_", "is_pinned", "_pin_memory", "pin_memory", "sym_size", "sym_stride",
    "sym_numel", "sym_storage_offset", "dim", "size", "stride", "numel",
})

DISTRIBUTIONS = ("own", "normal", "heavy")
PROBE_DISTRIBUTIONS = ("normal*100", "normal*10000")
EXAMPLE_SEED_OFFSET = 7919  # example inputs for the factory never equal a trial's
NEAR_ZERO_FACTOR = 10.0  # max|ref| <= this * atol: a zero output would nearly pass
SIGNAL_FRACTION = 0.1  # near-zero outputs must match to this fraction of max|ref|
CHUNK = 1 << 22  # elements compared at a time, to bound temporary memory
# A float output outside the tolerance is judged again against a float64 run of the
# reference: it passes when every element is within the tolerance of the float64
# result, or within FP32_NOISE_FACTOR times PyTorch's own float32 error (the largest
# |float32 reference - float64 reference| of that output), whichever is larger. Long
# fp32 sums (a matmul with K = 2^14, a large reduction) differ from PyTorch's by
# more than 1e-4 near zero only because they add in another order; a kernel computing
# in fp16/TF32 (8192x the fp32 rounding) or wrongly is still far outside.
FP32_NOISE_FACTOR = 4.0
SEQUENCE_CALLS = 3  # calls per trial of a module with state, each on fresh inputs


class Rejected(Exception):
    """A candidate failed one check; `reason` is a key of REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class TrialSpec:
    """One correctness trial: where its inputs come from."""

    index: int
    distribution: str
    seed: int
    reuse: bool = False  # values written in place into trial 0's input tensors


@dataclass
class Verdict:
    """What verification found; `to_dict` is what the results store."""

    compiled: bool = False
    correct: bool = False
    reason: str | None = None
    detail: str = ""
    compile_s: float | None = None
    precision: str = "strict"
    degenerate: str | None = None  # "near-zero", "tiny", "constant", "zero"
    alt_shape: str | None = None  # the other shape tried, or why none was
    trials: list[dict] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # how a correct verdict was reached
    sequence: bool = False  # judged as sequences of calls: the module has state

    @property
    def error(self) -> str | None:
        if self.reason is None:
            return None
        return f"{self.reason}: {self.detail}" if self.detail else self.reason

    def to_dict(self) -> dict:
        data = asdict(self)
        data["error"] = self.error
        return data


@dataclass
class Verification:
    verdict: Verdict
    candidate: Candidate | None = None


# --- inputs -----------------------------------------------------------------


def describe_inputs(inputs: list) -> str:
    parts = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            dtype = str(x.dtype).removeprefix("torch.")
            parts.append(f"{dtype}{list(x.shape)}")
        else:
            parts.append(repr(x))
    return "(" + ", ".join(parts) + ")"


def value_stats(own: torch.Tensor) -> tuple[float, float, float, float, int]:
    """(min, max, mean, std, count) of the finite values of a float tensor; the values are
    only filtered (copied) when some are not finite."""
    values = own.detach().reshape(-1).float()
    lo, hi = (float(v) for v in torch.aminmax(values))
    if not (math.isfinite(lo) and math.isfinite(hi)):  # aminmax propagates NaN
        values = values[torch.isfinite(values)]
        if values.numel() == 0:
            return 0.0, 0.0, 0.0, 0.0, 0
        lo, hi = (float(v) for v in torch.aminmax(values))
    count = values.numel()
    if count < 2:
        return lo, hi, lo, 0.0, count
    mean = float(values.mean())
    # sum of squared deviations, chunk by chunk: ~5x faster than torch.std_mean here
    squares = sum(float((part - mean).square_().sum()) for part in values.split(CHUNK))
    return lo, hi, mean, math.sqrt(squares / (count - 1)), count


def synthesize_float(own: torch.Tensor, distribution: str, key: list[int],
                     shape: tuple) -> torch.Tensor:
    """A tensor like `own` (dtype, value range) drawn from another distribution."""
    lo, hi, mean, std, count = value_stats(own)
    same_shape = tuple(own.shape) == tuple(shape)
    if count == 0:
        return own.clone() if same_shape else torch.zeros(shape, dtype=own.dtype,
                                                          device=own.device)
    if hi == lo:  # a constant input is structure (a mask, a scale), not data
        return own.clone() if same_shape else torch.full(shape, lo, dtype=own.dtype,
                                                         device=own.device)
    z = draw(distribution, key, tuple(shape), own.device)
    if lo >= 0 and hi <= 1:  # stay in [0, 1], off-centre so that E[x] != 0.5
        widened = distribution.startswith("normal*")
        offset = 0.7 * (float(distribution.removeprefix("normal*")) if widened else 1.0)
        z.mul_(1.5).add_(offset).sigmoid_()  # 1 / (1 + exp(-(1.5 z + offset)))
    elif lo >= 0:  # stay positive (and above the own minimum when that is > 0)
        z.abs_().mul_(std).add_(lo)
    else:
        z.mul_(std).add_(mean)
    return z.to(own.dtype)


def synthesize_other(own: torch.Tensor, key: list[int], shape: tuple) -> torch.Tensor:
    """An integer or bool tensor of another shape, values within the own range."""
    rng = np.random.default_rng(key)
    if own.dtype == torch.bool:
        return torch.from_numpy(rng.random(shape) < 0.5).to(own.device)
    if own.numel() == 0:
        return torch.zeros(shape, dtype=own.dtype, device=own.device)
    lo, hi = (int(v) for v in torch.aminmax(own.reshape(-1)))
    return torch.from_numpy(rng.integers(lo, hi + 1, size=shape)).to(own.device, own.dtype)


def synthesize(own: list, distribution: str, seed: int,
               shapes: list[tuple] | None = None) -> list:
    """`own` with every float tensor redrawn from `distribution` (and `shapes`, if given);
    the values depend on `seed` and each tensor's position alone."""
    result = []
    for i, x in enumerate(own):
        if not isinstance(x, torch.Tensor):
            result.append(x)
            continue
        shape = tuple(shapes[i]) if shapes else tuple(x.shape)
        if x.is_floating_point() and x.numel() > 0:
            result.append(synthesize_float(x, distribution, seed_key(seed, i), shape))
        elif shape != tuple(x.shape):
            result.append(synthesize_other(x, seed_key(seed, i), shape))
        else:
            result.append(x)
    return result


def trial_inputs(own_inputs: InputSource, distribution: str, seed: int,
                 fresh: bool = False) -> list:
    """A trial's inputs, on the device `own_inputs` draws on; with `fresh`, the inputs a
    candidate is given: every tensor one the harness made (the problem's own are
    copied: its module may keep them), so that `retire` may empty it later, and on the
    CPU, where candidates take their inputs."""
    own = own_inputs(seed)
    drawn = own if distribution == "own" else synthesize(own, distribution, seed)
    return for_candidate(drawn, own) if fresh else drawn


def for_candidate(inputs: list, own: list = ()) -> list:
    """`inputs` as a candidate is given them: on the CPU, and copies of the tensors in
    `own` (the problem's) or elsewhere."""
    theirs = {id(x) for x in own if isinstance(x, torch.Tensor)}
    return [x.to("cpu", copy=True) if isinstance(x, torch.Tensor)
            and (id(x) in theirs or x.device.type != "cpu") else x for x in inputs]


def retire(inputs: list, spent: list) -> None:
    """Free a finished trial's tensors (harness-made: `trial_inputs(fresh=True)`) but keep
    the emptied objects in `spent`: freed, a later trial's tensor could get the same id
    and address as one the candidate saw, and an output cached by input identity could be
    found again before the reuse trial that is there to catch it."""
    for x in inputs:
        if isinstance(x, torch.Tensor):
            x.set_()
            spent.append(x)


def plan_trials(count: int, seed: int) -> list[TrialSpec]:
    """`count` trials cycling own/normal/heavy; the last rewrites trial 0's tensors."""
    plan = [TrialSpec(i, DISTRIBUTIONS[i % len(DISTRIBUTIONS)], seed + 101 * (i + 1))
            for i in range(count)]
    if count >= 2:
        plan[-1].reuse = True
    return plan


def alt_size(n: int) -> int:
    """Another size for a leading dimension: odd-ish and not a multiple of the first."""
    return n // 2 + 1 if n >= 3 else n + 1


def alt_shape_variants(own: list) -> list[list[tuple]]:
    """Input shapes to try, leading dimension changed: batch-like tensors, then the first."""
    tensors = [i for i, x in enumerate(own) if isinstance(x, torch.Tensor) and x.dim() >= 1]
    if not tensors:
        return []
    lead = own[tensors[0]].shape[0]
    new = alt_size(lead)
    variants = []
    for chosen in ([i for i in tensors if own[i].shape[0] == lead], tensors[:1]):
        shapes = [tuple(x.shape) if isinstance(x, torch.Tensor) else () for x in own]
        for i in chosen:
            shapes[i] = (new, *shapes[i][1:])
        if shapes not in variants:
            variants.append(shapes)
    return variants


# --- outputs ----------------------------------------------------------------


def flatten(out: Any) -> list:
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in flatten(item)]
    if isinstance(out, dict):
        return [leaf for key in sorted(out) for leaf in flatten(out[key])]
    return [out]


def storage_ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def poison_tensor(t: torch.Tensor) -> None:
    """Overwrite a tensor we are done with, so that no one can return its values."""
    with torch.no_grad():
        if t.is_floating_point() or t.is_complex():
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.logical_not_()
        else:
            t.fill_(torch.iinfo(t.dtype).min if t.dtype != torch.uint8 else 255)


@dataclass
class LeafStats:
    max_abs_err: float = 0.0
    max_ref: float = 0.0


def compare_device() -> torch.device:
    """Where outputs are compared: the CUDA GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def compare_leaf(c: Any, r: Any, tol: Tolerance, where: str,
                 exact: torch.Tensor | None = None, scaled: bool = False) -> LeafStats:
    """Check one candidate output against one reference output; raises Rejected.

    With `exact` (the reference run in float64), a float output is judged against it
    with the bound max(atol + rtol * |exact|, FP32_NOISE_FACTOR * max |r - exact|).
    With `scaled` (a "tiny" output: `classify_degenerate`), atol is multiplied by the
    largest finite |r|.
    """
    if not isinstance(r, torch.Tensor):
        if isinstance(c, torch.Tensor) and c.numel() == 1:
            c = c.item()
        if isinstance(r, float) and isinstance(c, (int, float)):
            if abs(c - r) <= 1e-4 + 1e-4 * abs(r):
                return LeafStats(abs(c - r), abs(r))
        elif c == r:
            return LeafStats()
        raise Rejected("mismatch", f"{where}: {c!r} != {r!r}")
    if not isinstance(c, torch.Tensor):
        raise Rejected("structure", f"{where}: expected a tensor, got {type(c).__name__}")
    c = c.detach()
    if c.device.type != "cpu":
        c = c.cpu()
    if tuple(c.shape) != tuple(r.shape):
        raise Rejected("shape", f"{where}: shape {list(c.shape)}, expected {list(r.shape)}")
    if c.dtype != r.dtype:
        raise Rejected("dtype", f"{where}: dtype {c.dtype}, expected {r.dtype}")
    if r.is_complex():
        c, r = torch.view_as_real(c), torch.view_as_real(r)
    cf, rf = c.reshape(-1), r.reshape(-1)
    n = rf.numel()
    if not r.is_floating_point():
        cf = cf.to(rf.device)
        wrong = int((cf != rf).sum())
        if wrong:
            first = int((cf != rf).nonzero()[0])
            raise Rejected("mismatch", f"{where}: {wrong} of {n} elements differ (first at "
                           f"flat index {first}: {cf[first].item()} vs {rf[first].item()})")
        return LeafStats()
    atol, rtol = tol.for_dtype(r.dtype)
    scale_note = ""
    if scaled:
        lo, hi, _ = leaf_range(r)
        atol *= max(abs(lo), abs(hi))
        scale_note = f" (scaled to max |ref| {max(abs(lo), abs(hi)):.3g})"
    work = torch.float64 if r.dtype == torch.float64 or exact is not None else torch.float32
    dev = compare_device()  # chunks are compared there: minutes on the CPU at 10^9 elements
    zero = torch.zeros((), dtype=work, device=dev)
    noise_bound = 0.0
    if exact is not None:
        ef = exact.detach().reshape(-1)
        noise = 0.0
        for start in range(0, n, CHUNK):
            rd = rf[start:start + CHUNK].to(dev, torch.float64)
            ed = ef[start:start + CHUNK].to(dev, torch.float64)
            finite = torch.isfinite(rd) & torch.isfinite(ed)
            if bool(finite.any()):
                noise = max(noise, float((rd - ed).abs()[finite].max()))
        noise_bound = FP32_NOISE_FACTOR * noise
    stats = LeafStats()
    max_cand = 0.0
    nan_count = bad_count = 0
    first_nan = first_bad = -1
    for start in range(0, n, CHUNK):
        cc = cf[start:start + CHUNK].to(dev, work)
        rr = rf[start:start + CHUNK].to(dev, work)
        passed = all_within(cc, rr, atol, rtol) if exact is None else None
        if passed is not None:  # the common case, in fewer passes over the chunk
            stats.max_abs_err = max(stats.max_abs_err, passed[0])
            stats.max_ref = max(stats.max_ref, passed[1])
            max_cand = max(max_cand, passed[2])
            continue
        r_finite, c_finite = torch.isfinite(rr), torch.isfinite(cc)
        lost = r_finite & ~c_finite
        same_nonfinite = (cc == rr) | (torch.isnan(cc) & torch.isnan(rr))
        both = r_finite & c_finite
        if exact is not None:  # against float64, allowing PyTorch's own fp32 error
            ee = ef[start:start + CHUNK].to(dev, work)
            both = both & torch.isfinite(ee)
            err = torch.where(both, (cc - ee).abs(), zero)
            bound = torch.clamp(atol + rtol * torch.where(both, ee.abs(), zero), min=noise_bound)
            bad = (both & (err > bound)) | (~r_finite & ~same_nonfinite)
        else:
            err = torch.where(both, (cc - rr).abs(), zero)
            bad = outside(cc, rr, atol, rtol) & ~lost
        if lost.any():
            nan_count += int(lost.sum())
            if first_nan < 0:
                first_nan = start + int(lost.nonzero()[0])
        if bad.any():
            bad_count += int(bad.sum())
            if first_bad < 0:
                first_bad = start + int(bad.nonzero()[0])
        if both.any():
            stats.max_abs_err = max(stats.max_abs_err, float(err.max()))
            stats.max_ref = max(stats.max_ref, float(rr[r_finite].abs().max()))
            max_cand = max(max_cand, float(cc[both].abs().max()))
    if nan_count:
        raise Rejected("nan/poison", f"{where}: {nan_count} of {n} elements are NaN/Inf where "
                       f"the reference is finite (first at flat index {first_nan})")
    if bad_count:
        against = "" if exact is None else (
            f" of the float64 reference and beyond {FP32_NOISE_FACTOR:g} x PyTorch fp32's own "
            f"max error ({noise_bound / FP32_NOISE_FACTOR:.3g})")
        raise Rejected("mismatch", f"{where}: {bad_count} of {n} elements outside "
                       f"atol={atol:g}{scale_note} rtol={rtol:g}{against}, max |diff| "
                       f"{stats.max_abs_err:.3g} (first at flat index {first_bad}: "
                       f"{cf[first_bad].item():.6g} vs {rf[first_bad].item():.6g})")
    near_zero = 0 < stats.max_ref <= NEAR_ZERO_FACTOR * atol
    if near_zero and stats.max_abs_err > SIGNAL_FRACTION * stats.max_ref:
        if max_cand <= SIGNAL_FRACTION * stats.max_ref:
            raise Rejected("degenerate-zero", f"{where}: the reference is near zero "
                           f"(max |ref| {stats.max_ref:.3g}) and the candidate returns ~0")
        raise Rejected("mismatch", f"{where}: near-zero reference (max |ref| "
                       f"{stats.max_ref:.3g}) matched only to {stats.max_abs_err:.3g}")
    return stats


def compare(cand_out: Any, ref_leaves: list, tol: Tolerance,
            exact_leaves: list | None = None,
            scaled: list[bool] | None = None) -> list[LeafStats]:
    """Check every output leaf (`compare_leaf`); `scaled[k]`: leaf k's atol is scaled."""
    cand_leaves = flatten(cand_out)
    if len(cand_leaves) != len(ref_leaves):
        raise Rejected("structure", f"{len(cand_leaves)} outputs, expected {len(ref_leaves)}")
    stats = []
    for k, (c, r) in enumerate(zip(cand_leaves, ref_leaves)):
        exact = exact_leaves[k] if exact_leaves is not None else None
        use = (exact if isinstance(exact, torch.Tensor) and isinstance(r, torch.Tensor)
               and r.is_floating_point() and r.dtype != torch.float64
               and tuple(exact.shape) == tuple(r.shape) else None)
        stats.append(compare_leaf(c, r, tol, f"output {k}" if len(ref_leaves) > 1 else "output",
                                  use, bool(scaled and scaled[k])))
    return stats


# --- the reference, and what guards it --------------------------------------


def empty_cache() -> None:
    """Return PyTorch's cached, unused GPU memory to the device (before a retry)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class Reference:
    """A private copy of the model on its device; its outputs stay there, as flat leaves
    (compared there: `compare_device`), and are poisoned by `release`."""

    def __init__(self, model: torch.nn.Module, device: str = "cpu") -> None:
        try:
            self.model = copy.deepcopy(model)
        except Exception:  # noqa: BLE001 - an uncopyable model is still usable as it is
            self.model, device = model, "cpu"  # but must not be moved under the candidate
        self.device = torch.device(device)
        self.copied = self.model is not model
        self.model.to(self.device).eval()
        self._model64: torch.nn.Module | None = None  # see float64

    def _owned_tensors(self) -> list[torch.Tensor]:
        owned = list(self.model.parameters()) + list(self.model.buffers())
        for module in self.model.modules():
            owned += [v for v in vars(module).values() if isinstance(v, torch.Tensor)]
        return owned

    def place(self, inputs: list) -> list:
        """A private copy of `inputs`, tensors copied straight to the reference's device."""
        return [x.detach().to(self.device, copy=True) if isinstance(x, torch.Tensor)
                else copy.deepcopy(x) for x in inputs]

    def __call__(self, inputs: list) -> list:
        args = self.place(inputs)  # the model may write into its arguments
        with torch.no_grad():
            return flatten(self.model(*args))

    def float64(self, inputs: list, fp32: list | None = None) -> list | None:
        """The outputs of a float64 copy of the model (made on first use) on float64
        copies of the float inputs, run and left on the reference's device; None when
        the model cannot run in float64. When it runs out of memory at once (float64
        attention over long rows: 160 GiB of scores), it is run a slice of the batch at
        a time where `fp32`, the float32 reference's outputs on the same inputs, shows
        that the model treats batch elements apart (`_float64_by_batch`)."""
        try:
            if self._model64 is None:
                self._model64 = copy.deepcopy(self.model).double()
            return self._run64(inputs)
        except Exception as exc:  # noqa: BLE001 - some models cannot run in float64
            if fp32 is not None and is_out_of_memory(exc):
                exc = exc.with_traceback(None)  # frees the frames that hold its tensors
                empty_cache()
                sliced = self._float64_by_batch(inputs, fp32)
                if sliced is not None:
                    return sliced
            reraise_oom(exc, "the float64 reference")
            return None

    def _run64(self, inputs: list) -> list:
        with torch.no_grad():
            return flatten(self._model64(*self.place64(inputs)))

    def place64(self, inputs: list) -> list:
        """`place`, with float tensors made float64."""
        return [x.detach().to(self.device, torch.float64, copy=True)
                if isinstance(x, torch.Tensor) and x.is_floating_point()
                else self.place([x])[0] for x in inputs]

    def rerun64(self, start: dict[str, torch.Tensor],
                calls: list[list]) -> tuple[list, dict[str, torch.Tensor]] | None:
        """A sequence of calls again in float64: a float64 copy of the model from the state
        `start` (`snapshot_state`) run on `calls` in order; the last call's outputs and the
        state it leaves, or None when the model cannot run in float64."""
        try:
            model = copy.deepcopy(self.model)
            load_state(model, start)
            model.double()
            load_state(model, start, torch.float64)  # attributes too, which double() skips
            leaves: list = []
            with torch.no_grad():
                for args in calls:
                    leaves = flatten(model(*self.place64(args)))
            return leaves, tensor_state(model)
        except Exception as exc:  # noqa: BLE001 - some models cannot run in float64
            reraise_oom(exc, "the float64 reference's sequence")
            return None

    def _float64_by_batch(self, inputs: list, fp32: list) -> list | None:
        """The float64 outputs computed over 2, 4, 8, ... slices of the leading (batch)
        dimension until the slices fit; None when the inputs and outputs do not share a
        leading dimension, or when the float32 model on a slice differs from the slice of
        its whole output (the batch elements are not independent: a statistic over the
        batch), or when even one batch element does not fit."""
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        batch = tensors[0].shape[0] if tensors and tensors[0].dim() else 0
        if (batch < 2 or any(x.dim() == 0 or x.shape[0] != batch for x in tensors)
                or any(not isinstance(r, torch.Tensor) or r.dim() == 0 or r.shape[0] != batch
                       for r in fp32)):
            return None
        pieces = 2
        while pieces <= 2 * batch:
            step = -(-batch // pieces)
            try:
                parts = []
                for start in range(0, batch, step):
                    part = [x[start:start + step] if isinstance(x, torch.Tensor) else x
                            for x in inputs]
                    if not self._same_as_slice(part, fp32, start, step):
                        return None
                    parts.append(self._run64(part))
                return [torch.cat([p[k] for p in parts]) for k in range(len(fp32))]
            except Exception as exc:  # noqa: BLE001 - only running out of memory is retried
                if not is_out_of_memory(exc):
                    raise
                parts = []
                empty_cache()
                pieces *= 2
        return None

    def _same_as_slice(self, part: list, fp32: list, start: int, step: int) -> bool:
        """Whether the model on `part` gives the slice [start, start + step) of every
        output in `fp32` (its own-precision outputs), to the strict tolerance of the
        output's dtype (1e-4 for float32, 1e-2 for half), atol scaled to each output's
        largest magnitude."""
        with torch.no_grad():
            own = flatten(self.model(*self.place(part)))
        if len(own) != len(fp32):
            return False
        for o, r in zip(own, fp32):
            want = r[start:start + step]
            if not isinstance(o, torch.Tensor) or o.shape != want.shape:
                return False
            scale = float(want.abs().max()) if want.numel() else 0.0
            atol, rtol = Tolerance().for_dtype(want.dtype)
            if not torch.allclose(o.to(want.dtype), want, rtol=rtol, atol=atol * scale,
                                  equal_nan=True):
                return False
        return True

    def release(self, leaves: list) -> None:
        """Poison outputs once compared (never the model's own tensors: its parameters and
        its state as it is now, which a call may have replaced)."""
        protected = {storage_ptr(t) for t in self._owned_tensors()}
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor) and storage_ptr(leaf) not in protected:
                poison_tensor(leaf)


# --- state: what a call leaves for the next ------------------------------------


def tensor_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's buffers and plain tensor attributes by dotted name, as
    `CompiledModule.state()` names them: what a call may change and the next one read."""
    state = dict(model.named_buffers())
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                state[f"{prefix}.{key}" if prefix else key] = value
    return state


def snapshot_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies of `tensor_state(model)`, to compare with or go back to (`load_state`)."""
    return {name: t.detach().clone() for name, t in tensor_state(model).items()}


def load_state(model: torch.nn.Module, state: dict[str, torch.Tensor],
               dtype: torch.dtype | None = None) -> None:
    """Give the module copies of `state` (a `snapshot_state`), float tensors cast to
    `dtype` when given."""
    for name, t in state.items():
        owner, _, key = name.rpartition(".")
        value = t.detach().clone()
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        setattr(model.get_submodule(owner), key, value)


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and values (NaN equal to NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)


def changed_state(before: dict[str, torch.Tensor], model: torch.nn.Module) -> list[str]:
    """The names of the module's state tensors that differ from `before` (or are new)."""
    return sorted(name for name, t in tensor_state(model).items()
                  if name not in before or not same_values(before[name], t.detach()))


def candidate_state(candidate: Candidate) -> dict[str, torch.Tensor] | None:
    """What the candidate's ``state()`` says it holds (kernelwright's `CompiledModule`
    has one), or None when it has no such method."""
    method = getattr(candidate, "state", None)
    if not callable(method):
        return None
    try:
        held = method()
    except Exception as exc:  # noqa: BLE001 - the candidate's own failure
        reraise_oom(exc, "the candidate's state()")
        raise Rejected("runtime", f"state(): {short_exception(exc)}") from exc
    return dict(held) if isinstance(held, dict) else None


class TamperGuard:
    """Remembers PyTorch's functions and the model's classes, to notice changes."""

    NAMESPACES: ClassVar[dict[str, Any]] = {
        "torch": torch,
        "torch.nn.functional": torch.nn.functional,
        "torch.Tensor": torch.Tensor,
        "torch._C.TensorBase": torch._C.TensorBase,
        "torch.nn.Module": torch.nn.Module,
    }

    def __init__(self, model: torch.nn.Module) -> None:
        # Importing dynamo wraps some of torch's functions (torch.manual_seed, ...); it
        # happens lazily, e.g. on a tensor's first .numpy() under a dispatch mode, so this
        # module imports it, before any snapshot, rather than take it for tampering later.
        self.model = model
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, int]:
        ids = {f"{prefix}.{name}": id(value)
               for prefix, namespace in self.NAMESPACES.items()
               for name, value in list(vars(namespace).items()) if callable(value)}
        for module in self.model.modules():
            cls = type(module)
            ids[f"{cls.__qualname__}.forward"] = id(cls.forward)
        hooks = torch.nn.modules.module
        for name in ("_global_forward_hooks", "_global_forward_pre_hooks"):
            ids[f"global {name}"] = len(getattr(hooks, name, {}))
        return ids

    def changed(self) -> list[str]:
        now = self.snapshot()
        return sorted(k for k, v in self.before.items() if now.get(k, v) != v)

    def check(self) -> None:
        changed = self.changed()
        if changed:
            raise Rejected("tampered-reference", "changed: " + ", ".join(changed[:8]))


class TorchOpRecorder(TorchDispatchMode):
    """Records every ATen op that runs; `compute_ops` are those that are not data movement."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    def compute_ops(self) -> dict[str, int]:
        return {k: v for k, v in self.counts.items() if k not in ALLOWED_TORCH_OPS}


def accepts_poison(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "poison" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def short_exception(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).strip()
    return text if len(text) <= 2000 else text[:2000] + " ..."


# --- the verification ---------------------------------------------------------


class Verifier:
    """Runs the trials of one candidate against one reference; see the module docstring."""

    def __init__(self, model: torch.nn.Module, own_inputs: InputSource, tol: Tolerance,
                 check_torch_calls: bool, reference_device: str,
                 gpu_section: GpuSection = nullcontext,
                 draw_section: GpuSection = nullcontext) -> None:
        self.gpu = gpu_section  # held around every run on the GPU (see `verify`)
        self.draw_section = draw_section  # held while inputs are drawn (see `verify`)
        self.model = model
        self.own_inputs = own_inputs
        self.tol = tol
        self.check_torch_calls = check_torch_calls
        self.reference_device = reference_device
        self.reference = Reference(model, reference_device)
        self.screener = self.reference  # runs the screens; a copy of its own once stateful
        self.start = snapshot_state(self.reference.model)  # the state as built
        self.stateful = False  # judged in sequences of calls (`detect_state`)
        self.state_names: list[str] = []  # the state tensors a call changes
        self.sequence_start: dict[str, torch.Tensor] = {}  # the reference's, at its start
        self.sequence_calls: list[list] = []  # the reference's inputs of the sequence so far
        self.guard = TamperGuard(model)
        self.screen_error = ""  # why the reference last failed to run in `screen`
        self.scaled: list[bool] | None = None  # per output leaf: atol scaled (a tiny output)

    def detect_state(self, names: list[str] | None = None) -> bool:
        """Whether the module has state: `names` (the candidate's state), or else the
        tensors the reference's calls so far changed."""
        names = names if names is not None else changed_state(self.start, self.reference.model)
        if names and not self.stateful:
            self.stateful, self.state_names = True, list(names)
        return self.stateful

    def restart(self) -> None:
        """Before a new candidate's calls: for a module with state, the reference beside it
        becomes a fresh copy with the state as built, so that both start from the same
        state and make the same calls; the first copy (`screener`) only screens."""
        if self.stateful:
            self.reference = Reference(self.model, self.reference_device)
            load_state(self.reference.model, self.start)  # the model itself, if uncopyable

    def begin_sequence(self) -> None:
        """A trial starts: remember the reference's state, for a float64 rerun."""
        if self.stateful:
            self.sequence_start = snapshot_state(self.reference.model)
            self.sequence_calls = []

    def end_sequence(self, candidate: Candidate) -> int:
        """A trial ended: the candidate's state (`candidate_state`) against the
        reference's, in strict mode judged again against a float64 rerun of the sequence
        as outputs are; the number of state tensors compared (0: no state to compare)."""
        if not self.stateful:
            return 0
        with self.gpu():
            theirs = candidate_state(candidate)
            if theirs is None:
                return 0
            ours = tensor_state(self.reference.model)
            names = sorted(set(self.state_names)
                           | set(changed_state(self.sequence_start, self.reference.model)))
            compared = [name for name in names if name in ours and name in theirs]
            if not compared:
                raise Rejected("state", f"state() holds none of the tensors a call changes "
                               f"({', '.join(names[:8])}), only: "
                               f"{', '.join(sorted(theirs)[:8]) or 'nothing'}")
            exact: dict[str, torch.Tensor] | None = None
            for name in compared:
                mine = ours[name].detach()
                try:
                    try:
                        compare_leaf(theirs[name], mine, self.tol, f"state {name}")
                    except Rejected as rejection:
                        fp32 = mine.is_floating_point() and mine.dtype != torch.float64
                        if (rejection.reason != "mismatch" or self.tol.label != "strict"
                                or not fp32):
                            raise
                        if exact is None:
                            rerun = self.reference.rerun64(self.sequence_start,
                                                           self.sequence_calls)
                            exact = rerun[1] if rerun is not None else {}
                        if name not in exact or exact[name].shape != mine.shape:
                            raise
                        compare_leaf(theirs[name], mine, self.tol, f"state {name}", exact[name])
                except Rejected as rejection:
                    raise Rejected("state", f"after the trial's calls, {rejection.detail}"
                                   ) from None
        return len(compared)

    def draw(self, distribution: str, seed: int, fresh: bool = False) -> list:
        """`trial_inputs`, drawn inside the draw section."""
        with self.draw_section():
            return trial_inputs(self.own_inputs, distribution, seed, fresh)

    def screen(self, inputs: list) -> Screened | None:
        """Run the reference on `inputs` for what its outputs look like (`Screened`),
        outputs poisoned at once; None when it cannot run on them."""
        with self.gpu():
            try:
                leaves = self.screener(inputs)
            except Exception as exc:  # noqa: BLE001 - this distribution or shape is not allowed
                reraise_oom(exc, f"the reference on inputs {describe_inputs(inputs)}")
                self.screen_error = short_exception(exc)
                return None
            try:
                extents = [leaf_range(leaf) for leaf in leaves]
            finally:
                self.screener.release(leaves)
        return Screened([(lo, hi) for lo, hi, _ in extents],
                        [leaf.dtype if isinstance(leaf, torch.Tensor) else None
                         for leaf in leaves],
                        all(finite for _, _, finite in extents))

    def index_safe(self, inputs: list) -> bool:
        """Whether the reference can run on `inputs` without indexing out of bounds, asked
        where that would be fatal: integer inputs (indices, perhaps) at a shape of the
        harness's making, a reference on a GPU, where an index out of bounds is a
        device-side assert that leaves the process unable to use the GPU at all. The
        model then runs once on the CPU, where it is an exception."""
        if self.reference.device.type == "cpu" or not any(
                isinstance(x, torch.Tensor) and not x.is_floating_point() for x in inputs):
            return True
        try:
            with torch.no_grad():
                copy.deepcopy(self.model)(*for_candidate(inputs, inputs))
        except Exception as exc:  # noqa: BLE001 - it cannot run on these
            reraise_oom(exc, f"the reference on the CPU on inputs {describe_inputs(inputs)}")
            return False
        return True

    def call(self, candidate: Candidate, inputs: list) -> Any:
        """One call of the candidate, recorded and checked; the caller holds the GPU."""
        kwargs = {"poison": True} if accepts_poison(candidate) else {}
        recorder = TorchOpRecorder() if self.check_torch_calls else nullcontext()
        try:
            with torch.no_grad(), recorder:
                out = candidate(*inputs, **kwargs)
        except Rejected:
            raise
        except Exception as exc:  # any failure of the candidate is its own, but memory
            reraise_oom(exc, f"the candidate on inputs {describe_inputs(inputs)}")
            raise Rejected("runtime", short_exception(exc)) from exc
        self.guard.check()
        if self.check_torch_calls:
            ops = recorder.compute_ops()
            if ops:
                listed = ", ".join(f"aten::{k} x{v}" for k, v in sorted(ops.items()))
                raise Rejected("calls-pytorch", f"PyTorch computed: {listed}")
        return out

    def check(self, candidate: Candidate, inputs: list,
              values: list | None = None) -> list[LeafStats]:
        """One trial: the candidate first, then the reference on a copy of the same values.

        `values`, when given, are what the inputs held when the harness last set
        them (a candidate that overwrote its inputs is judged against those).
        """
        with self.gpu():  # one hold (GpuLock is not re-entrant), as short as the call
            # the reference's copy first, before the candidate can touch the inputs
            ref_args = self.reference.place(values if values is not None else inputs)
            out = self.call(candidate, inputs)
        with self.gpu():
            ref_leaves = self.reference(ref_args)
            if self.stateful:
                self.sequence_calls.append(ref_args)
            try:
                return compare(out, ref_leaves, self.tol, scaled=self.scaled)
            except Rejected as rejection:
                if rejection.reason != "mismatch" or self.tol.label != "strict":
                    raise
                exact = self.exact(ref_args, ref_leaves)
                if exact is None:
                    raise
                return compare(out, ref_leaves, self.tol, exact, self.scaled)
            finally:
                self.reference.release(ref_leaves)


    def exact(self, ref_args: list, ref_leaves: list) -> list | None:
        """The float64 reference's outputs for the call just made: of the sequence so far
        rerun from its starting state where the module has state."""
        if not self.stateful:
            return self.reference.float64(ref_args, ref_leaves)
        rerun = self.reference.rerun64(self.sequence_start, self.sequence_calls)
        return rerun[0] if rerun is not None else None


def constant_extent(per_trial: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """Per output leaf, (min, max) over every trial."""
    extent = list(per_trial[0])
    for leaves in per_trial[1:]:
        extent = [(min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(extent, leaves)]
    return extent


@dataclass
class Screened:
    """What one run of the reference showed of its outputs on one input set."""

    ranges: list[tuple[float, float]]  # per output leaf, (min, max) of its finite values
    dtypes: list[torch.dtype | None]
    finite: bool  # no NaN/Inf in any float output tensor


def leaf_range(leaf: Any) -> tuple[float, float, bool]:
    """(min, max) of an output's finite values, and whether all of a tensor's are finite;
    the values are only filtered (copied) when some are not."""
    if not isinstance(leaf, torch.Tensor):
        value = float(leaf) if isinstance(leaf, (int, float, bool)) else 0.0
        return value, value, True
    values = leaf.detach().reshape(-1)
    if values.is_complex():
        values = torch.view_as_real(values).reshape(-1)
    values = values.double() if values.dtype == torch.float64 else values.float()
    if values.numel() == 0:
        return 0.0, 0.0, True
    lo, hi = (float(v) for v in torch.aminmax(values))  # NaN if any value is NaN
    if math.isfinite(lo) and math.isfinite(hi):
        return lo, hi, True
    values = values[torch.isfinite(values)]
    if values.numel() == 0:
        return 0.0, 0.0, False
    lo, hi = (float(v) for v in torch.aminmax(values))
    return lo, hi, False


def is_constant(extent: tuple[float, float], atol: float, rtol: float) -> bool:
    lo, hi = extent
    return hi - lo <= atol + rtol * max(abs(lo), abs(hi))


def informative(extent: tuple[float, float], atol: float, rtol: float) -> bool:
    """Whether an output's values vary by more than the tolerance with atol scaled to
    their own largest magnitude: a tiny output that still carries a signal."""
    scale = max(abs(extent[0]), abs(extent[1]))
    return scale > 0 and not is_constant(extent, atol * scale, rtol)


def verify(model: torch.nn.Module, own_inputs: InputSource, make: Factory, *,
           trials: int = 5, loose: bool = False, seed: int = 0, alt_shape: bool = True,
           check_torch_calls: bool = True, reference_device: str = "cpu",
           accelerated: bool = False, gpu_section: GpuSection = nullcontext,
           draw_section: GpuSection = nullcontext,
           on_stage: Callable[[str], None] | None = None,
           dtype: torch.dtype | None = None) -> Verification:
    """Make a candidate with `make` and verify it against `model`; see the module docstring.

    `own_inputs(seed)` returns the problem's own inputs drawn with `seed`; it must
    work (the caller has run the reference on it once) and give the same values for
    the same seed: a trial's inputs are drawn again, from its seeds, where they are
    used, so that only one trial's inputs (and trial 0's, for the reuse trial) are
    held at a time. `gpu_section()` is entered around each run of the candidate or the
    reference and each comparison (the bench's shared GPU lock), never around input
    generation or building the candidate, so that a timer elsewhere waits for one
    call, not a whole verification. `draw_section()` is entered around drawing each
    input set (the same lock, where `own_inputs` draws on the GPU). `on_stage(name)` is
    told where the verification is: "screen 0 (own)", ..., "compile", "trial 0 (own)",
    ..., "alt-shape". `dtype` is the dtype the problem was cast to (``bench --dtype``),
    whose tolerance a half one gives every float output (check.tolerance.Tolerance).
    Exceptions from the factory or the candidate become rejections, never escape.
    """
    stage = on_stage or (lambda name: None)
    tol = Tolerance(loose, accelerated, dtype)
    verdict = Verdict(precision=tol.label)
    verifier = Verifier(model, own_inputs, tol, check_torch_calls, reference_device,
                        gpu_section, draw_section)

    # Plan the trials, and run the reference on each first: drop distributions the
    # problem does not allow, and find out whether its output is degenerate.
    plan = plan_trials(max(1, trials), seed)
    ranges: list[list[tuple[float, float]]] = []
    ref_dtypes: list[torch.dtype | None] = []
    for spec in plan:
        stage(f"screen {spec.index} ({spec.distribution})")
        screened = screen_trial(verifier, spec)
        ranges.append(screened.ranges)
        ref_dtypes = screened.dtypes
        if spec.index == 0:  # the reference's first call: did it change the module's state?
            verdict.sequence = verifier.detect_state()

    verdict.degenerate = classify_degenerate(verifier, plan, ranges, ref_dtypes, tol, seed,
                                             stage)

    verifier.restart()  # the screens' calls changed no state the candidate is made from
    stage("compile")
    candidate = build(make, model, verifier.draw("own", seed + EXAMPLE_SEED_OFFSET, fresh=True),
                      verdict, verifier)
    if candidate is None:
        return Verification(verdict, None)

    try:
        if not verifier.stateful:
            with gpu_section():
                held = candidate_state(candidate)
            verdict.sequence = verifier.detect_state(sorted(held or ()))
            verifier.restart()
        run_trials(verifier, candidate, plan, verdict, stage)
        if alt_shape:
            stage("alt-shape")
            run_alt_shape(verifier, make, model, own_inputs, seed, verdict)
        if verdict.degenerate in ("zero", "constant"):
            kind = verdict.degenerate
            raise Rejected(f"degenerate-{kind}", f"the reference output is {kind} on every "
                           "input tried, so a kernel that does nothing would pass")
    except Rejected as rejection:
        reason, detail = rejection.reason, rejection.detail
        if verdict.degenerate in ("zero", "constant") and reason in ("mismatch", "stale-on-reuse"):
            reason = f"degenerate-{verdict.degenerate}"
            detail = f"the reference output is {verdict.degenerate} on every input tried; {detail}"
        verdict.reason, verdict.detail = reason, detail
        note_sequence(verdict, verifier)
        return Verification(verdict, candidate)
    verdict.correct = True
    note_sequence(verdict, verifier)
    if verdict.degenerate == "tiny":
        verdict.flags.append(
            "scaled-tolerance: the reference output is below the tolerance on every input "
            "but varies; checked with atol scaled to max |ref| of each output")
    return Verification(verdict, candidate)


def note_sequence(verdict: Verdict, verifier: Verifier) -> None:
    """Say in the verdict's flags that a module with state was judged in sequences."""
    if not verifier.stateful:
        return
    compared = any(record.get("state_compared") for record in verdict.trials)
    verdict.flags.append(
        f"sequence: the module has state ({', '.join(verifier.state_names[:8])}); each trial "
        f"is {SEQUENCE_CALLS} calls in order, the candidate and a reference copy carrying "
        "their state from the same start, every output compared"
        + (" and the state after each trial" if compared else
           "; the candidate has no state() to compare"))


def screen_trial(verifier: Verifier, spec: TrialSpec) -> Screened:
    """Run the reference on a trial's inputs, which are then dropped (`run_trials` draws
    them again); a distribution it cannot run on, or gives NaN/Inf on, becomes "own"."""
    screened = verifier.screen(verifier.draw(spec.distribution, spec.seed))
    if (screened is None or not screened.finite) and spec.distribution != "own":
        spec.distribution = "own"
        screened = verifier.screen(verifier.draw("own", spec.seed))
    if screened is None:  # NaN/Inf on the problem's own inputs is allowed: they must match
        raise RuntimeError(f"the reference fails on its own inputs (seed {spec.seed}): "
                           f"{verifier.screen_error}")
    return screened


def classify_degenerate(verifier: Verifier, plan: list[TrialSpec],
                        ranges: list[list[tuple[float, float]]],
                        dtypes: list[torch.dtype | None], tol: Tolerance, seed: int,
                        stage: Callable[[str], None] = lambda name: None) -> str | None:
    """None, "near-zero", "tiny", "constant" or "zero"; may add a probe trial that breaks
    constancy. "tiny": every output is constant within the tolerance on every input tried
    but some vary beyond it scaled to their own size (`informative`); the verifier then
    checks those with a scaled atol (`Verifier.scaled`)."""
    def tolerances(k: int) -> tuple[float, float]:
        return tol.for_dtype(dtypes[k]) if dtypes[k] is not None else (0.0, 0.0)

    def all_constant(extent: list[tuple[float, float]]) -> bool:
        return all(is_constant(e, *tolerances(k)) for k, e in enumerate(extent))

    extent = constant_extent(ranges)
    if all_constant(extent):
        for probe in PROBE_DISTRIBUTIONS:
            probe_seed = seed + 31337 + len(plan)
            stage(f"probe {probe}")
            screened = verifier.screen(verifier.draw(probe, probe_seed))
            if screened is None or not screened.finite:
                continue
            if not all_constant(constant_extent(ranges + [screened.ranges])):
                plan.append(TrialSpec(len(plan), probe, probe_seed))
                ranges.append(screened.ranges)
                break
        else:
            scaled = [informative(e, *tolerances(k)) for k, e in enumerate(extent)]
            if any(scaled):
                verifier.scaled = scaled
                return "tiny"
            biggest = max(max(abs(lo), abs(hi)) for lo, hi in extent)
            atol = max(tolerances(k)[0] for k in range(len(extent)))
            return "zero" if biggest <= NEAR_ZERO_FACTOR * atol else "constant"
    near = all(max(abs(lo), abs(hi)) <= NEAR_ZERO_FACTOR * tolerances(k)[0]
               for k, (lo, hi) in enumerate(constant_extent(ranges)))
    return "near-zero" if near else None


def build(make: Factory, model: torch.nn.Module, example: list, verdict: Verdict,
          verifier: Verifier) -> Candidate | None:
    """The candidate made for `example` (which nothing else keeps), or None when the
    factory failed or changed the reference (the verdict says which)."""
    start = time.perf_counter()
    try:
        candidate = make(model, example)
    except Exception as exc:  # noqa: BLE001 - CompileError or anything else
        reraise_oom(exc, f"the factory for inputs {describe_inputs(example)}")
        verdict.compile_s = time.perf_counter() - start
        verdict.reason, verdict.detail = "compile", short_exception(exc)
        return None
    verdict.compile_s = time.perf_counter() - start
    verdict.compiled = True
    changed = verifier.guard.changed()
    if changed:
        verdict.reason = "tampered-reference"
        verdict.detail = "changed while making the candidate: " + ", ".join(changed[:8])
        return None
    return candidate


def run_trials(verifier: Verifier, candidate: Candidate, plan: list[TrialSpec],
               verdict: Verdict, stage: Callable[[str], None] = lambda name: None) -> None:
    """Check `candidate` on each trial's inputs, drawn again from the trial's seed as it
    comes; trial 0's are kept for the reuse trial, which writes into those tensors. For a
    module with state a trial is a sequence: `SEQUENCE_CALLS` calls on inputs of the seeds
    seed, seed + 1, ... (the reuse trial: its call and the repeated one), then the state
    the candidate holds against the reference's (`Verifier.end_sequence`)."""
    first_inputs: list | None = None
    spent: list[torch.Tensor] = []  # see retire
    for spec in plan:
        stage(f"trial {spec.index} ({spec.distribution})")
        verifier.begin_sequence()
        inputs = verifier.draw(spec.distribution, spec.seed, fresh=True)
        record = {"index": spec.index, "distribution": spec.distribution, "seed": spec.seed,
                  "reuse": spec.reuse, "inputs": describe_inputs(inputs)}
        verdict.trials.append(record)
        calls = (2 if spec.reuse else SEQUENCE_CALLS) if verifier.stateful else 1
        where = trial_place(spec, verifier, 1, calls)
        values = None
        if spec.reuse:  # the tensors drawn hold the values written, for the reference
            for target, value in zip(first_inputs, inputs):
                if isinstance(target, torch.Tensor):
                    target.copy_(value)
            inputs, values = first_inputs, inputs
        elif spec.index == 0:
            first_inputs = inputs
        try:
            stats = verifier.check(candidate, inputs, values)
        except Rejected as rejection:
            record["failed"] = rejection.reason
            if spec.reuse and rejection.reason in ("mismatch", "nan/poison"):
                raise Rejected("stale-on-reuse", f"{where}: new values written into the same "
                               "input tensors, output did not follow "
                               f"({rejection.detail})") from None
            raise Rejected(rejection.reason, f"{where}: {rejection.detail}") from None
        record["max_abs_err"] = max((s.max_abs_err for s in stats), default=0.0)
        record["max_abs_ref"] = max((s.max_ref for s in stats), default=0.0)
        if spec.reuse:
            try:
                verifier.check(candidate, inputs, values)
            except Rejected as rejection:
                record["failed"] = "not-deterministic-on-reuse"
                if rejection.reason in ("mismatch", "nan/poison", "shape", "dtype", "structure"):
                    raise Rejected("not-deterministic-on-reuse",
                                   f"{trial_place(spec, verifier, 2, calls)}: a second call on "
                                   f"the same inputs gave another answer ({rejection.detail})"
                                   ) from None
                raise
            retire(first_inputs, spent)  # nothing writes into them again
            first_inputs = None
        elif inputs is not first_inputs:
            retire(inputs, spent)
        inputs = values = None  # dropped before the next trial's are drawn
        for call in range(1, calls if not spec.reuse else 1):
            more = verifier.draw(spec.distribution, spec.seed + call, fresh=True)
            try:
                stats = verifier.check(candidate, more)
            except Rejected as rejection:
                record["failed"] = rejection.reason
                raise Rejected(rejection.reason, f"{trial_place(spec, verifier, call + 1, calls)}"
                               f": {rejection.detail}") from None
            record["max_abs_err"] = max([record["max_abs_err"]] + [s.max_abs_err for s in stats])
            record["max_abs_ref"] = max([record["max_abs_ref"]] + [s.max_ref for s in stats])
            retire(more, spent)
            more = None
        if verifier.stateful:
            record["calls"] = calls
            try:
                record["state_compared"] = verifier.end_sequence(candidate)
            except Rejected as rejection:
                record["failed"] = rejection.reason
                raise Rejected(rejection.reason, f"trial {spec.index} ({spec.distribution}), "
                               f"{rejection.detail}") from None


def trial_place(spec: TrialSpec, verifier: Verifier, call: int, calls: int) -> str:
    """Where in the verification a call is, for a rejection's detail."""
    where = f"trial {spec.index} ({spec.distribution})"
    if not verifier.stateful:
        return where
    return (f"{where}, call {call} of {calls} of a sequence (the module's state carried from "
            f"call to call: {', '.join(verifier.state_names[:4])})")


def run_alt_shape(verifier: Verifier, make: Factory, model: torch.nn.Module,
                  own_inputs: InputSource, seed: int, verdict: Verdict) -> None:
    """Verify a candidate made for another leading dimension, where the problem allows."""
    with verifier.draw_section():
        own = own_inputs(seed + 55)
    for shapes in alt_shape_variants(own):
        with verifier.draw_section():
            example = synthesize(own, "normal", seed + 56, shapes)
        if not verifier.index_safe(example):
            continue
        screened = verifier.screen(example)
        if screened is None or not screened.finite:
            continue
        own = None  # only its shapes and value ranges were needed
        with verifier.draw_section():
            check_inputs = for_candidate(synthesize(own_inputs(seed + 57), "normal", seed + 58,
                                                    shapes))
            example = for_candidate(example)
        verdict.alt_shape = describe_inputs(check_inputs)
        try:
            candidate = make(model, example)
        except Exception as exc:  # noqa: BLE001
            reraise_oom(exc, f"the factory for inputs {verdict.alt_shape}")
            raise Rejected("alt-shape-failed", f"at {verdict.alt_shape} the factory failed: "
                           f"{short_exception(exc)}") from None
        example = None
        verifier.restart()  # a new candidate, from the state as built
        verifier.begin_sequence()
        try:
            verifier.check(candidate, check_inputs)
        except Rejected as rejection:
            if rejection.reason in ("calls-pytorch", "tampered-reference"):
                raise
            raise Rejected("alt-shape-failed", f"at {verdict.alt_shape}: {rejection.reason}: "
                           f"{rejection.detail}") from None
        return
    verdict.alt_shape = "not applicable (the reference accepts no other leading dimension)"
