"""Optimizers with PyTorch's semantics and hyperparameter names, as IR update rules.

Each optimizer writes one parameter's update into a training step's graph
(`update`): elementwise ops (`GraphBuilder.ew`) from the parameter, its gradient and
its state tensors (SGD's momentum buffer, Adam's exp_avg and exp_avg_sq) to their new
values, which the step registers as state updates (`Graph.updates`), so that
parameters and optimizer state stay on the GPU between steps. What changes from step
to step (the learning rate, Adam's bias corrections, whether SGD's momentum buffer is
fresh) is computed on the host per step (`hyper`, in float64 as torch.optim computes
it) and passed to the plan as one small f32 input, so a new learning rate needs no new
plan. Fixed settings (momentum, betas, eps, weight decay) are constants of the kernels.

The arithmetic follows torch.optim's single-tensor implementations (PyTorch's default
for CPU tensors) operation by operation, so that the f32 results round the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..ir.ir import GraphBuilder, Value


class Optimizer:
    """An optimizer's settings; subclasses define its state, per-step scalars and update."""

    lr: float
    # the names of its per-step scalars (`hyper`), in order: the step's input vector
    hyper_names: tuple[str, ...] = ()

    def state_names(self) -> list[str]:
        """The names of the state tensors kept per parameter (as in torch.optim's state)."""
        return []

    def hyper(self, lr: float, step: int) -> list[float]:
        """The per-step scalars for update number `step` (1-based) at learning rate `lr`."""
        raise NotImplementedError

    def update(self, b: GraphBuilder, p: Value, g: Value, state: list[Value],
               h: dict[str, Value], kept: Callable[[Value, Value], Value]
               ) -> tuple[Value, list[Value]]:
        """The parameter's new value and its state tensors' new values, each state's new
        value passed through `kept(old, new)` (the step's guard: the old value where the
        step is skipped) before the parameter's update reads it, so that a state is read
        and written by one kernel (schedule.written_in_place) and the parameter's update
        reads only the new states; where the step applies, kept returns `new` unchanged."""
        raise NotImplementedError


def _scalar(b: GraphBuilder, x: float) -> Value:
    return b.scalar(float(x), "f32")


def _lerp(b: GraphBuilder, start: Value, end: Value, weight: float) -> Value:
    """torch.lerp(start, end, weight) for a Python weight, rounded as PyTorch's kernel."""
    diff = b.ew("sub", end, start)
    if abs(weight) < 0.5:
        return b.ew("add", start, b.ew("mul", diff, _scalar(b, weight)))
    return b.ew("sub", end, b.ew("mul", diff, _scalar(b, 1.0 - weight)))


@dataclass
class SGD(Optimizer):
    """torch.optim.SGD: momentum, dampening, Nesterov momentum, L2 weight decay."""

    lr: float = 1e-3
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    maximize: bool = False
    # neg_lr: -lr; keep, take: the momentum buffer's new value is keep * buf + take * d_p
    # (0 and 1 at its first update, where PyTorch starts it as a copy of d_p)
    hyper_names = ("neg_lr", "keep", "take")

    def __post_init__(self) -> None:
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        for name in ("lr", "momentum", "weight_decay"):
            if getattr(self, name) < 0:
                raise ValueError(f"invalid {name}: {getattr(self, name)}")

    def state_names(self) -> list[str]:
        return ["momentum_buffer"] if self.momentum != 0 else []

    def hyper(self, lr: float, step: int) -> list[float]:
        if step == 1:
            return [-lr, 0.0, 1.0]
        return [-lr, self.momentum, 1.0 - self.dampening]

    def update(self, b, p, g, state, h, kept):
        d_p = b.ew("neg", g) if self.maximize else g
        if self.weight_decay != 0:
            d_p = b.ew("add", d_p, b.ew("mul", p, _scalar(b, self.weight_decay)))
        new_state = []
        if self.momentum != 0:
            (old,) = state
            buf = kept(old, b.ew("add", b.ew("mul", old, h["keep"]),
                                 b.ew("mul", d_p, h["take"])))
            new_state.append(buf)
            d_p = b.ew("add", d_p, b.ew("mul", buf, _scalar(b, self.momentum))) \
                if self.nesterov else buf
        return b.ew("add", p, b.ew("mul", d_p, h["neg_lr"])), new_state


@dataclass
class Adam(Optimizer):
    """torch.optim.Adam: bias-corrected moments, L2 weight decay, AMSGrad."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False
    maximize: bool = False
    decoupled_weight_decay: bool = False
    # neg_step_size: -lr / (1 - beta1^t); bc2_sqrt: sqrt(1 - beta2^t); decay: 1 - lr * wd
    hyper_names = ("neg_step_size", "bc2_sqrt", "decay")

    def __post_init__(self) -> None:
        if not (0.0 <= self.betas[0] < 1.0 and 0.0 <= self.betas[1] < 1.0):
            raise ValueError(f"invalid betas: {self.betas}")
        for name in ("lr", "eps", "weight_decay"):
            if getattr(self, name) < 0:
                raise ValueError(f"invalid {name}: {getattr(self, name)}")

    def state_names(self) -> list[str]:
        return ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if self.amsgrad else [])

    def hyper(self, lr: float, step: int) -> list[float]:
        beta1, beta2 = self.betas
        return [-(lr / (1 - beta1 ** step)), (1 - beta2 ** step) ** 0.5,
                1 - lr * self.weight_decay]

    def update(self, b, p, g, state, h, kept):
        beta1, beta2 = self.betas
        if self.maximize:
            g = b.ew("neg", g)
        if self.weight_decay != 0:
            if self.decoupled_weight_decay:
                p = b.ew("mul", p, h["decay"])
            else:
                g = b.ew("add", g, b.ew("mul", p, _scalar(b, self.weight_decay)))
        exp_avg, exp_avg_sq = state[:2]
        exp_avg = kept(exp_avg, _lerp(b, exp_avg, g, 1.0 - beta1))
        exp_avg_sq = kept(exp_avg_sq, b.ew("add", b.ew("mul", exp_avg_sq, _scalar(b, beta2)),
                                           b.ew("mul", b.ew("mul", g, g),
                                                _scalar(b, 1.0 - beta2))))
        new_state = [exp_avg, exp_avg_sq]
        second = exp_avg_sq
        if self.amsgrad:
            second = kept(state[2], b.ew("maximum", state[2], exp_avg_sq))
            new_state.append(second)
        denom = b.ew("add", b.ew("div", b.ew("sqrt", second), h["bc2_sqrt"]),
                     _scalar(b, self.eps))
        new_p = b.ew("add", p, b.ew("div", b.ew("mul", exp_avg, h["neg_step_size"]), denom))
        return new_p, new_state


@dataclass
class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (default 0.01)."""

    weight_decay: float = 1e-2
    decoupled_weight_decay: bool = True


# torch.optim group settings that do not change the arithmetic (how torch runs it, the
# schedulers' record of the first learning rate)
TORCH_ONLY = ("params", "foreach", "fused", "capturable", "differentiable", "initial_lr")


def group_settings(group: dict) -> dict:
    """A torch.optim param group's settings that define its update."""
    return {k: v for k, v in group.items() if k not in TORCH_ONLY}


def check_groups(opt: torch.optim.Optimizer) -> None:
    """A ValueError where `opt`'s param groups differ in a setting (param groups with
    different settings are not supported yet), naming the first such setting."""
    first = group_settings(opt.param_groups[0])
    for i, group in enumerate(opt.param_groups[1:], 1):
        for key, value in group_settings(group).items():
            if key not in first or _value(first[key]) != _value(value):
                raise ValueError(
                    f"param groups with different settings are not supported yet: group {i} "
                    f"has {key}={_value(value)!r}, group 0 {key}={_value(first.get(key))!r}; "
                    "compile_training applies one setting to every parameter")


def from_torch(opt: torch.optim.Optimizer) -> Optimizer:
    """kernelwright's optimizer with the settings of `opt` (torch.optim.SGD, Adam or AdamW,
    their param groups agreeing: `check_groups`). Another optimizer class, a setting
    kernelwright has not, or an optimizer that already holds state (it has stepped) is
    a ValueError."""
    ours = {torch.optim.AdamW: AdamW, torch.optim.Adam: Adam, torch.optim.SGD: SGD}.get(type(opt))
    if ours is None:
        raise ValueError(f"torch.optim.{type(opt).__name__} is not supported: compile_training "
                         "runs SGD, Adam and AdamW (torch.optim's or kernelwright.optim's)")
    check_groups(opt)
    if any(opt.state.values()):
        raise ValueError(f"the {type(opt).__name__} optimizer has state already (it has "
                         "stepped); compile_training starts from fresh state: pass a new one")
    fields = {f.name for f in dataclasses.fields(ours)}
    settings = {}
    for key, value in group_settings(opt.param_groups[0]).items():
        if key not in fields:
            raise ValueError(f"torch.optim.{type(opt).__name__}'s setting {key}={value!r} is not "
                             "supported by compile_training")
        settings[key] = tuple(_value(v) for v in value) if isinstance(value, tuple) \
            else _value(value)
    return ours(**settings)


def _value(x):
    """A setting as a Python number (torch.optim accepts 0-d tensors for some)."""
    return x.item() if isinstance(x, torch.Tensor) else x
