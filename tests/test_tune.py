"""The autotuner (kernelwright.tune) and the templates' knobs, on tiny problems.

Every setting of each template's search space must give PyTorch's result on sizes no
tile divides; a tuning run stores its winner and a second compile uses it without
tuning; a wrong or uncompilable candidate is discarded however fast it is; and
``kernelwright tune`` runs end to end. Timings on the software driver say nothing
about speed, so no test asserts on them: where a test needs a particular winner, it
replaces the timer.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn

import kernelwright
from kernelwright import kernels, tune
from kernelwright.check import inputs as check_inputs
from kernelwright.check import tolerance
from kernelwright.cli import main as cli
from kernelwright.compiler import CompiledModule
from kernelwright.ir.ir import CompileError
from kernelwright.lower import attention as attention_ops
from kernelwright.plan import Plan
from kernelwright.tune import choose as choose_module
from kernelwright.tune import tuner

# settings in the test matmul's space
WINNER = {"BM": 32, "BN": 32, "TM": 2, "TN": 2, "BK": 8, "VEC": 1, "DB": 1, "ROWS": 0,
          "UNROLL": 0, "GROUP": 0}
BROKEN = {"BM": 16, "BN": 64, "TM": 1, "TN": 4, "BK": 8, "VEC": 1, "DB": 1, "ROWS": 0,
          "UNROLL": 0, "GROUP": 0}
UNCOMPILABLE = {"BM": 64, "BN": 16, "TM": 4, "TN": 1, "BK": 8, "VEC": 1, "DB": 1, "ROWS": 0,
                "UNROLL": 0, "GROUP": 0}


@pytest.fixture(autouse=True)
def tune_db(tmp_path, monkeypatch):
    """Every test gets its own tuning cache (never the user's)."""
    path = tmp_path / "tune.sqlite"
    monkeypatch.setenv("KERNELWRIGHT_TUNE_DB", str(path))
    monkeypatch.delenv("KERNELWRIGHT_TUNE", raising=False)
    return path


def requests_of(module, inputs) -> tuple[CompiledModule, list[kernels.KernelRequest]]:
    """Compile with the default knobs, keeping every kernel's request."""
    seen = []

    def keep(request):
        seen.append(request)
        return None

    compiled = kernelwright.compile(module.eval(), list(inputs), choose=keep)
    return compiled, seen


def with_kernel(plan: Plan, gen: kernels.Generated) -> Plan:
    """The plan with every kernel of gen's key replaced by gen (same bindings)."""
    kernels = [dataclasses.replace(k, source=gen.source, grid=gen.grid, knobs=gen.knobs,
                                   bindings=gen.binding_ids(k.bindings[:len(gen.reads)],
                                                            k.bindings[-1]))
               if k.key == str(gen.key) else k for k in plan.kernels]
    return dataclasses.replace(plan, kernels=kernels)


def assert_matches(got, want) -> None:
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        if w.dtype.is_floating_point:
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
        else:
            assert torch.equal(g, w)


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


CASES = {
    # name: (kind, module, input shapes, settings the space must hold at least)
    # (the settings for large products: tests/test_matmul_knobs.py)
    "matmul": ("matmul", Fn(lambda a, b: torch.relu(a @ b)), [(130, 37), (37, 131)],
               kernels.matmul_space(256, 256, 64)),
    "matmul_transposed_b": ("matmul", Fn(lambda a, b: a @ b.t()), [(130, 37), (131, 37)],
                            kernels.matmul_space(256, 256, 64)),
    "elementwise": ("elementwise", Fn(lambda x: F.gelu(x) * 2), [(8, 1025)],
                    kernels.elementwise_space(1 << 24)),
    "elementwise_odd": ("elementwise", Fn(lambda x: F.gelu(x) * 2), [(3, 1001)],
                        kernels.elementwise_space(3)),
    "reduce_rows": ("reduce", Fn(lambda x: x.sum(-1)), [(37, 300)],
                    kernels.reduce_space(1, 300)),
    "reduce_argmax": ("reduce", Fn(lambda x: x.argmax(-1)), [(37, 300)],
                      kernels.reduce_space(1, 300)),
    "reduce_short_rows": ("reduce", Fn(lambda x: x.amax(-1)), [(1500, 7)],
                          kernels.reduce_space(1500, 7)),
    "reduce_columns": ("reduce", Fn(lambda x: x.sum(0)), [(300, 37)],
                       kernels.reduce_space(37, 300)),
    "rows_softmax": ("rows", Fn(lambda x: torch.softmax(x, -1)), [(37, 300)],
                     kernels.rows_space(300, 3)),
    "scan": ("scan", Fn(lambda x: torch.cumsum(x, 1)), [(5, 700)], kernels.scan_space(700)),
    # depthwise and 2 output channels: the direct kernels (lower/conv.implicit_gemm)
    "conv": ("conv", torch.nn.Conv2d(3, 3, 3, padding=1, groups=3), [(2, 3, 11, 13)],
             kernels.conv_space(False)),
    "conv_transpose": ("conv", torch.nn.ConvTranspose2d(3, 2, 3, stride=2), [(1, 3, 5, 7)],
                       kernels.conv_space(True)),
    "pool": ("pool", Fn(lambda x: F.max_pool2d(x, 3, 2)), [(2, 3, 15, 17)],
             [{"WG": wg, "OPT": opt, "VEC": 1} for wg in (128, 256) for opt in (1, 2, 4, 8)]),
    # rows of whole vec4s: the settings with vec4 loads too
    "pool_vec4": ("pool", Fn(lambda x: F.avg_pool2d(x, 3, 2, 1)), [(2, 3, 9, 16)],
                  [{"WG": wg, "OPT": opt, "VEC": 4} for wg in (128, 256) for opt in (2, 4, 8)]),
    "attention": ("attention", Fn(_sdpa), [(1, 2, 37, 16)] * 3,
                  kernels.attention_space(16, 16)),
    # a strided transposed convolution's taps copied (one phase has taps; rows of 10: the
    # lanes wrap rows)
    "materialize": ("materialize",
                    torch.nn.ConvTranspose2d(8, 64, (1, 10), stride=(2, 1), padding=(0, 1)),
                    [(2, 8, 5, 6)], [{"WG": 256, "EPT": 1, "VEC": v, "TILE": 0} for v in (1, 4)]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_every_knob_setting_matches_pytorch(case, monkeypatch):
    kind, module, shapes, must_hold = CASES[case]
    monkeypatch.setattr(attention_ops, "FUSED", True)  # small scores decompose otherwise
    torch.manual_seed(0)
    inputs = [torch.randn(s) for s in shapes]
    with torch.no_grad():
        want = module.eval()(*inputs)
    compiled, requests = requests_of(module, inputs)
    (request,) = [r for r in requests if r.kind == kind]
    assert all(k in request.space for k in must_hold), "the space lost settings"
    assert request.space[0] == request.default.knobs
    for knobs in request.space:
        gen = request.generate(knobs)
        assert gen.knobs == knobs and gen.key == request.key
        plan = with_kernel(compiled.plan, gen)
        got = CompiledModule(plan)(*inputs, poison=True)
        try:
            assert_matches(got, want)
        except AssertionError as exc:
            raise AssertionError(f"{kind} with knobs {knobs}: {exc}") from None


def test_knobs_outside_a_template_are_errors_and_a_chooser_cannot_break_a_compile():
    module, inputs = Fn(lambda a, b: a @ b), [torch.randn(20, 9), torch.randn(9, 11)]
    _, (request,) = requests_of(module, inputs)
    for bad in ({"BM": 48, "TM": 5}, {"BM": 512, "BN": 512, "TM": 1, "TN": 1},
                {"BQ": 8}, {"BK": 64, "BM": 128, "BN": 128, "TM": 8, "TN": 8},
                {"VEC": 4}, {"DB": 3}):
        with pytest.raises(CompileError):
            request.generate(bad)
    compiled = kernelwright.compile(module, inputs, choose=lambda request: {"BM": 48, "TM": 5})
    assert compiled.plan.kernels[0].knobs == request.default.knobs
    assert_matches(compiled(*inputs), inputs[0] @ inputs[1])


def test_keys_tell_fusions_and_shapes_apart():
    x = [torch.randn(40, 19), torch.randn(19, 33)]
    keys = {name: requests_of(Fn(fn), x)[1][0].key for name, fn in
            {"plain": lambda a, b: a @ b, "relu": lambda a, b: torch.relu(a @ b),
             "again": lambda a, b: a @ b}.items()}
    assert keys["plain"] == keys["again"] != keys["relu"]
    other = requests_of(Fn(lambda a, b: a @ b), [torch.randn(41, 19), torch.randn(19, 33)])[1]
    assert other[0].key != keys["plain"]  # the bucket (shapes) tells them apart
    assert keys["plain"].bucket == "f32[1,40,19] f32[1,19,33] -> f32[40,33]"


def fake_timer(fast: dict, ms: float = 0.5):
    """A timer under which the kernel with knobs `fast` takes `ms` and any other 1 ms."""
    def time_ms(exe, arrays, settings):
        return ms if exe.plan.kernels[0].knobs == fast else 1.0
    return time_ms


@pytest.mark.slow
def test_tuning_stores_the_winner_and_the_next_compile_uses_it(tune_db, monkeypatch):
    module = Fn(lambda a, b: torch.relu(a @ b))
    inputs = [torch.randn(40, 19), torch.randn(19, 33)]
    monkeypatch.setattr(tuner, "time_ms", fake_timer(WINNER))
    settings = tune.TuneSettings(reps=2, warmup=0)
    session = tune.TuningSession(settings)
    first = kernelwright.compile(module, inputs, choose=session.choose)
    (result,) = session.results
    assert result.status == "tuned" and result.knobs == WINNER
    assert (result.default_ms, result.best_ms, result.gain) == (1.0, 0.5, 2.0)
    assert not result.rejected and len(result.candidates) == len(
        kernels.matmul_space(40, 33, 19)) >= 2
    assert first.plan.kernels[0].knobs == WINNER
    (row,) = tune.TuneCache(tune_db).rows()
    assert row["knobs"] == WINNER and row["key"] == first.plan.kernels[0].key
    assert row["device"] == kernelwright.runtime.default_device().description
    assert row["default_knobs"] == kernels.matmul_knobs(40, 33)

    def no_tuning(*args, **kwargs):
        raise AssertionError("tuned again")

    monkeypatch.setattr(choose_module, "tune_kernel", no_tuning)
    second = kernelwright.compile(module, inputs)  # the default mode: the cache's answer
    kernel = second.plan.kernels[0]
    assert kernel.knobs == WINNER and kernel.source == first.plan.kernels[0].source
    assert "tile_a: array<f32, 256>" in kernel.source  # BK * BM
    assert_matches(second(*inputs), torch.relu(inputs[0] @ inputs[1]))
    session = tune.TuningSession(settings)
    kernelwright.compile(module, inputs, choose=session.choose)
    assert [r.status for r in session.results] == ["cached"]

    # A winner is used while the default it beat is today's; knobs the template gained
    # since count as their defaults. One tuned against another default is ignored by a
    # compile and tuned again by a session.
    cache, device = tune.TuneCache(tune_db), row["device"]
    key = kernels.KernelKey(row["template"], row["bucket"], row["digest"])
    default = kernels.matmul_knobs(40, 33)
    older = {k: v for k, v in default.items() if k != "UNROLL"}  # before UNROLL existed
    cache.store(device, key, tune.Winner(WINNER, older, 1.0, 0.5), 2, [])
    assert kernelwright.compile(module, inputs).plan.kernels[0].knobs == WINNER
    cache.store(device, key, tune.Winner(WINNER, {**default, "BK": 32}, 1.0, 0.5), 2, [])
    assert kernelwright.compile(module, inputs).plan.kernels[0].knobs == default
    monkeypatch.setattr(choose_module, "tune_kernel", tuner.tune_kernel)
    session = tune.TuningSession(settings)
    assert kernelwright.compile(module, inputs,
                                choose=session.choose).plan.kernels[0].knobs == WINNER
    assert [r.status for r in session.results] == ["tuned"]
    (row,) = tune.TuneCache(tune_db).rows()
    assert row["default_knobs"] == default

    monkeypatch.setenv("KERNELWRIGHT_TUNE", "off")
    assert kernelwright.compile(module, inputs).plan.kernels[0].knobs == \
        kernels.matmul_knobs(40, 33)
    monkeypatch.setenv("KERNELWRIGHT_TUNE_DB", str(tune_db.with_name("other.sqlite")))
    monkeypatch.delenv("KERNELWRIGHT_TUNE")
    assert kernelwright.compile(module, inputs).plan.kernels[0].knobs == \
        kernels.matmul_knobs(40, 33)


@pytest.mark.slow
def test_tune_on_tunes_missing_kernels_in_any_compile(tune_db, monkeypatch):
    monkeypatch.setattr(tuner, "time_ms", fake_timer(WINNER))
    monkeypatch.setenv("KERNELWRIGHT_TUNE", "on")
    inputs = [torch.randn(40, 19), torch.randn(19, 33)]
    compiled = kernelwright.compile(Fn(lambda a, b: a @ b + 1), inputs)
    assert compiled.plan.kernels[0].knobs == WINNER
    assert [r["knobs"] for r in tune.TuneCache(tune_db).rows()] == [WINNER]
    assert_matches(compiled(*inputs), inputs[0] @ inputs[1] + 1)


def test_wrong_and_uncompilable_candidates_are_discarded(tune_db, monkeypatch):
    fill, space = kernels.TEMPLATES["matmul"]

    def sabotaged(src, materialized, out, tnode, knobs, options):
        tmpl, slots, grid, used = fill(src, materialized, out, tnode, knobs, options)
        if knobs == BROKEN:  # every element's first accumulator starts at 1
            slots["ACCUMULATORS"] += "\n    acc_0_0 = 1.0;"
        if knobs == UNCOMPILABLE:
            slots["ACCUMULATORS"] += "\n    this is not wgsl;"
        return tmpl, slots, grid, used

    def with_invalid(out, tnode, options):
        return space(out, tnode, options) + [{"BM": 48, "BN": 32, "TM": 5, "TN": 2, "BK": 8}]

    monkeypatch.setitem(kernels.TEMPLATES, "matmul", (sabotaged, with_invalid))
    monkeypatch.setattr(tuner, "time_ms", fake_timer(BROKEN, ms=0.01))  # "fastest" of all
    module = Fn(lambda a, b: a @ b)
    inputs = [torch.randn(40, 19), torch.randn(19, 33)]
    session = tune.TuningSession(tune.TuneSettings(reps=2, warmup=0))
    compiled = kernelwright.compile(module, inputs, choose=session.choose)
    (result,) = session.results
    status = {json.dumps(c.knobs, sort_keys=True): c.status for c in result.candidates}
    assert status[json.dumps(BROKEN, sort_keys=True)] == "mismatch"
    assert status[json.dumps(UNCOMPILABLE, sort_keys=True)] == "compile error"
    assert sorted(c.status for c in result.rejected) == ["compile error", "invalid", "mismatch"]
    assert result.status == "tuned" and result.knobs not in (BROKEN, UNCOMPILABLE)
    assert compiled.plan.kernels[0].knobs == result.knobs
    assert_matches(compiled(*inputs), inputs[0] @ inputs[1])
    (row,) = tune.TuneCache(tune_db).rows()
    assert sorted(r["status"] for r in row["rejected"]) == ["compile error", "invalid",
                                                             "mismatch"]
    assert next(r for r in row["rejected"] if r["status"] == "mismatch")["knobs"] == BROKEN


def mismatch(want, got, dtype):
    found = tolerance.compare(want, got, dtype)
    return found.describe() if found else None


def test_mismatch_checks_every_element():
    import numpy as np

    want = np.linspace(-3, 3, 1000, dtype=np.float32)
    assert mismatch(want, want + 2e-4, "f32") is None  # within 1e-4 of the scale 3
    got = want.copy()
    got[999] += 1e-3
    assert "1 of 1000" in mismatch(want, got, "f32")
    got[5] = np.nan
    assert "2 of 1000" in mismatch(want, got, "f32")
    nan = np.array([np.nan, np.inf, 1.0], np.float32)
    assert mismatch(nan, nan.copy(), "f32") is None
    assert mismatch(np.arange(4, dtype=np.int32), np.array([0, 1, 2, 4], np.int32), "i32")


def test_checks_go_by_chunks(monkeypatch):
    """compare by chunks (a 2 GB output's temporaries stay small): the
    scale is the whole output's, and a mismatch in any chunk is found."""
    import numpy as np

    monkeypatch.setattr(tolerance, "COMPARE_CHUNK", 7)
    want = np.linspace(-3, 3, 50, dtype=np.float32)
    want[49] = 300.0  # the scale is in the last chunk: 1e-4 of it is 0.03
    got = want + np.float32(0.02)
    assert mismatch(want, got, "f32") is None
    got[3] += 0.02
    assert "1 of 50" in mismatch(want, got, "f32")
    got[45] = np.nan
    assert "2 of 50" in mismatch(want, got, "f32")


def test_gpu_compare_agrees_with_compare(monkeypatch):
    """tune.gpucheck.compare_buffers gives check.tolerance.compare's verdict on the GPU: the same
    count of elements outside the tolerance (whose scale may sit in another workgroup's
    part), the first of them, NaN left where a value was expected, NaN and infinity
    matched by kind, integers bit for bit; and max |err| over the finite elements."""
    import numpy as np
    import wgpu

    from kernelwright.runtime import runtime
    from kernelwright.tune import gpucheck

    monkeypatch.setattr(gpucheck, "MAX_GROUPS", 3)  # the grid-stride loop goes round
    dev = runtime.default_device()

    def check(want, got, dtype="f32"):
        bufs = [dev.device.create_buffer_with_data(
            data=np.ascontiguousarray(a), usage=wgpu.BufferUsage.STORAGE) for a in (want, got)]
        return gpucheck.compare_buffers(dev, *bufs, want.size, dtype)

    rng = np.random.default_rng(3)
    want = rng.standard_normal(5000).astype(np.float32)
    want[4321] = 500.0  # the scale: 1e-4 of it is 0.05
    got = want + np.float32(0.04)
    v = check(want, got)
    assert v.ok and v.first is None and abs(v.max_abs_err - 0.04) < 1e-5
    assert tolerance.compare(want, got, "f32") is None
    got[[17, 3000]] += np.float32(0.02)
    got[2500] = np.nan
    v, found = check(want, got), tolerance.compare(want, got, "f32")
    assert (v.bad, v.first, v.unwritten) == (found.count, 17, 1) == (3, 17, 1)
    special = np.array([np.nan, np.inf, -np.inf, 1.0] * 100, np.float32)
    assert check(special, special.copy()).ok
    swapped = special.copy()
    swapped[[0, 5]] = [np.inf, np.nan]  # NaN for inf and the other way round
    v = check(special, swapped)
    assert (v.bad, v.first) == (2, 0) and tolerance.compare(special, swapped, "f32").count == 2
    ints = np.arange(1000, dtype=np.int32)
    other = ints.copy()
    other[999] = 7
    assert check(ints, ints.copy(), "i32").ok
    v = check(ints, other, "i32")
    assert (v.bad, v.first) == (1, 999)
    # bit for bit: -0.0 is not 0.0, though compare calls them equal
    zeros = np.zeros(10, np.float32)
    assert not check(zeros, -zeros, "exact").ok and check(zeros, -zeros).ok


def test_input_sets_are_drawn_by_chunks(monkeypatch):
    """Each input set alone, the same for the same (seed, set) whatever else is drawn;
    every chunk of an operand has its own generator (no chunk repeats another); set t
    has distribution t mod 3."""
    import numpy as np

    monkeypatch.setattr(check_inputs, "DRAW_CHUNK", 16)
    ops = [(40, "f32"), (33, "i32")]
    sets = [check_inputs.kernel_inputs(ops, t, seed=5) for t in range(3)]
    assert [a.shape for a in sets[1]] == [(40,), (33,)]
    again = check_inputs.kernel_inputs(ops, 1, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(sets[1], again))
    normal, positive, heavy = (s[0] for s in sets)
    assert not np.array_equal(normal[:16], normal[16:32])
    assert not np.array_equal(normal, check_inputs.kernel_inputs(ops, 0, seed=6)[0])
    assert positive.min() >= 0.1 and positive.max() < 2.0 and normal.min() < 0
    assert np.abs(heavy).max() <= check_inputs.HEAVY_TAIL_CLIP
    assert sets[0][1].min() >= 0 and sets[0][1].max() < 8 and sets[0][1].dtype == np.int32


def test_old_plans_without_knobs_load(tmp_path):
    compiled = kernelwright.compile(Fn(lambda x: x * 2), [torch.randn(5)])
    assert compiled.plan.kernels[0].knobs == {"WG": 256, "EPT": 1, "VEC": 1, "TILE": 0}
    compiled.plan.save(tmp_path / "plan")
    meta = json.loads((tmp_path / "plan" / "plan.json").read_text())
    for k in meta["kernels"]:
        del k["key"], k["knobs"]
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(meta))
    loaded = Plan.load(tmp_path / "plan")
    assert loaded.kernels[0].knobs == {} and loaded.kernels[0].key == ""


def write_suite(root):
    problems = {
        "level1/1_matmul_relu.py": """
            import torch

            class Model(torch.nn.Module):
                def forward(self, a, b):
                    return torch.relu(a @ b)

            def get_inputs():
                return [torch.randn(40, 19), torch.randn(19, 33)]

            def get_init_inputs():
                return []
            """,
        "level1/2_sigmoid_sum.py": """
            import torch

            SIZES = {"small": {"R": 37}, "full": {"R": 4096}}
            R = 300

            class Model(torch.nn.Module):
                def forward(self, x):
                    return torch.sigmoid(x).sum(dim=1)

            def get_inputs():
                return [torch.randn(23, R)]

            def get_init_inputs():
                return []
            """,
    }
    for name, text in problems.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_tune_command_end_to_end(tmp_path, capsys):
    suite, db = tmp_path / "suite", tmp_path / "cli.sqlite"
    write_suite(suite)
    args = ["tune", str(suite), "--size", "small", "--reps", "2", "--db", str(db)]
    assert cli.main(args) == 0
    out, err = capsys.readouterr()
    assert "[1/2] level1/1_matmul_relu" in err and "[2/2] level1/2_sigmoid_sum" in err
    assert "checked against PyTorch" in err and "matmul f32[1,40,19]" in err
    assert "2 kernels tuned, 0 already cached" in out and "gain" in out
    rows = tune.TuneCache(db).rows()
    assert sorted(r["template"] for r in rows) == ["matmul", "reduce"]
    assert all(r["bucket"] in ("f32[1,40,19] f32[1,19,33] -> f32[40,33]",
                               "f32[23,37] -> f32[23]") for r in rows)
    assert cli.main(args + ["--only", "sigmoid"]) == 0
    out, err = capsys.readouterr()
    assert "0 kernels tuned, 1 already cached" in out and "1_matmul" not in err
    assert cli.main(["tune", str(tmp_path / "missing")]) == 2
