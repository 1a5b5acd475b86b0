"""Rewrites in the built-in generator: a convolution's other lowering, on the software
driver.

A convolution is lowered to an implicit GEMM (a matmul kernel) or to the direct kernel
(lower/conv.implicit_gemm). For either, the built-in generator proposes the same kernel
by the other lowering, with the same bindings, right after the own template's settings
one knob away from the kernel's; the sandbox checks it
against the compiler's kernel on fresh inputs. The search keeps it when it is faster:
the compiler's implicit GEMM of a small dense convolution is made slow (16 x 16 tiles
of one output per invocation, forced through the knob chooser, as test_optimize.py
does), and the direct kernel must be kept and survive the whole-module check. The
sandbox really builds and checks every candidate, and the harness the whole module;
only their timings are replaced by a fixed cost (the direct kernel half the GEMM's):
on the software driver the direct kernel is 1.3-2.8x faster, and a kernel's time
swings 2x between runs, so measured times made the test fail about once in 8 runs.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from kernelwright import tune
from kernelwright.kernels import conv_knobs
from kernelwright.optimize import Settings, optimize_problem, search
from kernelwright.optimize.builtin import BuiltinGenerator, nearest_first
from kernelwright.optimize.command import render
from kernelwright.optimize.sandbox import Sandbox
from kernelwright.optimize.search import kernel_job
from kernelwright.optimize.spec import capture_problem, kernel_specs


class Conv(torch.nn.Module):
    def __init__(self, cin, cout, groups=1, transposed=False, stride=1):
        super().__init__()
        make = torch.nn.ConvTranspose2d if transposed else torch.nn.Conv2d
        self.conv = make(cin, cout, 3, stride=stride, padding=1, groups=groups)

    def forward(self, x):
        return torch.relu(self.conv(x))


# name: (module arguments, the compiler's lowering and template, the rewrite's)
CASES = {
    "dense": ((8, 16), ("implicit_gemm", "matmul"), ("direct", "conv")),
    "depthwise": ((8, 8, 8), ("direct", "conv"), ("implicit_gemm", "matmul")),
    # stride 1: a strided one is a matmul per phase, which no one kernel replaces
    "transposed": ((8, 16, 1, True, 1), ("implicit_gemm", "matmul"), ("direct", "conv")),
}


def conv_spec(args):
    torch.manual_seed(0)
    model = Conv(*args)
    x = torch.randn(2, args[0], 6, 6)
    captured = capture_problem(model, [x], choose=tune.compiler_choice)
    (spec,) = kernel_specs(captured.plan, captured.requests)
    return spec


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    with Sandbox(tmp_path_factory.mktemp("rewrite") / "log", timeout_s=120) as box:
        yield box


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_builtin_proposes_the_other_conv_lowering_and_it_verifies(sandbox, case):
    args, (own, kind), (other, other_kind) = CASES[case]
    spec = conv_spec(args)
    assert spec.kind == kind
    (rewrite,) = spec.rewrites
    assert (rewrite.name, rewrite.replaces, rewrite.kind) == (other, own, other_kind)
    cand = next(c for c in all_proposals(spec) if "rewrite" in c.knobs)
    assert cand.knobs["rewrite"] == other and f"rewrite {own} -> {other}" in cand.note
    assert cand.knobs == {"rewrite": other, **rewrite.knob_space[0]}
    assert cand.source != spec.source
    # the same buffers, in the same order (views of them may follow)
    own_buffers = [(b.shape, b.dtype, b.access) for b in cand.bindings if b.alias is None]
    assert own_buffers == [(b.shape, b.dtype, b.access) for b in spec.bindings]
    job = {"reference": kernel_job(spec.source, spec.grid, spec.bindings, True), "best": None,
           "candidate": kernel_job(cand.source, cand.grid, cand.bindings, True), "trials": 3,
           "seed": 3, "reps": 2, "warmup": 1}
    result = sandbox.evaluate(job)
    assert result["status"] == "correct", result


def test_a_wrong_rewrite_is_caught_by_the_sandbox(sandbox):
    # the check above can fail: the rewrite's kernel with one tap's weight dropped
    spec = conv_spec(CASES["depthwise"][0])
    cand = next(c for c in all_proposals(spec) if "rewrite" in c.knobs)
    broken = cand.source.replace("fn load_a(", "fn load_a_(", 1)
    broken = broken.replace("fn load_a_(", "fn load_a(b: i32, m: i32, k: i32) -> f32 { "
                            "return select(load_a_(b, m, k), 0.0, k == 4); }\nfn load_a_(", 1)
    assert broken != cand.source
    job = {"reference": kernel_job(spec.source, spec.grid, spec.bindings, True), "best": None,
           "candidate": kernel_job(broken, cand.grid, cand.bindings, True), "trials": 1,
           "seed": 3, "reps": 2, "warmup": 1}
    assert sandbox.evaluate(job)["status"] == "mismatch"


def test_settings_nearest_the_kernels_own_knobs_come_first():
    space = [{"A": 1, "B": 1}, {"A": 2, "B": 2}, {"A": 2, "B": 1}, {"A": 1, "B": 2},
             {"A": 1, "B": 1, "C": 3}]
    assert nearest_first(space, {"A": 1, "B": 1}) == [
        {"A": 1, "B": 1}, {"A": 2, "B": 1}, {"A": 1, "B": 2}, {"A": 1, "B": 1, "C": 3},
        {"A": 2, "B": 2}]


def all_proposals(spec) -> list[dict]:
    """Every proposal of the built-in generator for `spec`, in order (each recorded as a
    slower attempt before the next is asked for)."""
    from kernelwright.optimize.generator import Attempt

    gen, history, proposed = BuiltinGenerator(), [], []
    while (cand := gen.propose(spec, history)) is not None:
        proposed.append(cand)
        history.append(Attempt("builtin", cand.source, cand.knobs, cand.grid, "slower", "",
                               1.0, 1.0))
    return proposed


def test_one_knob_changed_then_rewrites_then_the_rest():
    """The order: the own template's settings one knob away from the kernel's, then each
    rewrite with its template's defaults, then the rest of the own space (nearest first),
    then the rest of the rewrites' spaces; nothing twice."""
    for case in ("dense", "depthwise"):
        spec = conv_spec(CASES[case][0])
        proposed = [c.knobs for c in all_proposals(spec)]
        (rewrite,) = spec.rewrites
        first = proposed.index({"rewrite": rewrite.name, **rewrite.knob_space[0]})
        own = [k for k in nearest_first(spec.knob_space, spec.knobs) if k != spec.knobs]
        near = [k for k in own if sum(k.get(n) != spec.knobs.get(n) for n in k) == 1]
        assert proposed[:first] == near, case
        later = [k for k in proposed[first + 1:] if "rewrite" not in k]
        assert later == own[len(near):len(near) + len(later)], case
        rest = proposed[first + 1 + len(later):]
        assert all(k.get("rewrite") == rewrite.name for k in rest), case
        assert len(proposed) == len({str(sorted(k.items())) for k in proposed})
    assert near  # the depthwise kernel's WG and OPT neighbours come before its rewrite


PROBLEM = textwrap.dedent("""\
    import torch


    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.conv(x))


    def get_inputs():
        return [torch.randn(2, 8, 16, 16)]


    def get_init_inputs():
        return []
    """)


SLOW_MATMUL = {"BM": 16, "BN": 16, "TM": 1, "TN": 1, "BK": 16, "VEC": 1, "DB": 1}


def slow_gemm(request):
    return SLOW_MATMUL if request.kind == "matmul" else None


def fixed_cost(job: dict) -> float:
    """A kernel's time in the test: the direct convolution 1 ms, anything else 2 ms."""
    return 1.0 if "fn load_x(" in job["source"] else 2.0


@pytest.mark.slow
def test_the_search_keeps_a_faster_rewrite(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_TUNE_DB", str(tmp_path / "tune.sqlite"))
    monkeypatch.delenv("KERNELWRIGHT_TUNE", raising=False)
    evaluate = Sandbox.evaluate

    def timed_by_cost(self, job, timeout_s=None):
        result = evaluate(self, job, timeout_s)
        if result["status"] == "correct":
            result["time_ms"] = fixed_cost(job["candidate"])
            result["best_ms"] = fixed_cost(job["best"] or job["reference"])
        return result

    monkeypatch.setattr(Sandbox, "evaluate", timed_by_cost)
    check = search.check_module

    def module_by_cost(plan, folder, problem, s):  # the real check, the same fixed costs
        result = check(plan, folder, problem, s)
        if result.get("correct"):
            result["time_ms"] = 2.0 if folder.name == "before" else 1.0
        return result

    monkeypatch.setattr(search, "check_module", module_by_cost)
    path = tmp_path / "dense_conv.py"
    path.write_text(PROBLEM)
    lines = []
    report = optimize_problem(path, [BuiltinGenerator()], attempts=3, out=tmp_path / "run",
                              settings=Settings(reps=2, warmup=1, module_trials=2,
                                                profile_runs=2),
                              progress=lines.append, choose=slow_gemm)
    assert report.error is None, report.error
    (kernel,) = report.kernels
    assert kernel.kind == "matmul" and kernel.status == "improved", (kernel, lines)
    assert kernel.knobs == {"rewrite": "direct", **conv_knobs(False, 16)}, kernel.knobs
    assert (kernel.baseline_ms, kernel.best_ms) == (2.0, 1.0)  # the confirmation's times
    assert "fn load_a(" in kernel.baseline_source and "fn load_x(" in kernel.source
    assert report.before["correct"] and report.after["correct"]
    assert report.stored == 1
    assert "rewrite=direct" in render([report], diffs=False)


def test_what_earlier_kernels_measured_orders_the_settings():
    """spec.measured (earlier kernels of the same template in the run): within each group
    the settings predicted fastest come first; a setting predicted 10% slower or worse
    goes after everything else; a change of two knobs is predicted from each measured
    alone; the rewrite's measured lowering counts for all of its settings."""
    from kernelwright.optimize.builtin import _changes, by_change, predicted
    from kernelwright.optimize.generator import Measured

    spec = conv_spec(CASES["dense"][0])
    plain = [c.knobs for c in all_proposals(spec)]
    own = spec.knobs
    near = [k for k in plain if "rewrite" not in k
            and sum(k.get(n) != own.get(n) for n in set(k) | set(own)) == 1]
    slow, fast = near[0], near[-1]
    (rewrite,) = spec.rewrites
    elsewhere = {**own, "WG": -1}  # another kernel's own knobs
    spec.measured = [
        Measured(dict(own), dict(slow), 0.5), Measured(dict(own), dict(slow), 0.6),
        Measured(dict(own), dict(fast), 1.2),
        Measured(elsewhere, {"rewrite": rewrite.name, "WG": 64}, 0.15)]
    ordered = [c.knobs for c in all_proposals(spec)]
    assert sorted(map(str, ordered)) == sorted(map(str, plain))  # the same, reordered
    assert ordered[0] == fast
    ratios = [predicted(_changes(k, own), by_change(spec.measured)) for k in ordered]
    low = [r is not None and r <= 0.9 for r in ratios]
    assert low == sorted(low)  # every setting predicted slow after every other
    assert ordered[low.index(True)] == slow  # the first of them: a near one
    assert all(slow_ for k, slow_ in zip(ordered, low) if "rewrite" in k)
    two = frozenset({(n, own.get(n), slow.get(n)) for n in slow if slow[n] != own.get(n)}
                    | {(n, own.get(n), fast.get(n)) for n in fast if fast[n] != own.get(n)})
    assert predicted(two, by_change(spec.measured)) == pytest.approx(0.55 * 1.2)
    assert predicted(frozenset({("XX", 1, 2)}), by_change(spec.measured)) is None


def test_the_state_gives_what_each_template_measured(tmp_path):
    """RunState.measured: correct attempts with knobs on the kernels of a template, up to
    each kernel's first improvement (later ones were timed against the winner), not the
    kernel asked about; a state written before the columns existed gets them on open."""
    import sqlite3

    from kernelwright.optimize.generator import Attempt
    from kernelwright.optimize.store import RunState

    old = sqlite3.connect(tmp_path / "optimize.sqlite")
    old.execute("CREATE TABLE kernels (problem TEXT, spec_key TEXT, name TEXT, "
                "baseline_source TEXT, baseline_ms REAL, best_source TEXT, best_grid TEXT, "
                "best_knobs TEXT, best_generator TEXT, best_ms REAL, best_bindings TEXT, "
                "PRIMARY KEY (problem, spec_key))")
    old.commit()
    old.close()
    state = RunState(tmp_path)

    def attempt(status, knobs, ms, best):
        return Attempt("builtin", "", knobs, None, status, "", ms, best)

    state.set_kernel("p1", "k1", "matmul", "", None, {"BM": 64}, "matmul")
    for a in (attempt("slower", {"BM": 32}, 2.0, 1.0), attempt("mismatch", {"BM": 16}, None, 1.0),
              attempt("improved", {"BM": 128}, 0.5, 1.0),
              attempt("slower", {"BM": 256}, 0.6, 0.5)):
        state.add_attempt("p1", "k1", a, {})
    state.set_kernel("p2", "k2", "matmul", "", None, {"BM": 128}, "matmul")
    state.add_attempt("p2", "k2", attempt("slower", {"BM": 64}, 1.5, 1.0), {})
    state.set_kernel("p3", "k3", "reduce", "", None, {"WG": 64}, "reduce")
    state.add_attempt("p3", "k3", attempt("slower", {"WG": 256}, 1.5, 1.0), {})
    got = [(m.own, m.knobs, m.ratio) for m in state.measured("matmul", ("p2", "k2"))]
    assert got == [({"BM": 64}, {"BM": 32}, 0.5), ({"BM": 64}, {"BM": 128}, 2.0)]
    assert len(state.measured("matmul")) == 3 and len(state.measured("reduce")) == 1
    state.close()
