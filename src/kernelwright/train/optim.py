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

Param groups (`ParamGroups`: a torch.optim optimizer's groups, `from_torch`) give each
parameter its group's settings: one optimizer object per group, of one class. The
per-step input holds each scalar once per group where it reads the group's learning
rate, else once per distinct value of the settings it reads (`Optimizer.hyper_reads`,
`ParamGroups.hyper_slots`).

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
    # its per-step scalars (`hyper`), in order, each with the settings its value depends on
    # besides the step number: param groups that agree in those settings share the
    # scalar; one that reads "lr" is each group's own (a group's lr changes between steps)
    hyper_reads: dict[str, tuple[str, ...]] = {}

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
        step is skipped) before the parameter's update reads it, so that the parameter's
        update reads only the new states and computes them, storing them over the states
        itself (schedule.joining_updates: one kernel a parameter); where the step applies,
        kept returns `new` unchanged."""
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
    hyper_reads = {"neg_lr": ("lr",), "keep": ("momentum",), "take": ("dampening",)}

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
    hyper_reads = {"neg_step_size": ("lr", "betas"), "bc2_sqrt": ("betas",),
                   "decay": ("lr", "weight_decay")}

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


@dataclass
class ParamGroups:
    """The settings each parameter is updated with: one optimizer per group (all of one
    class, each `lr` the group's learning rate), and the parameters of each group by name
    (every name of a tied parameter). One group holds every parameter (`single`), or a
    torch.optim optimizer's groups give them (`from_torch`)."""

    optimizers: list[Optimizer]
    names: list[frozenset[str]] | None = None  # None: one group of every parameter

    @staticmethod
    def single(optimizer: Optimizer) -> ParamGroups:
        return ParamGroups([optimizer])

    def group(self, name: str) -> int:
        """The index of the group of the parameter `name`."""
        if self.names is None:
            return 0
        for i, names in enumerate(self.names):
            if name in names:
                return i
        raise ValueError(f"parameter {name} is in no param group")

    def hyper_slots(self) -> tuple[int, list[dict[str, int]]]:
        """The length of the per-step input and, per group, the index of each of its
        scalars there: one per group where the scalar reads "lr", else one per distinct
        value of the settings it reads (`Optimizer.hyper_reads`)."""
        slots: dict[tuple, int] = {}
        per_group = []
        for i, opt in enumerate(self.optimizers):
            index = {}
            for name, reads in opt.hyper_reads.items():
                key = (name, i) if "lr" in reads else \
                    (name, tuple(getattr(opt, s) for s in reads))
                index[name] = slots.setdefault(key, len(slots))
            per_group.append(index)
        return len(slots), per_group

    def hyper(self, lrs: list[float], step: int) -> list[float]:
        """The per-step input of update number `step` (1-based), group i at lr `lrs[i]`."""
        size, per_group = self.hyper_slots()
        out = [0.0] * size
        for opt, lr, index in zip(self.optimizers, lrs, per_group):
            for name, value in zip(opt.hyper_reads, opt.hyper(lr, step)):
                out[index[name]] = value
        return out

    def settings(self) -> list[dict]:
        """Each group's settings but its lr (what a checkpoint must agree with)."""
        return [{k: v for k, v in dataclasses.asdict(opt).items() if k != "lr"}
                for opt in self.optimizers]


# torch.optim group settings that do not change the arithmetic (how torch runs it, the
# schedulers' record of the first learning rate, the names of named_parameters())
TORCH_ONLY = ("params", "foreach", "fused", "capturable", "differentiable", "initial_lr",
              "param_names")


def torch_settings(opt: torch.optim.Optimizer) -> list[Optimizer]:
    """kernelwright's optimizer with the settings of each param group of `opt`
    (torch.optim.SGD, Adam or AdamW); another optimizer class or a setting of torch's
    that kernelwright has not is a ValueError naming it (a group's keys torch does not
    read either, a name the user keeps there, are ignored as torch ignores them)."""
    ours = {torch.optim.AdamW: AdamW, torch.optim.Adam: Adam, torch.optim.SGD: SGD}.get(type(opt))
    if ours is None:
        raise ValueError(f"torch.optim.{type(opt).__name__} is not supported: compile_training "
                         "runs SGD, Adam and AdamW (torch.optim's or kernelwright.optim's)")
    fields = {f.name for f in dataclasses.fields(ours)}
    out = []
    for i, group in enumerate(opt.param_groups):
        settings = {}
        for key, value in group.items():
            if key in TORCH_ONLY or (key not in fields and key not in opt.defaults):
                continue  # how torch runs it, or a key of the user's own ("name"): unread
            if key not in fields:
                raise ValueError(f"torch.optim.{type(opt).__name__}'s setting {key}={value!r} "
                                 f"(param group {i}) is not supported by compile_training")
            settings[key] = tuple(_value(v) for v in value) if isinstance(value, tuple) \
                else _value(value)
        out.append(ours(**settings))
    return out


def from_torch(opt: torch.optim.Optimizer, model: torch.nn.Module) -> ParamGroups:
    """The param groups of `opt` (torch.optim.SGD, Adam or AdamW over exactly the
    trainable parameters of `model`, each in one group), each group with its own
    settings (`torch_settings`). Another optimizer, a parameter in no group or in two, a
    tensor that is not a trainable parameter, or an optimizer that already holds state
    (it has stepped) is a ValueError."""
    optimizers = torch_settings(opt)
    if any(opt.state.values()):
        raise ValueError(f"the {type(opt).__name__} optimizer has state already (it has "
                         "stepped); compile_training starts from fresh state: pass a new one")
    aliases: dict[int, set[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            aliases.setdefault(id(p), set()).add(name)
    seen: dict[int, int] = {}
    for i, group in enumerate(opt.param_groups):
        for p in group["params"]:
            if id(p) in seen and seen[id(p)] != i:
                name = min(aliases.get(id(p), {"a tensor"}))
                raise ValueError(f"{name} is in param groups {seen[id(p)]} and {i}: a "
                                 "parameter must be in one group (as torch.optim requires)")
            seen[id(p)] = i
    missing = [min(names) for i, names in aliases.items() if i not in seen]
    extra = set(seen) - set(aliases)
    if missing or extra:
        others = f", {len(extra)} not the model's trainable parameters" if extra else ""
        raise ValueError(f"the optimizer holds {len(seen)} tensors, the model has "
                         f"{len(aliases)} trainable parameters (missing: {missing[:5]}{others}); "
                         "compile_training updates every trainable parameter")
    names = [frozenset(n for p in group["params"] for n in aliases[id(p)])
             for group in opt.param_groups]
    return ParamGroups(optimizers, names)


def _value(x):
    """A setting as a Python number (torch.optim accepts 0-d tensors for some)."""
    return x.item() if isinstance(x, torch.Tensor) else x
