"""Verification of modules with state: judged as sequences of calls from the same state."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

import kernelwright
from kernelwright.harness import verify as v

WIDTH = 16


class RunningSum(nn.Module):
    """Adds each call's column sums to a buffer; returns half the input plus the total."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x.sum(0))
        return x * 0.5 + self.total


class Forgetful(nn.Module):
    """RunningSum that empties its buffer first: every call forgets the ones before."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.register_buffer("total", model.total.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.zero_()
        self.total.add_(x.sum(0))
        return x * 0.5 + self.total


class NumpyRunningSum:
    """RunningSum in numpy, with the `state()` a compiled module has; `keep=False` makes
    its outputs right but its reported state the one it started from."""

    def __init__(self, model: nn.Module, keep: bool = True) -> None:
        self.start = model.total.detach().numpy().copy()
        self.total = self.start.copy()
        self.keep = keep

    def __call__(self, x: torch.Tensor, poison: bool = False) -> torch.Tensor:
        self.total = self.total + x.numpy().sum(0, dtype=np.float32)
        return torch.from_numpy((x.numpy() * 0.5 + self.total).astype(np.float32))

    def state(self) -> dict[str, torch.Tensor]:
        return {"total": torch.from_numpy((self.total if self.keep else self.start).copy())}


def inputs(seed: int) -> list:
    torch.manual_seed(seed)
    return [torch.randn(4, WIDTH)]


def test_a_running_sum_compiled_by_kernelwright_passes_as_a_sequence() -> None:
    model = RunningSum()
    verification = v.verify(model, inputs, lambda m, x: kernelwright.compile(m, x), trials=3)
    verdict = verification.verdict
    assert verdict.correct, verdict.error
    assert verdict.sequence
    assert [t["calls"] for t in verdict.trials] == [v.SEQUENCE_CALLS] * 2 + [2]
    assert all(t["state_compared"] == 1 for t in verdict.trials)
    assert any(flag.startswith("sequence: the module has state (total)")
               for flag in verdict.flags)
    assert verdict.alt_shape and "[3, 16]" in verdict.alt_shape
    assert torch.equal(model.total, torch.zeros(WIDTH))  # the module as built is untouched


def test_a_candidate_that_forgets_the_state_fails_at_the_second_call() -> None:
    verdict = v.verify(RunningSum(), inputs,
                       lambda m, x: kernelwright.compile(Forgetful(m), x), trials=3).verdict
    assert verdict.compiled and not verdict.correct and verdict.sequence
    assert verdict.reason == "mismatch", verdict.error
    assert "trial 0 (own), call 2 of 3 of a sequence" in verdict.detail
    assert "state carried from call to call: total" in verdict.detail


def test_a_numpy_candidate_without_a_state_method_is_judged_by_its_outputs() -> None:
    class Plain(NumpyRunningSum):
        state = None

    verdict = v.verify(RunningSum(), inputs, lambda m, x: Plain(m), trials=3).verdict
    assert verdict.correct and verdict.sequence, verdict.error
    assert all(t["state_compared"] == 0 for t in verdict.trials)
    assert any("the candidate has no state() to compare" in flag for flag in verdict.flags)


def test_a_wrong_state_with_right_outputs_fails_on_the_state() -> None:
    verdict = v.verify(RunningSum(), inputs, lambda m, x: NumpyRunningSum(m, keep=False),
                       trials=3, alt_shape=False).verdict
    assert verdict.reason == "state", verdict.error
    assert verdict.detail.startswith("trial 0 (own), after the trial's calls, state total")


class Counted(nn.Module):
    """A stateless row softmax that counts its calls (a Python int: not tensor state)."""

    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Counted.calls += 1
        return torch.softmax(x, dim=1)


def test_a_stateless_problem_is_judged_call_by_call_as_before() -> None:
    def softmax(model: nn.Module, example: list) -> object:
        return lambda x, poison=False: torch.from_numpy(
            np.exp(x.numpy()) / np.exp(x.numpy()).sum(1, keepdims=True))

    Counted.calls = 0
    verdict = v.verify(Counted(), inputs, softmax, check_torch_calls=False).verdict
    assert verdict.correct and not verdict.sequence, verdict.error
    assert all(set(t) == {"index", "distribution", "seed", "reuse", "inputs", "max_abs_err",
                          "max_abs_ref"} for t in verdict.trials)
    assert not any(flag.startswith("sequence") for flag in verdict.flags)
    # 5 screens, 5 trials and the reuse trial's repeat, the alt shape's screen and check
    assert Counted.calls == 13


def test_the_float64_rerun_replays_the_sequence_from_its_start() -> None:
    reference = v.Reference(RunningSum())
    reference([torch.ones(2, WIDTH)])
    start = v.snapshot_state(reference.model)
    calls = [reference.place(inputs(seed)) for seed in (1, 2)]
    for args in calls:
        fp32 = reference(args)
    outputs, state = reference.rerun64(start, calls)
    assert state["total"].dtype == torch.float64 and outputs[0].dtype == torch.float64
    torch.testing.assert_close(state["total"].float(), reference.model.total)
    torch.testing.assert_close(outputs[0].float(), fp32[0])
    assert v.changed_state(start, reference.model) == ["total"]
    assert v.changed_state(v.snapshot_state(reference.model), copy.deepcopy(reference.model)) == []


class Uncopyable(RunningSum):
    """A RunningSum that cannot be deep-copied: the reference runs the model itself."""

    def __deepcopy__(self, memo: dict) -> Uncopyable:
        raise TypeError("not copyable")


def test_an_uncopyable_module_is_reset_to_its_state_as_built_after_the_screens() -> None:
    made: list[NumpyRunningSum] = []

    def make(model: nn.Module, example: list) -> NumpyRunningSum:
        made.append(NumpyRunningSum(model))
        return made[-1]

    verdict = v.verify(Uncopyable(), inputs, make, trials=3, alt_shape=False).verdict
    assert verdict.correct and verdict.sequence, verdict.error
    assert not made[0].start.any()  # made from the state as built, not the screened one
