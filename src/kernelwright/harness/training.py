"""``kernelwright bench --train``: judge compiled training steps against PyTorch.

Per training workload (suite/training/, one file each: a model factory, a loss, a batch
generator, SIZES small/full), from the same initial weights and the same batches:

* parity with PyTorch eager fp32 under the same optimizer (AdamW, gradients clipped to
  a global norm of 1): the loss at every one of N steps within LOSS_RTOL relative, the
  global gradient norm at step 0 within NORM_RTOL relative, every parameter after the
  N steps within PARAM_ATOL + PARAM_RTOL * |torch's|;
* a float64 control beside that gate: PyTorch trains a float64 copy of the model on the
  same batches (cast to float64) under the same optimizer, on the eager reference's
  device; per step, PyTorch fp32's relative loss difference from it and ours. Two fp32
  runs with different summation orders drift apart in a chaotic optimisation, so the
  control asks whether ours drifts from the exact run more than PyTorch's own fp32 runs
  do: the eager reference and a second one from weights nudged by one unit in the last
  place (`nudged`: how far a rounding difference at the start carries in this run), the
  farther of the two at each step the yardstick (`control_failures`; the gate stays the
  status, the control is reported beside it);
* timing, on the same GPU in the same run: the compiled step's wall time per step (a
  step returns the loss, so each timed step ends with the GPU done; it includes the
  batch's upload, which eager's timing, its batches already on its device, does not),
  PyTorch eager's step (on CUDA where there is CUDA, else on the CPU, labelled so),
  torch.compile of the same eager step (CUDA only; skipped with the reason without),
  the compile time;
* memory: the bytes our plan allocates (every buffer: parameters, optimizer state,
  activations, gradients) against torch.cuda.max_memory_allocated over an eager step
  (CUDA only).

The eager reference runs on CUDA with TF32 off where there is CUDA, else on the CPU.
Results go to results.json, the bench's SQLite store (one row per workload, the same
table as the problems') and report.html with both loss curves per workload
(train_report.py). Workloads run one after another, each in a worker process of its own
(``python -m kernelwright.harness.training``, started and watched by runner.run_worker
under ``--timeout`` seconds and ``--max-rss-gb``, as the problems' workers are): an
exception in one is its ERROR row, a worker past its limits or dead (a driver crash) is
its TIMEOUT, MEMORY or CRASH row naming the stage it was in, and the run goes on. Each
row reaches SQLite as its workload finishes; ``--resume`` reuses the rows of an
unchanged workload file measured with the same settings and compiler (the store is
emptied first without it), and an interrupted run (SIGINT, SIGTERM) still writes
results.json and the report of what finished.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import fnmatch
import hashlib
import json
import math
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import torch

import kernelwright

from ..runtime.runtime import default_device
from . import gpu, runner, train_report
from .problems import import_file, natural_key
from .runner import compiler_digest
from .timing import reference_label
from .worker import write_json

LOSS_RTOL = 1e-3
NORM_RTOL = 1e-3
PARAM_ATOL = 1e-3
PARAM_RTOL = 1e-2
STEPS_SOFTWARE = 20  # default N on the software driver (or without a GPU)
STEPS_GPU = 200  # default N on a hardware GPU
TIMED_STEPS = 10  # steps timed per contender, after its warm-up step
MAX_GRAD_NORM = 1.0
WEIGHT_DECAY = 0.1
DEFAULT_LR = 1e-3
# the float64 control: ours may be this many times further from float64 than PyTorch fp32
CONTROL_FACTOR = 4.0
# below these distances from float64 both fp32 runs are at rounding level, not judged: a
# loss's relative difference, a parameter's |x - x64| / (PARAM_ATOL + PARAM_RTOL |x64|)
CONTROL_LOSS_FLOOR = 1e-6
CONTROL_PARAM_FLOOR = 1e-3
REQUIRED = ("SIZES", "build", "loss", "batch")
# a worker's end that is no verdict of the workload (runner.run_worker's reasons): the
# row's status says it in capitals
WORKER_FAILURES = ("timeout", "memory", "crash", "interrupted")


def bundled_workloads() -> Path:
    return Path(__file__).resolve().parents[1] / "suite" / "training"


@dataclass(frozen=True)
class Workload:
    """One training workload file."""

    name: str
    path: Path


def discover(folder: Path | str) -> list[Workload]:
    """The workload files of `folder` (or `folder` itself when it is a file); files whose
    name starts with "_" hold shared code."""
    root = Path(folder)
    if root.is_file():
        return [Workload(root.stem, root)]
    if not root.is_dir():
        raise FileNotFoundError(f"training workloads not found: {folder}")
    files = [p for p in root.glob("*.py") if not p.name.startswith(("_", "."))]
    return [Workload(p.stem, p) for p in sorted(files, key=lambda p: natural_key(p.stem))]


def load(workload: Workload) -> ModuleType:
    """The workload's module (kept in sys.modules: the torch.compile reference traces its
    loss), its required names checked."""
    module = import_file(workload.path, f"kernelwright_training_{workload.name}", keep=True)
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise ValueError(f"{workload.path}: missing {', '.join(missing)}")
    return module


@dataclass
class TrainSettings:
    """How the workloads are judged (the key of their rows in the SQLite store)."""

    size: str = "small"
    steps: int = STEPS_SOFTWARE
    seed: int = 0
    compile_ref: bool = True
    timed_steps: int = TIMED_STEPS
    control: bool = True

    def key(self) -> str:
        fields = dataclasses.asdict(self) | {"mode": "train", "compiler": compiler_digest()}
        return "train-" + json.dumps(fields, sort_keys=True)


@dataclass
class TrainJob:
    """One workload for a worker process (runner.WorkerJob): its file and the settings."""

    module: ClassVar[str] = "kernelwright.harness.training"
    name: str
    path: str
    settings: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TrainJob:
        return cls(**json.loads(text))

    def blank(self) -> dict[str, Any]:
        """The result of a worker that wrote none (it died before its first stage)."""
        return new_result(Workload(self.name, Path(self.path)),
                          TrainSettings(**self.settings))


def workload_sha(workload: Workload) -> str:
    """A digest of the workload's file and the shared files ("_*.py") beside it: a row
    of another version is not reused by ``--resume``."""
    digest = hashlib.sha256()
    shared = sorted(workload.path.parent.glob("_*.py"))
    for path in [workload.path, *shared]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def new_result(workload: Workload, settings: TrainSettings) -> dict[str, Any]:
    """A workload's result before its first stage."""
    return {"name": workload.name, "file": str(workload.path), "size": settings.size,
            "steps": settings.steps, "status": "ERROR", "compiled": False, "correct": False,
            "stage": "start", "finished": False}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def _eager_setup(model: torch.nn.Module, lr: float):
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)


def our_optimizer(lr: float) -> kernelwright.optim.AdamW:
    """The compiled step's optimizer: the eager reference's settings."""
    return kernelwright.optim.AdamW(lr=lr, weight_decay=WEIGHT_DECAY)


def _eager_step(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn,
                batch: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """One PyTorch training step: the loss and the gradient norm before clipping."""
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(*batch[:-1]), batch[-1])
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
    opt.step()
    return loss.detach(), norm


def _to(batch: tuple, device: torch.device) -> tuple:
    return tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in batch)


def _to_f64(batch: tuple, device: torch.device) -> tuple:
    """`batch` on `device`, its floating-point tensors in float64."""
    return tuple(t.to(device, torch.float64 if t.is_floating_point() else t.dtype)
                 if isinstance(t, torch.Tensor) else t for t in batch)


def param_distance(state: dict[str, torch.Tensor],
                   exact: dict[str, torch.Tensor]) -> tuple[float, str | None]:
    """The largest |x - x64| / (PARAM_ATOL + PARAM_RTOL |x64|) over the floating-point
    entries of `exact` (a float64 state dict) and the entry it is in."""
    worst, worst_name = 0.0, None
    for name, want in exact.items():
        if not want.dtype.is_floating_point:
            continue
        want = want.detach().double().cpu()
        got = state[name].detach().double().cpu().reshape(want.shape)
        score = ((got - want).abs() / (PARAM_ATOL + PARAM_RTOL * want.abs())).max().item()
        score = score if score == score else math.inf  # NaN: as far as can be
        if worst_name is None or score > worst:
            worst, worst_name = score, name
    return worst, worst_name


def control_ratios(rel_ours: list[float], rel_torch: list[float], param_ours: float,
                   param_torch: float) -> tuple[list[float], float]:
    """How many times further from float64 ours is than PyTorch fp32: per step, the ratio
    of the largest relative loss differences so far (a running maximum: one step where
    torch's loss happens to cross float64's proves nothing), each floored at
    CONTROL_LOSS_FLOOR; and the parameters' ratio after the steps (CONTROL_PARAM_FLOOR)."""
    ratios, ours_max, torch_max = [], 0.0, 0.0
    for a, b in zip(rel_ours, rel_torch):
        ours_max = max(ours_max, a if a == a else math.inf)
        torch_max = max(torch_max, b if b == b else math.inf)
        ratios.append(max(ours_max, CONTROL_LOSS_FLOOR) / max(torch_max, CONTROL_LOSS_FLOOR))
    return ratios, max(param_ours, CONTROL_PARAM_FLOOR) / max(param_torch, CONTROL_PARAM_FLOOR)


def control_failures(rel_ours: list[float], rel_torch: list[float], param_ours: float,
                     param_torch: float) -> list[str]:
    """Where ours is more than CONTROL_FACTOR times further from float64 than PyTorch fp32
    (`control_ratios`): the first such step, and the parameters; empty when none."""
    ratios, param_ratio = control_ratios(rel_ours, rel_torch, param_ours, param_torch)
    failures = []
    bad = [i for i, r in enumerate(ratios) if not r <= CONTROL_FACTOR]
    if bad:
        i = bad[0]
        failures.append(f"loss at step {i}: {max(rel_ours[:i + 1]):.2e} from float64 vs "
                        f"PyTorch fp32's {max(rel_torch[:i + 1]):.2e} (x{ratios[i]:.3g} > "
                        f"x{CONTROL_FACTOR:g})")
    if not param_ratio <= CONTROL_FACTOR:
        failures.append(f"parameters: {param_ours:.2e} from float64 vs PyTorch fp32's "
                        f"{param_torch:.2e} (x{param_ratio:.3g} > x{CONTROL_FACTOR:g})")
    return failures


def nudged(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """`model` with every floating-point parameter moved by one unit in the last place,
    up or down at random (seeded): the same weights up to a rounding difference."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                up = torch.randint(0, 2, p.shape, generator=g).to(p.device, torch.bool)
                inf = torch.tensor(math.inf, dtype=p.dtype, device=p.device)
                p.copy_(torch.nextafter(p, torch.where(up, inf, -inf)))
    return model


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_eager(model, opt, loss_fn, batches, device, step_fn=None) -> float:
    """Mean wall ms of `len(batches)` eager steps after one warm-up step."""
    step = step_fn or (lambda b: _eager_step(model, opt, loss_fn, b))
    step(batches[0])
    _sync(device)
    t0 = time.perf_counter()
    for b in batches:
        step(b)
    _sync(device)
    return (time.perf_counter() - t0) * 1e3 / len(batches)


def run_workload(workload: Workload, settings: TrainSettings,
                 on_stage: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Judge one workload in this process; never raises: a failure is the result's status
    and error. `on_stage` is called with the result as each stage begins (its
    ``stage``: load, compile, steps, eager, parity, control, timing, compile-ref,
    done)."""
    result = new_result(workload, settings)

    def stage(name: str) -> None:
        result["stage"] = name
        if on_stage:
            on_stage(result)

    try:
        _judge(workload, settings, result, stage)
    except Exception as exc:  # noqa: BLE001 - any failure of a workload is its result
        result["error"] = f"{type(exc).__name__}: {exc} (stage: {result['stage']})"
        result["reason"] = result.get("reason") or "error"
        result["traceback"] = traceback.format_exc(limit=8)
    return result


def _judge(workload: Workload, settings: TrainSettings, result: dict[str, Any],
           stage: Callable[[str], None]) -> None:
    stage("load")
    module = load(workload)
    if settings.size not in module.SIZES:
        raise ValueError(f"SIZES has no entry {settings.size!r}")
    cfg = module.SIZES[settings.size]
    lr = float(getattr(module, "LR", DEFAULT_LR))
    torch.manual_seed(settings.seed)
    model = module.build(cfg).train()
    reference = copy.deepcopy(model)
    exact = copy.deepcopy(model) if settings.control else None  # the float64 control's
    nudge = nudged(copy.deepcopy(model)) if settings.control else None  # and its yardstick's
    result["parameters"] = sum(p.numel() for p in model.parameters())
    n, timed = settings.steps, settings.timed_steps

    def batch(i: int) -> tuple:  # made when used: N full-size batches need not fit at once
        return tuple(module.batch(cfg, i))

    # ours: compile, then N steps from the initial weights
    stage("compile")
    t0 = time.perf_counter()
    step = kernelwright.compile_training(
        model, batch(0), module.loss,
        optimizer=our_optimizer(lr),
        max_grad_norm=MAX_GRAD_NORM)
    result["compile_s"] = time.perf_counter() - t0
    result["compiled"] = True
    result["device"] = default_device().description
    result["plan_bytes"] = sum(b.nbytes for b in step.plan.buffers)
    stage("steps")
    ours, norm0 = [], None
    for i in range(n):
        ours.append(step(*batch(i)))
        norm0 = step.grad_norm if norm0 is None else norm0
    trained = {k: v.detach().float() for k, v in step.state_dict().items()}

    # PyTorch eager fp32, same weights, batches and optimizer
    stage("eager")
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    reference.to(dev)
    opt = _eager_setup(reference, lr)

    def eager_steps() -> tuple[list[float], float | None]:
        losses, first_norm = [], None
        for i in range(n):
            loss, norm = _eager_step(reference, opt, module.loss, _to(batch(i), dev))
            losses.append(float(loss))
            first_norm = float(norm) if i == 0 else first_norm
        return losses, first_norm

    (theirs, their_norm0), result["torch_peak_bytes"] = gpu.torch_peak_bytes(eager_steps)
    result["memory_note"] = None if cuda else "torch's peak needs CUDA"
    result["loss_ours"], result["loss_torch"] = ours, theirs
    result["grad_norm0_ours"], result["grad_norm0_torch"] = norm0, their_norm0

    # parity
    stage("parity")
    failures = []
    rels = [_rel(a, b) for a, b in zip(ours, theirs)]
    result["loss_max_rel"] = max(rels)
    bad = [i for i, r in enumerate(rels) if not r <= LOSS_RTOL]
    if bad:
        failures.append(f"loss at step {bad[0]}: {ours[bad[0]]:.6g} vs torch's "
                        f"{theirs[bad[0]]:.6g} (relative {rels[bad[0]]:.2e} > {LOSS_RTOL})")
    result["grad_norm0_rel"] = _rel(norm0, their_norm0)
    if not result["grad_norm0_rel"] <= NORM_RTOL:
        failures.append(f"gradient norm at step 0: {norm0:.6g} vs torch's {their_norm0:.6g}")
    excess = param_excess(trained, reference.state_dict())
    spread = None
    if exact is not None:
        stage("control")
        _control(exact, nudge, module, batch, lr, dev, trained, reference.state_dict(),
                 result)
        if result.get("loss_nudged") is not None:
            spread = param_excess(nudge.state_dict(), reference.state_dict())
        del exact, nudge
    # a parameter passes within the tolerance, or within the distance PyTorch fp32's own
    # run from weights nudged by an ulp ends at (where the control measured it)
    worst, worst_name = -math.inf, None
    for name, e in excess.items():
        e -= max(0.0, spread[name]) if spread is not None else 0.0
        if e > worst:
            worst, worst_name = e, name
    result["param_worst"] = worst_name
    result["param_excess"] = worst  # <= 0 passes
    result["param_excess_tolerance"] = max(excess.values(), default=-math.inf)
    result["param_nudged_spread"] = (None if spread is None or worst_name is None
                                     else spread[worst_name])
    if worst > 0:
        failures.append(f"parameter {worst_name} after {n} steps differs by {worst:.2e} "
                        f"beyond atol {PARAM_ATOL} + rtol {PARAM_RTOL}"
                        + ("" if spread is None else " and the nudged PyTorch run's spread"))
    result["correct"] = not failures
    result["status"] = "PASS" if not failures else "FAIL"
    result["reason"] = None if not failures else "mismatch"
    result["error"] = "; ".join(failures) or None

    # timing: ours, eager, torch.compile of the same eager step
    if timed > 0:
        stage("timing")
        tb = [batch(i) for i in range(timed)]
        step(*tb[0])
        t0 = time.perf_counter()
        for b in tb:
            step(*b)
        result["time_ms"] = (time.perf_counter() - t0) * 1e3 / timed
        dev_batches = [_to(b, dev) for b in tb]
        result["ref_eager_ms"] = _time_eager(reference, opt, module.loss, dev_batches, dev)
        result["ref_eager_device"] = str(dev)
        result["speedup_eager"] = result["ref_eager_ms"] / result["time_ms"]
        if not cuda:
            result["compile_ref_note"] = "torch.compile timed on CUDA only (no CUDA here)"
        elif settings.compile_ref:
            stage("compile-ref")  # what was timed so far reaches the result file first
            compiled = torch.compile(
                lambda b: _eager_step(reference, opt, module.loss, b))
            result["ref_compile_ms"] = _time_eager(reference, opt, module.loss, dev_batches,
                                                   dev, compiled)
            result["speedup_compile"] = result["ref_compile_ms"] / result["time_ms"]
    stage("done")


def param_excess(state: dict[str, torch.Tensor],
                 reference: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per floating-point tensor of `reference`, the largest |x - x_ref| - (PARAM_ATOL +
    PARAM_RTOL |x_ref|) of `state`'s (<= 0: within the tolerance everywhere)."""
    out = {}
    for name, want in reference.items():
        if want.dtype.is_floating_point:
            want = want.float().cpu()
            got = state[name].detach().float().cpu().reshape(want.shape)
            out[name] = ((got - want).abs() - (PARAM_ATOL + PARAM_RTOL * want.abs())).max().item()
    return out


def _control(exact: torch.nn.Module, nudge: torch.nn.Module, module: ModuleType,
             batch: Callable[[int], tuple], lr: float, dev: torch.device,
             trained: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor],
             result: dict[str, Any]) -> None:
    """The float64 control: `exact` (the initial weights) trained in float64 on `dev` over
    the same steps, and `nudge` (the initial weights moved by one ulp, `nudged`) in fp32;
    the float64 run's losses, the three fp32 runs' distances from it and the verdict into
    `result` (``control``: PASS, FAIL, or ERROR where the float64 run fails; the gate's
    status is left as it is)."""
    t0 = time.perf_counter()
    steps = len(result["loss_ours"])
    try:
        exact.double().to(dev)
        opt = _eager_setup(exact, lr)
        losses = [float(_eager_step(exact, opt, module.loss, _to_f64(batch(i), dev))[0])
                  for i in range(steps)]
        nudge.to(dev)
        opt = _eager_setup(nudge, lr)
        nudged_losses = [float(_eager_step(nudge, opt, module.loss, _to(batch(i), dev))[0])
                         for i in range(steps)]
    except Exception as exc:  # noqa: BLE001 - the control's failure is not the gate's
        result["control"] = "ERROR"
        result["control_error"] = f"control run: {type(exc).__name__}: {exc}"
        return
    finally:
        result["control_s"] = time.perf_counter() - t0
    result["loss_f64"], result["loss_nudged"] = losses, nudged_losses
    if not all(math.isfinite(v) for v in losses):
        result["control"] = "ERROR"
        result["control_error"] = "float64 run: a loss is not finite"
        return
    exact_state = exact.state_dict()
    rel_ours = [_rel(a, b) for a, b in zip(result["loss_ours"], losses)]
    rel_torch = [_rel(a, b) for a, b in zip(result["loss_torch"], losses)]
    rel_nudged = [_rel(a, b) for a, b in zip(nudged_losses, losses)]
    result["rel_ours_f64"], result["rel_torch_f64"] = rel_ours, rel_torch
    result["rel_nudged_f64"] = rel_nudged
    result["param_ours_f64"], result["param_ours_f64_worst"] = param_distance(
        trained, exact_state)
    result["param_torch_f64"], result["param_torch_f64_worst"] = param_distance(
        theirs, exact_state)
    result["param_nudged_f64"], _ = param_distance(nudge.state_dict(), exact_state)
    # the yardstick: the farther of PyTorch's two fp32 runs (NaN: as far as can be)
    fp32 = [max(a if a == a else math.inf, b if b == b else math.inf)
            for a, b in zip(rel_torch, rel_nudged)]
    fp32_param = max(result["param_torch_f64"], result["param_nudged_f64"])
    ratios, result["control_param_ratio"] = control_ratios(
        rel_ours, fp32, result["param_ours_f64"], fp32_param)
    result["control_loss_ratio"] = max(ratios)
    failures = control_failures(rel_ours, fp32, result["param_ours_f64"], fp32_param)
    result["control"] = "FAIL" if failures else "PASS"
    result["control_error"] = "; ".join(failures) or None


def default_steps() -> tuple[int, str]:
    """N: STEPS_GPU on a hardware GPU, else STEPS_SOFTWARE."""
    why = gpu.no_hardware_gpu()
    return (STEPS_SOFTWARE, why) if why else (STEPS_GPU, "hardware GPU")


def run(args: argparse.Namespace) -> int:
    """The --train mode of `kernelwright bench`."""
    folder = args.suite or bundled_workloads()
    try:
        found = discover(folder)
    except FileNotFoundError as exc:
        print(f"kernelwright bench --train: {exc}", file=sys.stderr)
        return 2
    chosen = [w for w in found if not args.only
              or any(fnmatch.fnmatch(w.name, p) or p in w.name for p in args.only)]
    if not chosen:
        print(f"kernelwright bench --train: no workloads in {folder}"
              + (" match --only" if found else ""), file=sys.stderr)
        return 2
    size, size_why = (args.size, "asked") if args.size else gpu.default_size()
    steps, steps_why = (args.steps, "asked") if args.steps else default_steps()
    if steps < 1:
        print("kernelwright bench --train: --steps must be at least 1", file=sys.stderr)
        return 2
    settings = TrainSettings(size=size, steps=steps, seed=args.seed,
                             compile_ref=args.compile_ref or torch.cuda.is_available(),
                             control=args.train_control)
    timeout_s = args.timeout
    max_rss_gb = args.max_rss_gb or runner.default_rss_limit_gb()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    print(f"kernelwright bench --train: {len(chosen)} workloads from {folder}, size {size} "
          f"({size_why}), {steps} steps ({steps_why}), {timeout_s:g} s each, out {out}",
          file=sys.stderr)
    results, interrupted = [], False
    previous_handler = signal.signal(signal.SIGTERM, _interrupt)
    try:
        results = run_isolated(chosen, settings, out, timeout_s, max_rss_gb,
                               resume=args.resume)
    except KeyboardInterrupt:  # the running worker was killed; what finished is in SQLite
        interrupted = True
        store = runner.ResultStore(out / "results.sqlite")
        done = {r["name"]: r for r in store.all(settings.key())}
        store.close()
        results = [done[w.name] for w in chosen if w.name in done]
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    devices = [r["device"] for r in results if r.get("device")]
    cuda = torch.cuda.is_available()
    where = "CUDA" if cuda else "the CPU"
    info = {
        "created": runner.now_iso(), "mode": "train", "suite": str(folder),
        "size": f"{size} ({size_why})", "steps": f"{steps} ({steps_why})",
        "device": devices[0] if devices else "unknown (no workload reached the device)",
        "reference": f"PyTorch eager fp32 on {where}{', TF32 off' if cuda else ''}; "
                     f"{reference_label()}",
        "optimizer": f"AdamW (weight decay {WEIGHT_DECAY}), gradients clipped to norm "
                     f"{MAX_GRAD_NORM}",
        "tolerance": f"loss {LOSS_RTOL} relative at every step, gradient norm {NORM_RTOL} "
                     f"relative at step 0, parameters atol {PARAM_ATOL} + rtol {PARAM_RTOL}",
        "control": (f"PyTorch float64 on {where} over the same steps: ours within "
                    f"{CONTROL_FACTOR:g}x of the farther of two PyTorch fp32 runs (the "
                    f"reference, and one from weights nudged by an ulp) from it (losses: the "
                    f"largest relative difference so far, floor {CONTROL_LOSS_FLOOR:g}; "
                    f"parameters after: floor {CONTROL_PARAM_FLOOR:g} of the tolerance)"
                    if settings.control else "off (--no-train-control)"),
        "seed": args.seed,
    }
    passed = sum(r["status"] == "PASS" for r in results)
    summary = {"workloads": len(results), "passed": passed,
               "control_passed": sum(r.get("control") == "PASS" for r in results)}
    document = {**info, "settings": dataclasses.asdict(settings), "summary": summary,
                "workloads": results}
    (out / "results.json").write_text(json.dumps(document, indent=1, default=str))
    train_report.write_report(out / "report.html", info, results)
    print()
    print(train_report.format_table(results))
    print(f"\n{summary_line(results, steps, settings.control)}; wrote "
          f"{out / 'results.json'}, {out / 'results.sqlite'}, {out / 'report.html'}")
    if interrupted:
        print(f"interrupted after {len(results)} of {len(chosen)} workloads; run again with "
              "--resume to go on", file=sys.stderr)
        return 130
    return 0 if passed == len(results) else 1


def summary_line(results: list[dict[str, Any]], steps: int, control: bool) -> str:
    """The gate's count and, with the control, the control's: "3 of 8 within 1e-3 of
    PyTorch over 200 steps; 8 of 8 as close to float64 as PyTorch fp32 is"."""
    passed = sum(r["status"] == "PASS" for r in results)
    line = f"{passed} of {len(results)} within {LOSS_RTOL:g} of PyTorch over {steps} steps"
    if control:
        close = sum(r.get("control") == "PASS" for r in results)
        line += (f"; {close} of {len(results)} as close to float64 as PyTorch fp32 is "
                 f"(within {CONTROL_FACTOR:g}x)")
    return line


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM: stop like Ctrl-C, so that the running worker is killed too."""
    raise KeyboardInterrupt


def run_isolated(workloads: list[Workload], settings: TrainSettings, out: Path,
                 timeout_s: float, max_rss_gb: float,
                 resume: bool = False) -> list[dict[str, Any]]:
    """Judge `workloads` one after another, each in its own worker process
    (runner.run_worker, logs under OUT/work); each row reaches OUT/results.sqlite as it
    finishes. With `resume`, a workload whose row there has the same settings, compiler
    and file (`workload_sha`) is not run again; without, the store starts empty."""
    store = runner.ResultStore(out / "results.sqlite", fresh=not resume)
    store.start_run(settings)
    key = settings.key()
    results = []
    try:
        for w in workloads:
            sha = workload_sha(w)
            previous = store.get(w.name, key) if resume else None
            if previous is not None and previous.get("file_sha") == sha:
                print(f"  {w.name}: {previous['status']} (resumed)", file=sys.stderr)
                results.append(previous)
                continue
            print(f"  {w.name} ...", end="", flush=True, file=sys.stderr)
            job = TrainJob(w.name, str(w.path), dataclasses.asdict(settings))
            r = runner.run_worker(job, out / "work", timeout_s, max_rss_gb)
            if r.get("reason") in WORKER_FAILURES:
                r["status"] = r["reason"].upper()
            r["file_sha"] = sha
            store.put(r, key)
            results.append(r)
            print(f" {r['status']}" + (f": {r['error']}" if r.get("error") else ""),
                  file=sys.stderr)
    finally:
        store.close()
    return results


def main(argv: list[str] | None = None) -> int:
    """A worker: judge one workload (a TrainJob) and write its result, rewritten as each
    stage begins so that a worker killed or dead still says where it was."""
    parser = argparse.ArgumentParser(prog="python -m kernelwright.harness.training",
                                     description="Judge one training workload (used by "
                                                 "kernelwright bench --train).")
    parser.add_argument("--config", required=True, help="TrainJob as JSON, or @FILE")
    parser.add_argument("--result", required=True, type=Path, help="where to write the result")
    args = parser.parse_args(argv)
    text = Path(args.config[1:]).read_text() if args.config.startswith("@") else args.config
    job = TrainJob.from_json(text)
    started = time.perf_counter()
    result = run_workload(Workload(job.name, Path(job.path)), TrainSettings(**job.settings),
                          lambda r: write_json(args.result, r))
    result["finished"] = True
    result["wall_s"] = time.perf_counter() - started
    write_json(args.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
