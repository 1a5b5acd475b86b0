"""The search loop: one problem's hot kernels, candidates from generators, verified.

`optimize_problem(path, generators, attempts, out, budget)`:

1. loads the problem, compiles it as the compile path would (spec.capture_problem)
   and profiles it: each kernel's GPU time (median of several `kernel_times_ms`);
2. picks the hot kernels: by time, until `hot_share` of the module's GPU time is
   covered (at most `max_kernels`), one search per kernel spec key (a kernel repeated
   in the plan is searched once and swapped in everywhere);
3. per kernel, asks the generators in turn (round robin: the ensemble) for candidates,
   each given the spec (with what knob settings measured on the run's earlier kernels
   of the same template: `KernelSpec.measured`, from OUT's state) and the whole history
   of attempts, up to `attempts` each; every
   candidate is judged in the sandbox (sandbox.py: bindings, compile, every element on
   fresh inputs against the compiler's kernel, cheats, then GPU time interleaved with
   the best kernel so far). "improved" when at least `min_gain` faster than the best,
   else "slower"; the attempt and its feedback go into the history and OUT's state;
4. confirms each kernel's winner once more in the sandbox on new inputs, timed against
   the compiler's kernel (the measured gain), swaps the winners into the plan and
   verifies the whole module against PyTorch in a bench worker (modulecheck.py), which
   also times it against PyTorch eager, as it does the plan before the swap; a winner
   that breaks the module is dropped (each one is then checked alone); then the
   module with the compiler's plan and with the winners is timed in one process,
   interleaved on the same inputs (modulecheck.time_plans): the problem's gain is the
   ratio of those two GPU times, and the winners of a module that is not faster with
   them than without (the kernel's gain did not hold in the whole module) are dropped
   too, the compiler's plan kept. The speedups against eager of the two checks are
   reported beside it, as such: each divides by an eager time of its own moment;
5. stores the surviving winners in the tuning cache (tune/cache.py, table `kernels`),
   keyed by device and spec key, so that every later compile uses them.

With Settings.check_unchanged off, a problem where no kernel improved is not checked
as a whole (its plan is the compiler's).

Budgets: wall time per problem and per run, tokens and cost (from Candidate.usage) per
problem and per run; when one is spent no generator is asked again, and what was found
is still confirmed, verified and stored. Progress goes to `progress` (one line per
attempt). Nothing a generator returns is ever compiled or run in this process.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..compiler import CompiledModule
from ..harness import problems
from ..harness.gpulock import GpuLock
from ..harness.timing import keep_gpu_awake, warm_up
from ..runtime import runtime
from ..tune import KernelWinner, default_cache
from ..tune.cache import TRUSTED_GENERATORS
from .generator import Attempt, Binding, Candidate, Generator, KernelSpec, ProposalFailed
from .generators import make
from .modulecheck import check_plan, time_plans
from .sandbox import Sandbox
from .spec import capture_problem, kernel_specs
from .store import RunState

CORRECT = ("slower", "improved")


@dataclass
class Budget:
    """Limits; None is no limit. Seconds are wall time; tokens and cost come from the
    generators' Candidate.usage (input + output tokens, cost_usd)."""

    problem_s: float | None = None
    run_s: float | None = None
    problem_tokens: int | None = None
    run_tokens: int | None = None
    problem_cost_usd: float | None = None
    run_cost_usd: float | None = None


@dataclass
class Spend:
    """What a run (or one problem) has used so far."""

    started: float = field(default_factory=time.monotonic)
    tokens: int = 0
    cost_usd: float = 0.0

    def add(self, usage: dict) -> None:
        self.tokens += int(usage.get("input_tokens", 0) or 0) + \
            int(usage.get("output_tokens", 0) or 0)
        self.cost_usd += float(usage.get("cost_usd", 0.0) or 0.0)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


@dataclass
class Settings:
    hot_share: float = 0.9  # search kernels until this share of the module's GPU time
    max_kernels: int = 4  # kernel searches per problem, at most
    min_gain: float = 1.03  # how much faster than the best a candidate must be
    trials: int = 3  # input sets per candidate (normal, positive, heavy-tailed)
    reps: int = 20  # timed runs per timing round in the sandbox (median)
    warmup: int = 3
    profile_runs: int = 5  # calls whose per-kernel times give the profile (median)
    candidate_timeout_s: float = 120.0
    module_trials: int = 5  # the harness's trials for the whole module
    check_unchanged: bool = True  # False: no module check when no kernel improved
    module_timeout_s: float = 600.0
    gain_rounds: int = 5  # ABBA rounds of `reps` calls each timing the module's gain
    size: str | None = None  # the problem's SIZES entry
    seed: int = 0


@dataclass
class KernelReport:
    key: str
    name: str
    kind: str
    share: float  # of the module's GPU time, in the profile
    baseline_ms: float | None = None
    best_ms: float | None = None  # the winner's, timed beside the baseline at confirmation
    generator: str | None = None  # the winner's
    knobs: dict | None = None
    baseline_knobs: dict | None = None  # the compiler's kernel's (what a winner beat)
    note: str = ""
    status: str = "unchanged"  # "improved" | "unchanged" | "dropped" (broke the module)
    baseline_source: str = ""
    source: str | None = None  # the winner's WGSL
    grid: tuple | None = None
    layout: list | None = None  # the winner's bindings: the alias of each (generator.Binding)
    attempts: int = 0
    statuses: dict = field(default_factory=dict)  # status -> count
    pass_at: dict = field(default_factory=dict)  # generator -> attempt (1-based) of its
    # first correct candidate, None when none of its attempts was correct
    tries: dict = field(default_factory=dict)  # generator -> attempts made

    @property
    def gain(self) -> float | None:
        if self.status != "improved" or not self.baseline_ms or not self.best_ms:
            return None
        return self.baseline_ms / self.best_ms

    def diff(self) -> str:
        if not self.source:
            return ""
        return "".join(difflib.unified_diff(
            self.baseline_source.splitlines(keepends=True), self.source.splitlines(keepends=True),
            "compiler", self.generator or "winner"))


@dataclass
class ProblemReport:
    name: str
    path: str
    device: str = ""
    kernels: list[KernelReport] = field(default_factory=list)
    module_kernels: int = 0
    before: dict = field(default_factory=dict)  # the harness's result for the compiled plan
    after: dict = field(default_factory=dict)  # ... for the plan with the winners swapped in
    # the module's GPU time with the compiler's plan and with the winners, timed in one
    # process, interleaved (modulecheck.interleaved_times: before_ms, after_ms, ...)
    module_ms: dict = field(default_factory=dict)
    stored: int = 0  # winners stored in the tuning cache
    error: str | None = None
    seconds: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0
    stopped: str | None = None  # which budget ran out, if one did

    @property
    def speedup_before(self) -> float | None:
        return self.before.get("speedup_eager") if self.before.get("correct") else None

    @property
    def speedup_after(self) -> float | None:
        return self.after.get("speedup_eager") if self.after.get("correct") else None

    @property
    def unmeasured(self) -> bool:
        """No kernel improved and the module was not measured (Settings.check_unchanged
        off): the plan is the compiler's."""
        return bool(self.before.get("unchanged"))

    @property
    def gain(self) -> float | None:
        """The module's GPU time with the compiler's plan over its time with the winners,
        both timed in one process, interleaved (`module_ms`); 1 for a plan left as the
        compiler made it; None where the module failed or could not be timed."""
        if self.error:
            return None
        if self.unmeasured:
            return 1.0
        if not (self.before.get("correct") and self.after.get("correct")):
            return None
        if not self.stored:  # the compiler's plan is kept
            return 1.0
        before, after = self.module_ms.get("before_ms"), self.module_ms.get("after_ms")
        return before / after if before and after else None

    def to_dict(self) -> dict:
        data = asdict(self)
        for key in ("before", "after"):  # keep what the report needs, not the trial logs
            data[key] = {k: v for k, v in data[key].items()
                         if k in ("correct", "reason", "error", "time_ms", "ref_eager_ms",
                                  "speedup_eager", "reference", "device", "flags",
                                  "unchanged")}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ProblemReport:
        kernels = [KernelReport(**{**k, "grid": tuple(k["grid"]) if k.get("grid") else None})
                   for k in data.get("kernels", [])]
        return cls(**{**data, "kernels": kernels})


def pass_at_k(reports: list[KernelReport], k: int, generator: str | None = None) -> float | None:
    """The fraction of searched kernels with a correct candidate within the first k
    attempts (of `generator`, else of any generator)."""
    rows = []
    for r in reports:
        firsts = ([r.pass_at.get(generator)] if generator else list(r.pass_at.values()))
        if generator and generator not in r.tries:
            continue
        rows.append(any(f is not None and f <= k for f in firsts))
    return sum(rows) / len(rows) if rows else None


def _usage_line(usage: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in usage.items()) if usage else ""


@dataclass
class Best:
    """The best correct kernel found so far for one spec."""

    source: str
    grid: tuple
    knobs: dict | None
    generator: str
    bindings: list[Binding]


class Search:
    """Runs problems one after another with one sandbox, one budget and one state."""

    def __init__(self, generators: list[Generator], attempts: int, out: str | Path,
                 budget: Budget | None = None, settings: Settings | None = None,
                 resume: bool = False, cache=None,
                 progress: Callable[[str], None] | None = None,
                 redo: set[str] | frozenset[str] = frozenset(),
                 choose: Callable | None = None) -> None:
        self.generators = generators
        self.attempts = attempts
        self.out = Path(out)
        self.budget = budget or Budget()
        self.settings = settings or Settings()
        self.resume = resume
        self.redo = redo  # problems searched from the start even when resuming
        self.choose = choose  # the compile's knob chooser (spec.capture_problem)
        self.cache = cache or default_cache()
        self.progress = progress or (lambda line: None)
        self.state = RunState(self.out)
        self.run_spend = Spend()
        self.sandbox = Sandbox(self.out / "sandbox.log", self.settings.candidate_timeout_s)

    def close(self) -> None:
        self.sandbox.close()
        self.state.close()

    def __enter__(self) -> Search:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- budgets ------------------------------------------------------------------------
    def spent(self, problem: Spend | None = None) -> str | None:
        """Which budget is spent, if any: the run's, and the problem's when given (the
        run loop asks with None, so one problem's limits never stop the run)."""
        b, run = self.budget, self.run_spend
        checks = [("time per run", b.run_s, run.seconds),
                  ("tokens per run", b.run_tokens, run.tokens),
                  ("cost per run", b.run_cost_usd, run.cost_usd)]
        if problem is not None:
            checks += [("time per problem", b.problem_s, problem.seconds),
                       ("tokens per problem", b.problem_tokens, problem.tokens),
                       ("cost per problem", b.problem_cost_usd, problem.cost_usd)]
        for label, limit, used in checks:
            if limit is not None and used >= limit:
                return label
        return None

    # -- one problem ---------------------------------------------------------------------
    def problem(self, path: str | Path) -> ProblemReport:
        (problem,) = problems.discover(path) if Path(path).is_file() else [None]
        if problem is None:
            raise FileNotFoundError(f"not a problem file: {path}")
        return self.run_problem(problem)

    def run_problem(self, problem) -> ProblemReport:
        s = self.settings
        if self.resume and problem.name not in self.redo:
            done = self.state.report(problem.name)
            if done is not None:
                self.progress(f"{problem.name}: done in an earlier run")
                return ProblemReport.from_dict(done)
        else:
            self.state.reset(problem.name)
        self.state.start(problem.name, str(problem.path))
        spend, started = Spend(), time.monotonic()
        report = ProblemReport(problem.name, str(problem.path))
        folder = self.out / _slug(problem.name)
        try:
            phase = time.monotonic()
            loaded = problems.load(problem, s.size)
            model = problems.call_user("reference", lambda: loaded.build_model(s.seed))
            inputs = problems.call_user("reference", lambda: loaded.inputs(s.seed))
            device = runtime.default_device()
            keep_gpu_awake()  # the profile's times: see harness/timing.py
            report.device = device.description
            if not device.has_timestamps:
                raise RuntimeError(f"{device.description} has no timestamp queries")
            loaded_s = time.monotonic() - phase
            captured = capture_problem(model, inputs, self.choose)
            plan = captured.plan
            lock = GpuLock.from_env()  # set when problems run side by side (--jobs)
            with lock.shared():
                compiled = CompiledModule(plan, device)
            phase, compiled_s = time.monotonic(), time.monotonic() - phase - loaded_s
            with lock.exclusive():
                # the H200 measured the first calls of a problem 1.5-14x slower than later
                warm_up(lambda n: [sum(t for _, t in compiled.kernel_times_ms(*inputs))
                                   for _ in range(n)])
                runs = [[t for _, t in compiled.kernel_times_ms(*inputs)]
                        for _ in range(max(1, s.profile_runs))]
            times = [statistics.median(col) for col in zip(*runs)]
            profiled_s = time.monotonic() - phase
            specs = kernel_specs(plan, captured.requests, times)
        except Exception as exc:  # noqa: BLE001 - the problem cannot be searched
            report.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
            self.progress(f"{problem.name}: ERROR {report.error}")
            self.state.finish(problem.name, str(problem.path), report.to_dict())
            return report
        report.module_kernels = len(plan.kernels)

        hot = self.hot_kernels(specs)
        self.progress(f"{problem.name}: {len(plan.kernels)} kernels, {sum(times):.4g} ms "
                      f"(loaded in {loaded_s:.1f} s, captured and compiled in "
                      f"{compiled_s:.1f} s, profiled in {profiled_s:.1f} s); searching "
                      f"{len(hot)}: " + ", ".join(
                          f"{sp.name} ({sp.profile['share']:.0%})" for sp in hot))
        # The problem's time budget is its search's: loading, capture and the profile
        # took 20-30 s a problem at full size on the H200, and spent a 20 s budget before
        # the first attempt (2026-12-01c). The module checks after it are not counted either.
        spend.started = time.monotonic()
        for i, spec in enumerate(hot, 1):
            report.kernels.append(self.search_kernel(problem.name, spec, spend,
                                                     f"[{i}/{len(hot)}]"))
            report.stopped = report.stopped or self.spent(spend)

        winners = {kr.key: kr for kr in report.kernels if kr.status == "improved"}
        if winners or s.check_unchanged:
            report.before = check_module(plan, folder / "before", problem, s)
            if not report.before.get("correct"):
                self.progress(f"{problem.name}: the compiled plan fails verification "
                              f"({report.before.get('error')}); nothing is stored")
                for kr in winners.values():
                    kr.status, kr.note = "dropped", "the module fails without it already"
                winners = {}
            if winners:
                after, kept = self.verify_swapped(problem, plan, specs, winners, folder)
                report.after = after
                for key, kr in winners.items():
                    if key not in kept:
                        kr.status, kr.note = "dropped", "the module failed verification with it"
                if after.get("correct") and kept:
                    report.module_ms = time_module(
                        plan, swap(plan, specs, {k: winners[k] for k in kept}),
                        folder / "timed", problem, s)
                slower = _not_faster(report.module_ms)
                if slower:
                    for key in kept:
                        winners[key].status, winners[key].note = "dropped", slower
                    self.progress(f"{problem.name}: {slower}; the compiler's plan is kept")
                    report.after, kept = dict(report.before), set()
                if after.get("correct"):
                    for key in kept:
                        kr = winners[key]
                        self.cache.store_kernel(device.description, key, _winner(kr, problem.name))
                        report.stored += 1
            else:
                report.after = dict(report.before)
        else:  # the compiler's plan, not measured again (check_unchanged off)
            report.before = report.after = {"unchanged": True}
        report.seconds, report.tokens, report.cost_usd = time.monotonic() - started, \
            spend.tokens, spend.cost_usd
        self.progress(f"{problem.name}: {summary_line(report)}")
        self.state.finish(problem.name, str(problem.path), report.to_dict())
        return report

    def hot_kernels(self, specs: list[KernelSpec]) -> list[KernelSpec]:
        """The kernels that hold `hot_share` of the GPU time, slowest first, one per key."""
        chosen, seen, covered = [], set(), 0.0
        total = sum(sp.profile.get("time_ms", 0.0) for sp in specs)
        for sp in sorted(specs, key=lambda sp: -sp.profile.get("time_ms", 0.0)):
            if len(chosen) >= self.settings.max_kernels or covered >= self.settings.hot_share:
                break
            same = [o for o in specs if o.key == sp.key]
            if sp.key in seen:
                continue
            seen.add(sp.key)
            share = sum(o.profile.get("time_ms", 0.0) for o in same) / total if total else 0.0
            sp.profile["share_all"] = share  # with every copy of it in the plan
            covered += share
            chosen.append(sp)
        return chosen

    # -- one kernel ----------------------------------------------------------------------
    def search_kernel(self, problem: str, spec: KernelSpec, spend: Spend,
                      label: str) -> KernelReport:
        kr = KernelReport(spec.key, spec.name, spec.kind, spec.profile.get("share_all", 0.0),
                          baseline_knobs=dict(spec.knobs), baseline_source=spec.source)
        self.state.set_kernel(problem, spec.key, spec.name, spec.source, None, spec.knobs,
                              spec.kind)
        spec.measured = self.state.measured(spec.kind, (problem, spec.key))
        resumed = self.state.attempts(problem, spec.key)
        history = [a for a, _ in resumed]
        for _, usage in resumed:
            spend.add(usage)
        stored = self.state.kernel(problem, spec.key) or {}
        best: Best | None = None
        best_ms = stored.get("best_ms")
        baseline_ms = stored.get("baseline_ms")
        if stored.get("best_source"):
            best = Best(stored["best_source"], stored["best_grid"], stored["best_knobs"],
                        stored["best_generator"],
                        [Binding(**{**b, "shape": tuple(b["shape"])})
                         for b in stored["best_bindings"]] if stored.get("best_bindings")
                        else spec.bindings)
        counts = {g.name: sum(a.generator == g.name for a in history) for g in self.generators}
        active = [g for g in self.generators if counts[g.name] < self.attempts]
        if resumed:
            self.progress(f"  {label} {spec.name}: resumed with {len(history)} attempts")
        while active:
            for gen in list(active):
                stop = self.spent(spend)
                if stop:
                    self.progress(f"  {label} {spec.name}: budget spent ({stop})")
                    active = []
                    break
                try:
                    cand = gen.propose(spec, list(history))
                except ProposalFailed as exc:  # a try without a kernel: a rejected attempt
                    cand = exc
                except Exception as exc:  # noqa: BLE001 - a generator's failure ends its turn
                    self.progress(f"  {label} {spec.name} {gen.name}: generator failed: "
                                  f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
                    active.remove(gen)
                    continue
                if cand is None:
                    active.remove(gen)
                    continue
                spend.add(cand.usage)
                self.run_spend.add(cand.usage)
                if isinstance(cand, ProposalFailed):
                    attempt, measured = Attempt(gen.name, "", None, None, "rejected", str(cand),
                                                None, best_ms), None
                    cand = Candidate("", usage=cand.usage, note="no kernel")
                else:
                    attempt, measured = self.judge(spec, cand, gen.name, best, best_ms,
                                                   seed=_seed(problem, spec.key, len(history)))
                if baseline_ms is None and best is None and measured is not None:
                    baseline_ms = measured
                    self.state.set_kernel(problem, spec.key, spec.name, spec.source, measured)
                history.append(attempt)
                self.state.add_attempt(problem, spec.key, attempt, cand.usage, cand.note)
                counts[gen.name] += 1
                if attempt.status == "improved":
                    best = Best(cand.source, attempt.grid, cand.knobs, gen.name,
                                cand.bindings or spec.bindings)
                    best_ms = attempt.time_ms
                    self.state.set_best(problem, spec.key, best.source, best.grid, best.knobs,
                                        best.generator, best_ms,
                                        [asdict(b) for b in best.bindings])
                usage = _usage_line(cand.usage)
                self.progress(f"  {label} {spec.name} #{len(history)} {gen.name}: "
                              f"{attempt.status}: {attempt.message.splitlines()[0][:160]}"
                              + (f" [{usage}]" if usage else ""))
                if counts[gen.name] >= self.attempts and gen in active:
                    active.remove(gen)
        self.summarize_attempts(kr, history)
        if best is not None:
            self.confirm(problem, spec, kr, best, label)
        return kr

    def judge(self, spec: KernelSpec, cand: Candidate, generator: str, best: Best | None,
              best_ms: float | None,
              seed: int) -> tuple[Attempt, float | None]:
        """Run one candidate in the sandbox; the attempt, and the time the sandbox
        measured for the best kernel (the compiler's while there is no winner yet)."""
        s = self.settings
        grid = tuple(cand.grid or spec.grid)
        job = {"reference": kernel_job(spec.source, spec.grid, spec.bindings, True),
               "best": (kernel_job(best.source, best.grid, best.bindings,
                                   best.generator in TRUSTED_GENERATORS) if best else None),
               "candidate": kernel_job(cand.source, grid, cand.bindings or spec.bindings,
                                       generator in TRUSTED_GENERATORS),
               "trials": s.trials, "seed": seed, "reps": s.reps, "warmup": s.warmup}
        result = self.sandbox.evaluate(job)
        status, message = result["status"], result.get("message", "")
        time_ms, measured = result.get("time_ms"), result.get("best_ms")
        if status == "correct":
            ratio = measured / time_ms if time_ms else float("inf")
            status = "improved" if time_ms * s.min_gain < measured else "slower"
            message = (f"{time_ms:.4g} ms against the best's {measured:.4g} ms "
                       f"({ratio:.2f}x; {message})")
        return Attempt(generator, cand.source, cand.knobs, grid, status, message,
                       time_ms, measured if measured is not None else best_ms), measured

    def summarize_attempts(self, kr: KernelReport, history: list[Attempt]) -> None:
        kr.attempts = len(history)
        for a in history:
            kr.statuses[a.status] = kr.statuses.get(a.status, 0) + 1
            n = kr.tries.get(a.generator, 0) + 1
            kr.tries[a.generator] = n
            if a.status in CORRECT and kr.pass_at.get(a.generator) is None:
                kr.pass_at[a.generator] = n
            kr.pass_at.setdefault(a.generator, None)

    def confirm(self, problem: str, spec: KernelSpec, kr: KernelReport, best: Best,
                label: str) -> None:
        """Check the winner once more on new inputs, timed against the compiler's kernel;
        it stays the winner only when correct and still at least min_gain faster."""
        cand = Candidate(best.source, tuple(best.grid), best.knobs, bindings=best.bindings)
        attempt, baseline_ms = self.judge(spec, cand, best.generator, None, None,
                                          seed=_seed(problem, spec.key, -1))
        if attempt.status == "improved":
            kr.status, kr.baseline_ms, kr.best_ms = "improved", baseline_ms, attempt.time_ms
            kr.generator, kr.knobs, kr.source = best.generator, best.knobs, best.source
            kr.grid, kr.layout = tuple(best.grid), [b.alias for b in best.bindings]
            self.progress(f"  {label} {spec.name}: winner by {best.generator}, "
                          f"{baseline_ms:.4g} -> {attempt.time_ms:.4g} ms "
                          f"({baseline_ms / attempt.time_ms:.2f}x)")
        else:
            kr.note = f"the winner did not hold at confirmation: {attempt.status}: " \
                      f"{attempt.message.splitlines()[0][:200]}"
            self.progress(f"  {label} {spec.name}: {kr.note}")

    def verify_swapped(self, problem, plan, specs: list[KernelSpec],
                       winners: dict[str, KernelReport], folder: Path) -> tuple[dict, set]:
        """The harness's verdict on the plan with the winners swapped in, and the keys
        kept: all of them, or (when the module fails) those that pass one at a time."""
        s = self.settings
        result = check_module(swap(plan, specs, winners), folder / "after", problem, s)
        if result.get("correct") or len(winners) == 1:
            return result, set(winners) if result.get("correct") else set()
        kept = set()
        for i, (key, kr) in enumerate(winners.items()):
            alone = check_module(swap(plan, specs, {key: kr}), folder / f"alone{i}", problem, s)
            if alone.get("correct"):
                kept.add(key)
        if not kept:
            return result, kept
        return check_module(swap(plan, specs, {k: winners[k] for k in kept}), folder / "after",
                            problem, s), kept


def kernel_job(source: str, grid, bindings: list[Binding], trusted: bool) -> dict:
    """A kernel as the sandbox takes it; `trusted`: written by kernelwright's templates
    (compiled without wgpu's runtime checks, runtime.py)."""
    return {"source": source, "grid": list(grid), "trusted": trusted,
            "bindings": [{"index": b.index, "numel": math.prod(b.shape), "dtype": b.dtype,
                          "access": b.access, "alias": b.alias} for b in bindings]}


def swap(plan, specs: list[KernelSpec], winners: dict[str, KernelReport]):
    """The plan with every kernel whose spec key has a winner replaced by it."""
    kernels = []
    for kernel, spec in zip(plan.kernels, specs):
        kr = winners.get(spec.key)
        if kr is not None:
            reads = [bid for bid, b in zip(kernel.bindings, spec.bindings[:-1])
                     if b.alias is None]
            ids: list[int] = []
            for j, alias in enumerate(kr.layout):
                ids.append(kernel.bindings[-1] if j == len(kr.layout) - 1 else
                           ids[alias] if alias is not None else reads[len(ids)])
            kernel = dataclasses.replace(kernel, source=kr.source, grid=tuple(kr.grid),
                                         knobs=dict(kr.knobs or {}), bindings=ids,
                                         trusted=kr.generator in TRUSTED_GENERATORS)
        kernels.append(kernel)
    return dataclasses.replace(plan, kernels=kernels)


def _not_faster(timed: dict) -> str | None:
    """Why the module with the winners is not kept although correct: its GPU time, timed
    interleaved with the compiler's plan's (`time_module`), is not below that (None when
    it is, or when they were not timed)."""
    a, b = timed.get("after_ms"), timed.get("before_ms")
    if not (a and b) or a < b:
        return None
    return f"the module was not faster with it ({a:.4g} ms against {b:.4g} ms, interleaved)"


def time_module(plan, swapped, folder: Path, problem, s: Settings) -> dict:
    """The module's GPU time with `plan` and with `swapped`, interleaved in a subprocess
    (modulecheck.time_plans)."""
    return time_plans(plan, swapped, folder, problem, s.size, s.seed, s.gain_rounds, s.reps,
                      s.module_timeout_s)


def check_module(plan, folder: Path, problem, s: Settings) -> dict:
    return check_plan(plan, folder, problem, s.size, s.seed, s.module_trials,
                      s.module_timeout_s)


def _winner(kr: KernelReport, problem: str):
    return KernelWinner(kr.source, tuple(kr.grid), kr.knobs, kr.generator or "",
                        kr.baseline_ms, kr.best_ms, problem,
                        [a for a in kr.layout[:-1] if a is not None], kr.baseline_knobs)


def _seed(problem: str, key: str, n: int) -> int:
    return int(hashlib.sha1(f"{problem}|{key}|{n}".encode()).hexdigest()[:8], 16)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def summary_line(report: ProblemReport) -> str:
    if report.error:
        return f"ERROR {report.error}"
    improved = [k for k in report.kernels if k.status == "improved"]
    def figure(speedup: float | None, result: dict) -> str:
        return f"{speedup:.3g}x" if speedup else (result.get("error") or "-")

    figures = (f"{figure(report.speedup_before, report.before)} -> "
               f"{figure(report.speedup_after, report.after)} vs eager (separate runs)")
    timed = report.module_ms
    if timed.get("before_ms") and timed.get("after_ms"):
        kept = "" if report.stored else ": not faster, the compiler's plan kept"
        figures = (f"module {timed['before_ms']:.4g} -> {timed['after_ms']:.4g} ms "
                   f"({timed['before_ms'] / timed['after_ms']:.3g}x, timed interleaved{kept}); "
                   + figures)
    elif timed.get("error"):
        figures = f"module gain not timed ({timed['error'][:200]}); " + figures
    if report.unmeasured:
        figures = "the compiler's plan, not measured again"
    return (f"{len(improved)} of {len(report.kernels)} searched kernels improved, "
            f"{report.stored} stored; {figures}; {report.seconds:.0f} s"
            + (f"; budget spent ({report.stopped})" if report.stopped else ""))


def optimize_problem(path: str | Path, generators: list[Generator | str], attempts: int = 5,
                     out: str | Path = "out/optimize", budget: Budget | None = None,
                     settings: Settings | None = None, resume: bool = False, cache=None,
                     progress: Callable[[str], None] | None = None,
                     choose: Callable | None = None) -> ProblemReport:
    """Search faster kernels for the problem file at `path` (see the module docstring):
    `generators` are Generator objects or registered names, each asked for up to
    `attempts` candidates per hot kernel; state and files go to `out`; `choose`: the
    knob chooser of the compile the search starts from (None: tune.compiler_choice)."""
    gens = [make(g) if isinstance(g, str) else g for g in generators]
    with Search(gens, attempts, out, budget, settings, resume, cache, progress,
                choose=choose) as search:
        return search.problem(path)
