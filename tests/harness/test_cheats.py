"""The cheat corpus: every loophole of the brief is rejected, for the right reason,
and honest candidates beside them are accepted.

Each case runs `verify` in process on a tiny reference problem with a candidate
factory from bench_candidates.py (numpy for the honest ones: numpy is not PyTorch).
"""

from __future__ import annotations

import bench_candidates as bc
import numpy as np
import pytest
import torch

from kernelwright.check.tolerance import Tolerance
from kernelwright.harness.verify import REASONS, compare, verify


def model_of(cls: type, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return cls().eval()


# (reference class, its own inputs, candidate factory, loose mode, expected reason)
CHEATS = {
    "stale reference output (freed buffer)":
        (bc.SpiedReLU, bc.randn_inputs(8, 32), bc.cheat_stale_reference_output, False,
         "nan/poison"),
    "outputs cached by input identity":
        (bc.RowSoftmax, bc.randn_inputs(8, 64), bc.cheat_cache_by_identity, False,
         "stale-on-reuse"),
    "all-zero output":
        (bc.LinearReLU, bc.randn_inputs(8, 64), bc.cheat_zeros, False, "mismatch"),
    "all-zero output on a near-zero problem":
        (bc.Tiny, bc.randn_inputs(8, 64), bc.cheat_zeros, False, "degenerate-zero"),
    "constant output on a constant problem":
        (bc.ConstantOne, bc.randn_inputs(8, 64), bc.cheat_ones, False, "degenerate-constant"),
    "analytic shortcut E[x] = 0.5 (uniform inputs only), even in loose mode":
        (bc.RowMean, bc.rand_inputs(8, 65536), bc.cheat_uniform_mean, True, "mismatch"),
    "computing only the first row":
        (bc.RowSoftmax, bc.randn_inputs(8, 64), bc.cheat_first_row_only, False, "nan/poison"),
    "hard-coded shape":
        (bc.RowSoftmax, bc.randn_inputs(8, 64), bc.cheat_hard_coded_shape, False,
         "alt-shape-failed"),
    "fp16 arithmetic in strict mode":
        (bc.LinearReLU, bc.randn_inputs(8, 64), bc.cheat_fp16, False, "mismatch"),
    "calling torch ops":
        (bc.RowSoftmax, bc.randn_inputs(8, 64), bc.cheat_calls_torch, False, "calls-pytorch"),
    "calling the reference model":
        (bc.LinearReLU, bc.randn_inputs(8, 64), bc.cheat_calls_reference, False,
         "calls-pytorch"),
    "tampering with the reference":
        (bc.RowSum, bc.randn_inputs(8, 64), bc.cheat_tamper_reference, False,
         "tampered-reference"),
    "a kernel that overwrites its input (a bug, not a cheat)":
        (bc.RowSoftmax, bc.randn_inputs(8, 64), bc.buggy_clobbers_input, False,
         "not-deterministic-on-reuse"),
}

HONEST = {
    "linear + relu": (bc.LinearReLU, bc.randn_inputs(8, 64), bc.honest_linear_relu, False),
    "row softmax": (bc.RowSoftmax, bc.randn_inputs(8, 64), bc.honest_softmax, False),
    "row sum": (bc.RowSum, bc.randn_inputs(8, 128), bc.honest_sum, False),
    "row mean of uniform inputs": (bc.RowMean, bc.rand_inputs(8, 4096), bc.honest_mean, False),
    "near-zero output, computed": (bc.Tiny, bc.randn_inputs(8, 64), bc.honest_tiny, False),
    "log of positive inputs": (bc.Log, bc.positive_inputs(8, 64), bc.honest_log, False),
    "integer index input": (bc.IndexSelect, bc.index_inputs, bc.honest_index_select, False),
    "built for one shape, like a compiled module":
        (bc.RowSoftmax, bc.randn_inputs(8, 64), bc.honest_specialised_softmax, False),
    "moves data through torch": (bc.RowSoftmax, bc.randn_inputs(8, 64),
                                 bc.honest_with_data_movement, False),
    "fp16 arithmetic in loose mode (labelled)":
        (bc.LinearReLU, bc.randn_inputs(8, 64), bc.cheat_fp16, True),
}


@pytest.mark.parametrize("case", list(CHEATS))
def test_cheat_is_rejected_with_the_right_reason(case: str) -> None:
    cls, own, factory, loose, expected = CHEATS[case]
    original_forward = cls.forward
    try:
        result = verify(model_of(cls), own, factory, loose=loose).verdict
    finally:
        cls.forward = original_forward
    assert expected in REASONS
    assert not result.correct, f"{case} was accepted"
    assert result.reason == expected, f"{case}: {result.error}"
    assert result.error and result.error.startswith(expected)


@pytest.mark.parametrize("case", list(HONEST))
def test_honest_candidate_is_accepted(case: str) -> None:
    cls, own, factory, loose = HONEST[case]
    verification = verify(model_of(cls), own, factory, loose=loose)
    result = verification.verdict
    assert result.correct, f"{case}: {result.error}"
    assert result.compiled and result.reason is None
    assert result.precision == ("loose(1e-2)" if loose else "strict")
    assert len(result.trials) >= 5
    assert verification.candidate is not None


def test_the_shortcut_fools_the_problems_own_inputs_alone() -> None:
    """Why other distributions matter: on its own uniform inputs the shortcut passes."""
    model = model_of(bc.RowMean)
    x = bc.rand_inputs(8, 65536)(5)[0]
    shortcut = bc.cheat_uniform_mean(model, [x])
    compare(shortcut(x), [model(x)], Tolerance(loose=True))  # raises if it did not pass


def test_every_trial_has_fresh_inputs_from_several_distributions() -> None:
    result = verify(model_of(bc.RowSoftmax), bc.randn_inputs(8, 64), bc.honest_softmax).verdict
    distributions = [t["distribution"] for t in result.trials]
    assert {"own", "normal", "heavy"} <= set(distributions)
    assert len({t["seed"] for t in result.trials}) == len(result.trials)
    assert result.trials[-1]["reuse"]
    assert result.alt_shape and "[5, 64]" in result.alt_shape


def test_near_zero_and_constant_problems_are_flagged() -> None:
    tiny = verify(model_of(bc.Tiny), bc.randn_inputs(8, 64), bc.honest_tiny).verdict
    assert tiny.degenerate == "near-zero" and tiny.correct
    constant = verify(model_of(bc.ConstantOne), bc.randn_inputs(8, 64),
                      bc.honest_constant).verdict
    # Even an honest kernel cannot be told from a do-nothing one here: rejected, flagged.
    assert constant.degenerate == "constant"
    assert constant.reason == "degenerate-constant"


def test_compile_error_is_reported() -> None:
    def failing(model: torch.nn.Module, example: list) -> None:
        raise NotImplementedError("aten::frobnicate has no lowering (model.py:3)")

    result = verify(model_of(bc.RowSoftmax), bc.randn_inputs(8, 64), failing).verdict
    assert not result.compiled and result.reason == "compile"
    assert "frobnicate" in result.detail


def test_candidate_exception_is_reported() -> None:
    def raising(model: torch.nn.Module, example: list) -> bc.NumpyCandidate:
        return bc.NumpyCandidate(lambda self, x: 1 / 0)

    result = verify(model_of(bc.RowSoftmax), bc.randn_inputs(8, 64), raising).verdict
    assert result.compiled and result.reason == "runtime"
    assert "ZeroDivisionError" in result.detail


# A softmax over a long row of uniform [0, 1) values (KernelBench draws torch.rand): every
# probability lies in about [1.2e-5, 3.2e-5], below the fp32 atol of 1e-4 on every input,
# yet it varies by a factor e along the row: a "tiny" output, judged with atol scaled.
LONG_ROW = bc.rand_inputs(2, 50000)


def uniform_probabilities(model: torch.nn.Module, example: list) -> bc.NumpyCandidate:
    """1 / n everywhere: within an absolute 1e-4 of every probability, but no softmax."""
    return bc.NumpyCandidate(lambda self, x: np.full(x.shape, 1 / x.shape[1], np.float32))


def test_a_softmax_over_a_long_row_is_judged_with_a_scaled_tolerance() -> None:
    verdict = verify(model_of(bc.RowSoftmax), LONG_ROW, bc.honest_softmax).verdict
    assert verdict.correct, verdict.error
    assert verdict.degenerate == "tiny"
    assert any(flag.startswith("scaled-tolerance") for flag in verdict.flags)
    assert max(t["max_abs_ref"] for t in verdict.trials) < 1e-4  # below atol everywhere


@pytest.mark.parametrize("factory", [bc.cheat_zeros, uniform_probabilities])
def test_a_do_nothing_kernel_fails_a_tiny_softmax(factory) -> None:
    verdict = verify(model_of(bc.RowSoftmax), LONG_ROW, factory).verdict
    assert not verdict.correct and verdict.degenerate == "tiny"
    assert verdict.reason == "mismatch", verdict.error
    assert "scaled to max |ref|" in verdict.detail and not verdict.flags


class TinyConstant(torch.nn.Module):
    """Below the tolerance and constant: no input makes it informative."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0 + 1e-6


def test_a_tiny_constant_output_still_fails_as_degenerate() -> None:
    def honest(model: torch.nn.Module, example: list) -> bc.NumpyCandidate:
        return bc.NumpyCandidate(lambda self, x: np.full(x.shape, 1e-6, np.float32))

    verdict = verify(model_of(TinyConstant), bc.randn_inputs(8, 64), honest).verdict
    assert verdict.degenerate == "zero" and verdict.reason == "degenerate-zero"
