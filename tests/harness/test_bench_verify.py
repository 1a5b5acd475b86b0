"""verify.py's parts: tolerances, input distributions, comparisons, the guards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernelwright.check import inputs as check_inputs
from kernelwright.harness import verify as v
from kernelwright.harness.oom import OutOfMemory


def test_tolerances_by_dtype_and_mode() -> None:
    strict, loose = v.Tolerance(), v.Tolerance(loose=True)
    assert strict.for_dtype(torch.float32) == (1e-4, 1e-4)
    assert loose.for_dtype(torch.float32) == (1e-2, 1e-2)
    assert strict.for_dtype(torch.float16) == strict.for_dtype(torch.bfloat16) == (1e-2, 1e-2)
    assert strict.for_dtype(torch.int64) == (0.0, 0.0)
    assert (strict.label, loose.label) == ("strict", "loose(1e-2)")


@pytest.mark.parametrize("distribution", ["normal", "heavy", "normal*100"])
def test_other_distributions_keep_the_inputs_range(distribution: str) -> None:
    torch.manual_seed(0)
    own = [torch.rand(64, 64), torch.rand(64, 64) * 5 + 0.5, torch.randn(64, 64),
           torch.randint(0, 10, (7,)), torch.ones(3), 2.5]
    unit, positive, signed, ints, ones, scalar = v.synthesize(own, distribution, seed=1)
    assert 0 <= float(unit.min()) and float(unit.max()) <= 1
    assert abs(float(unit.mean()) - 0.5) > 0.05  # not centred: E[x] = 0.5 shortcuts fail
    assert float(positive.min()) >= 0.5
    assert float(signed.min()) < 0 < float(signed.max())
    assert ints is own[3] and torch.equal(ones, own[4]) and scalar == 2.5
    assert not torch.equal(signed, own[2])
    assert all(x.dtype == torch.float32 for x in (unit, positive, signed))


def test_heavy_tails_are_heavier_than_normal() -> None:
    own = [torch.randn(256, 256)]
    normal = v.synthesize(own, "normal", 3)[0]
    heavy = v.synthesize(own, "heavy", 3)[0]
    assert float(heavy.abs().max()) > 2 * float(normal.abs().max())
    assert float(heavy.abs().max()) <= check_inputs.HEAVY_TAIL_CLIP * float(own[0].std()) * 1.01


def test_trial_plan_cycles_distributions_and_ends_with_reuse() -> None:
    plan = v.plan_trials(5, seed=0)
    assert [t.distribution for t in plan] == ["own", "normal", "heavy", "own", "normal"]
    assert [t.reuse for t in plan] == [False] * 4 + [True]
    assert len({t.seed for t in plan}) == 5


def test_alt_shape_variants() -> None:
    a, b = torch.zeros(16, 8), torch.zeros(8, 3)
    assert v.alt_shape_variants([a, b]) == [[(9, 8), (8, 3)]]
    x, y = torch.zeros(4, 5), torch.zeros(4, 5)
    assert v.alt_shape_variants([x, y, 3]) == [[(3, 5), (3, 5), ()], [(3, 5), (4, 5), ()]]
    assert v.alt_shape_variants([2.0]) == []
    shapes = v.alt_shape_variants([a, b])[0]
    redrawn = v.synthesize([torch.randn(16, 8), torch.randint(0, 4, (8, 3))], "normal", 0, shapes)
    assert redrawn[0].shape == (9, 8) and redrawn[1].dtype == torch.int64


def test_compare_checks_every_element() -> None:
    tol = v.Tolerance()
    ref = torch.linspace(-1, 1, 1000)
    v.compare(ref + 5e-5, [ref], tol)
    with pytest.raises(v.Rejected) as bad:
        v.compare(torch.cat([ref[:-1], ref[-1:] + 1e-3]), [ref], tol)
    assert bad.value.reason == "mismatch" and "1 of 1000" in bad.value.detail
    poisoned = ref.clone()
    poisoned[500] = float("nan")
    with pytest.raises(v.Rejected, match="nan/poison"):
        v.compare(poisoned, [ref], tol)
    with pytest.raises(v.Rejected, match="shape"):
        v.compare(ref[:-1], [ref], tol)
    with pytest.raises(v.Rejected, match="dtype"):
        v.compare(ref.double(), [ref], tol)
    with pytest.raises(v.Rejected, match="structure"):
        v.compare((ref, ref), [ref], tol)
    with pytest.raises(v.Rejected, match="structure"):
        v.compare(ref.numpy(), [ref], tol)


def test_compare_non_finite_reference_and_integers() -> None:
    tol = v.Tolerance()
    ref = torch.tensor([1.0, float("inf"), float("nan")])
    v.compare(ref.clone(), [ref], tol)
    with pytest.raises(v.Rejected, match="mismatch"):
        v.compare(torch.tensor([1.0, 0.0, float("nan")]), [ref], tol)
    ints = torch.arange(10)
    v.compare(ints.clone(), [ints], tol)
    with pytest.raises(v.Rejected, match="mismatch"):
        v.compare(ints + (ints == 9), [ints], tol)


def test_reference_outputs_are_poisoned_but_never_the_models_own_tensors() -> None:
    class ReturnsWeight(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(3))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x * 2, self.weight

    reference = v.Reference(ReturnsWeight())
    doubled, weight = reference([torch.ones(3)])
    reference.release([doubled, weight])
    assert torch.isnan(doubled).all()
    assert torch.equal(weight, torch.ones(3))
    assert torch.equal(reference([torch.ones(3)])[0], torch.full((3,), 2.0))


def test_op_recorder_allows_data_movement_only() -> None:
    x = torch.randn(4, 4)
    with v.TorchOpRecorder() as moving:
        a = x.detach().clone().contiguous().to(torch.float64).numpy()
        torch.from_numpy(np.ascontiguousarray(a)).view(16)
        torch.empty(3)
    assert moving.compute_ops() == {}
    with v.TorchOpRecorder() as computing:
        torch.relu(x @ x)
    assert set(computing.compute_ops()) == {"mm", "relu"}


def test_accepts_poison() -> None:
    assert v.accepts_poison(lambda x, poison=False: x)
    assert v.accepts_poison(lambda *a, **k: a)
    assert not v.accepts_poison(lambda x: x)


def test_long_fp32_sums_are_judged_against_float64_with_pytorchs_own_error() -> None:
    """A large-K matmul: a correct fp32 kernel adding in another order than the fp32
    reference differs from it by more than 1e-4 near zero; against a float64 reference
    it is as close as the reference's own fp32 error allows, while fp16-rounded
    arithmetic is far off. The fp32 reference adds 16-wide slices one after another in
    fp32, rounding the same way on every CPU: PyTorch's own fp32 matmul rounds as the
    CPU's BLAS kernel does, and on one CPU (2026-12-01) it was within 1e-4 of float64
    everywhere, which left this test nothing to tell apart."""
    torch.manual_seed(0)
    a, b = torch.randn(32, 65536), torch.randn(65536, 32)
    exact = a.double() @ b.double()
    slices = (a.double().reshape(32, 4096, 16).transpose(0, 1)
              @ b.double().reshape(4096, 16, 32)).float()
    ref32 = torch.zeros(32, 32)
    for part in slices:
        ref32 += part
    noise = float((ref32.double() - exact).abs().max())
    assert noise > 1e-4  # the float32 reference itself is off by more than the tolerance
    other_order = exact.float()  # the best fp32 answer there is: not the reference's
    tol = v.Tolerance()
    with pytest.raises(v.Rejected, match="mismatch"):
        v.compare(other_order, [ref32], tol)  # strict against the fp32 reference alone
    v.compare(other_order, [ref32], tol, [exact])  # as accurate as the fp32 reference
    fp16 = (a.half().float() @ b.half().float())
    with pytest.raises(v.Rejected, match="float64 reference") as bad:
        v.compare(fp16, [ref32], tol, [exact])
    assert "mismatch" == bad.value.reason


def test_the_float64_fallback_runs_in_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    class MatMul(torch.nn.Module):
        def forward(self, a, b):
            return a @ b

    def inputs(seed: int) -> list:
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(32, 65536, generator=g), torch.randn(65536, 32, generator=g)]

    def make(model, example):
        def candidate(a, b):  # exact, rounded to fp32 (numpy): not PyTorch's fp32 sum
            product = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
            return torch.from_numpy(product.astype(np.float32))
        return candidate

    calls = []
    float64 = v.Reference.float64
    monkeypatch.setattr(v.Reference, "float64",
                        lambda self, xs, fp32=None: calls.append(1) or float64(self, xs, fp32))
    result = v.verify(MatMul(), inputs, make, trials=3, alt_shape=False,
                      check_torch_calls=False)
    assert result.verdict.correct, result.verdict.detail
    assert calls  # some trial was outside 1e-4 of PyTorch's fp32 result


def test_timing_rotates_small_input_sets_and_makes_one_large_one() -> None:
    from kernelwright.harness import timing

    made = []

    def make(size):
        def one(i):
            made.append(i)
            return [torch.zeros(size), 3]
        return one

    assert len(timing.timing_sets(make(1000), 3)) == 3 and made == [0, 1, 2]
    made.clear()
    large = timing.ROTATE_MAX_BYTES // 4 + 1
    assert len(timing.timing_sets(make(large), 3)) == 1 and made == [0]


def test_draws_depend_on_the_seed_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawn chunk by chunk on several threads, the values are the same for the same seed
    whatever the number of threads, and differ between seeds and between tensors."""
    monkeypatch.setattr(check_inputs, "DRAW_CHUNK", 1000)  # many chunks, on the pool
    own = [torch.randn(40, 100), torch.randn(40, 100)]
    for distribution in ("normal", "heavy"):
        first, second = v.synthesize(own, distribution, 5)
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            again = v.synthesize(own, distribution, 5)
        finally:
            torch.set_num_threads(threads)
        assert torch.equal(first, again[0]) and torch.equal(second, again[1])
        assert not torch.equal(first, second)
        assert not torch.equal(first, v.synthesize(own, distribution, 6)[0])


def test_heavy_draws_are_student_t_with_2_degrees_of_freedom() -> None:
    t = check_inputs.draw("heavy", [3, 0], (200_000,)).abs()
    # P(|t| <= x) = x / sqrt(2 + x^2) for 2 degrees of freedom
    assert abs(float(t.median()) - (2 / 3) ** 0.5) < 0.02
    assert abs(float((t <= 1).float().mean()) - 3 ** -0.5) < 0.01
    clipped = float((t >= check_inputs.HEAVY_TAIL_CLIP).float().mean())
    assert float(t.max()) == check_inputs.HEAVY_TAIL_CLIP and 0.001 < clipped < 0.005
    z = check_inputs.draw("normal", [3, 0], (200_000,))
    assert abs(float(z.mean())) < 0.01 and abs(float(z.std()) - 1) < 0.01


def test_non_finite_own_values_are_left_out_of_the_range() -> None:
    own = torch.rand(64, 64) * 3 + 0.5
    own[0, 0], own[1, 1] = float("inf"), float("nan")
    drawn = v.synthesize([own], "heavy", 2)[0]
    assert bool(torch.isfinite(drawn).all()) and float(drawn.min()) >= 0.5
    finite = own[torch.isfinite(own)]
    assert v.leaf_range(own) == (float(finite.min()), float(finite.max()), False)
    assert v.leaf_range(finite) == (float(finite.min()), float(finite.max()), True)


def test_verification_holds_one_trials_inputs_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trial inputs are drawn again where they are used: when the candidate runs, only its
    own trial's inputs and trial 0's (for the reuse trial) exist, and never the example
    it was made for."""
    import weakref

    import bench_candidates as bc

    drawn: weakref.WeakSet = weakref.WeakSet()
    trial_inputs = v.trial_inputs

    def tracked(own_inputs, distribution: str, seed: int, fresh: bool = False) -> list:
        inputs = trial_inputs(own_inputs, distribution, seed, fresh)
        drawn.update(x for x in inputs if isinstance(x, torch.Tensor))
        return inputs

    monkeypatch.setattr(v, "trial_inputs", tracked)
    examples: weakref.WeakSet = weakref.WeakSet()
    own_inputs = bc.randn_inputs(8, 64)

    def own(seed: int) -> list:
        inputs = own_inputs(seed)
        if seed == v.EXAMPLE_SEED_OFFSET:
            examples.update(inputs)
        return inputs

    alive = []

    def make(model, example):
        softmax = bc.honest_softmax(model, example)

        def candidate(x, poison=False):
            held = [t for t in drawn if t.numel() > 0]  # retired tensors are emptied
            alive.append((len(held), len(examples)))
            return softmax(x, poison=poison)
        return candidate

    stages: list[str] = []
    result = v.verify(bc.RowSoftmax(), own, make, on_stage=stages.append)
    assert result.verdict.correct, result.verdict.error
    assert len(alive) == 7  # trials 0-3, the reuse trial twice, the other shape
    assert max(count for count, _ in alive) == 2 and all(e == 0 for _, e in alive)
    assert stages == [f"screen {i} ({d})" for i, d in enumerate(
        ["own", "normal", "heavy", "own", "normal"])] + ["compile"] + [
        f"trial {i} ({d})" for i, d in enumerate(
            ["own", "normal", "heavy", "own", "normal"])] + ["alt-shape"]


def test_compare_fast_path_agrees_with_the_full_check() -> None:
    """Chunks that pass the quick test report the same statistics as the full one."""
    tol = v.Tolerance()
    ref = torch.randn(3000)
    cand = ref + 5e-5 * torch.rand(3000)
    fast = v.compare(cand, [ref], tol)[0]
    full = v.compare(cand, [ref], tol, [ref.double()])[0]  # never takes the quick path
    assert fast.max_ref == pytest.approx(full.max_ref)
    assert fast.max_abs_err == pytest.approx(full.max_abs_err, rel=1e-3)
    inf_ref = ref.clone()
    inf_ref[7] = float("inf")
    with pytest.raises(v.Rejected, match="mismatch"):
        v.compare(torch.where(torch.isinf(inf_ref), 5.0, inf_ref), [inf_ref], tol)


def test_each_trial_gives_the_candidate_tensor_objects_never_seen_before() -> None:
    """Inputs are freed after their trial, yet a later trial's tensor never has the id of
    an earlier one (nor trial 0's, but in the reuse trial): identity caches stay caught."""
    import bench_candidates as bc

    seen: list[int] = []

    def make(model, example):
        softmax = bc.honest_softmax(model, example)

        def candidate(x, poison=False):
            seen.append(id(x))
            return softmax(x, poison=poison)
        return candidate

    for _ in range(5):
        seen.clear()
        result = v.verify(bc.RowSoftmax(), bc.randn_inputs(8, 64), make, trials=7,
                          alt_shape=False)
        assert result.verdict.correct, result.verdict.error
        assert len(seen) == 8 and seen[6] == seen[7] == seen[0]  # the reuse trial, twice
        assert len(set(seen[:6])) == 6


def test_a_candidate_is_given_host_copies_of_the_problems_own_tensors() -> None:
    own = [torch.ones(3), 2.0]
    drawn = [torch.zeros(3), own[0], 2.0]
    given = v.for_candidate(drawn, own)
    assert given[0] is drawn[0]  # made by the harness already
    assert given[1] is not own[0] and given[1].equal(own[0])  # the problem's: copied
    assert given[2] == 2.0
    trial = v.trial_inputs(lambda seed: [torch.full((2,), float(seed))], "own", 5, fresh=True)
    assert trial[0].device.type == "cpu" and trial[0].tolist() == [5.0, 5.0]


def test_indices_out_of_bounds_are_found_on_the_cpu_before_a_gpu_sees_them() -> None:
    class Gather(torch.nn.Module):
        def forward(self, x, idx):
            return x[idx]

    # a reference on another device ("meta" here, CUDA in the bench) is not asked
    verifier = v.Verifier(Gather(), lambda seed: [], v.Tolerance(), True, "meta")
    x = torch.randn(4, 3)
    assert verifier.index_safe([x, torch.tensor([0, 3, -4])])
    assert not verifier.index_safe([x, torch.tensor([0, 4])])
    assert verifier.index_safe([x, 2.0])  # no integer tensor: nothing to index with


class Float64FitsPerBatch(torch.nn.Module):
    """Row softmax times 3; in float64 more than `fits` batch elements at once 'run out
    of memory' (as float64 attention over long rows does on a GPU)."""

    def __init__(self, fits: int, coupled: bool = False) -> None:
        super().__init__()
        self.fits, self.coupled = fits, coupled

    def forward(self, x):
        if x.dtype == torch.float64 and x.shape[0] > self.fits:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 160.00 GiB")
        y = torch.softmax(x, -1) * 3
        return y - y.mean(0) if self.coupled else y


def test_float64_reference_runs_per_batch_slice_when_it_does_not_fit():
    x = torch.randn(8, 5, 16)
    reference = v.Reference(Float64FitsPerBatch(fits=3))
    exact = reference.float64([x], reference([x]))
    want = torch.softmax(x.double(), -1) * 3
    assert exact[0].dtype == torch.float64
    torch.testing.assert_close(exact[0], want, rtol=1e-12, atol=1e-12)


def test_float64_reference_not_sliced_when_batch_elements_interact():
    x = torch.randn(8, 5, 16)
    reference = v.Reference(Float64FitsPerBatch(fits=3, coupled=True))
    with pytest.raises(OutOfMemory, match="float64 reference"):
        reference.float64([x], reference([x]))
