"""Param groups with different settings in compile_training: a torch.optim optimizer's
groups (decay / no-decay, per-group learning rates, momentum per group), each parameter
updated with its group's settings, against torch.optim's own loop from the same weights
and data; per-group learning rates driven by a torch scheduler without recompiling;
checkpoints of groups; the errors for groups compile_training cannot follow."""

import copy
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from test_training import _batches, _mlp

import kernelwright
from kernelwright.train import optim
from kernelwright.train import step as step_module

STEPS = 8


def _decay_split(model, lr=3e-3, head_lr=3e-2, wd=0.1, **kw):
    """AdamW in three groups: weights decayed, biases not, the head (model[4]) with its
    own lr and no decay; built from named_parameters (torch keeps their names)."""
    head = {id(p) for p in model[4].parameters()}
    named = [(n, p) for n, p in model.named_parameters() if id(p) not in head]
    return torch.optim.AdamW([
        {"params": [(n, p) for n, p in named if p.ndim > 1], "weight_decay": wd},
        {"params": [(n, p) for n, p in named if p.ndim == 1], "weight_decay": 0.0},
        {"params": list(model[4].named_parameters()), "lr": head_lr, "weight_decay": 0.0},
    ], lr=lr, **kw)


def _sgd_groups(model):
    return torch.optim.SGD([
        {"params": model[0].parameters(), "momentum": 0.9, "nesterov": True,
         "weight_decay": 1e-2},
        {"params": model[2].parameters(), "lr": 0.02},  # no momentum: no buffer
        {"params": model[4].parameters(), "momentum": 0.5, "dampening": 0.3,
         "maximize": False, "lr": 0.08},
    ], lr=0.05)


def _adam_groups(model):
    return torch.optim.Adam([
        {"params": model[0].parameters(), "betas": (0.8, 0.99), "amsgrad": True,
         "weight_decay": 1e-2},
        {"params": list(model[2].parameters()) + list(model[4].parameters()), "eps": 1e-6,
         "lr": 1e-2},
    ], lr=3e-3)


def _run(make_opt, make_schedule=None, steps=STEPS, model=None):
    """The compiled step's losses and the eager torch.optim loop's, each from the same
    weights, the optimizer (and scheduler) made by `make_opt` for its own model."""
    model = model or _mlp()
    reference = copy.deepcopy(model)
    batches = _batches((16, 12), 5)
    opt = make_opt(model)
    schedule = make_schedule(opt) if make_schedule else None
    step = kernelwright.compile_training(model, batches[0], F.cross_entropy, optimizer=opt)
    losses = []
    for i in range(steps):
        losses.append(step(*batches[i % len(batches)]))
        if schedule is not None:
            schedule.step()
    ref_opt = make_opt(reference)
    ref_schedule = make_schedule(ref_opt) if make_schedule else None
    want = []
    for i in range(steps):
        x, y = batches[i % len(batches)]
        ref_opt.zero_grad()
        loss = F.cross_entropy(reference(x), y)
        loss.backward()
        ref_opt.step()
        if ref_schedule is not None:
            ref_schedule.step()
        want.append(loss.item())
    return step, reference, losses, want


def _check(step, reference, losses, want):
    for i, (got, exp) in enumerate(zip(losses, want)):
        assert math.isclose(got, exp, rel_tol=1e-3), (i, losses, want)
    assert want[-4] < want[0]  # it trains (the same batch, later)
    trained = step.state_dict()
    for name, t in reference.state_dict().items():
        torch.testing.assert_close(trained[name], t, atol=1e-4, rtol=1e-3,
                                   msg=lambda m, name=name: f"{name}: {m}")


def test_adamw_decay_split_and_head_lr_match_torch():
    step, reference, losses, want = _run(_decay_split)
    _check(step, reference, losses, want)
    # the per-step input: each group's -step size and decay, one bias correction (the
    # groups' betas agree)
    assert step.groups.hyper_slots()[0] == 3 + 3 + 1
    assert [len(names) for names in step.groups.names] == [2, 2, 2]
    # and the groups matter: one AdamW over everything ends elsewhere
    _, _, plain, _ = _run(lambda m: torch.optim.AdamW(m.parameters(), lr=3e-3,
                                                      weight_decay=0.1))
    assert max(abs(a - b) for a, b in zip(plain, losses)) > 1e-3


def test_sgd_momentum_groups_match_torch():
    step, reference, losses, want = _run(_sgd_groups)
    _check(step, reference, losses, want)
    state = step.optimizer_state()
    assert sorted(state) == ["0.bias", "0.weight", "4.bias", "4.weight"]  # momentum only


def test_adam_groups_match_torch():
    step, reference, losses, want = _run(_adam_groups)
    _check(step, reference, losses, want)
    assert sorted(step.optimizer_state()["0.weight"]) == ["exp_avg", "exp_avg_sq",
                                                          "max_exp_avg_sq"]
    assert sorted(step.optimizer_state()["2.weight"]) == ["exp_avg", "exp_avg_sq"]


def _warmup(i: int) -> float:
    return min(1.0, (i + 1) / 3)


# torch's scheduler warns as its optimizer's own step() never runs (the compiled step updates)
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
@pytest.mark.parametrize("schedule", ["lambda", "step"])
def test_torch_scheduler_sets_each_groups_lr_without_recompiling(monkeypatch, schedule):
    plans = []
    build = step_module.build_plan
    monkeypatch.setattr(step_module, "build_plan",
                        lambda *a, **k: plans.append(1) or build(*a, **k))
    make = {"lambda": lambda opt: torch.optim.lr_scheduler.LambdaLR(
                opt, [_warmup, lambda i: 0.5 ** i, _warmup]),
            "step": lambda opt: torch.optim.lr_scheduler.StepLR(opt, 2, gamma=0.3)}[schedule]
    step, reference, losses, want = _run(_decay_split, make)
    _check(step, reference, losses, want)
    assert len(plans) == 1 and step.steps == STEPS
    lrs = step.lrs
    if schedule == "lambda":
        assert lrs == pytest.approx([3e-3, 3e-3 * 0.5 ** STEPS, 3e-2])
    else:
        assert lrs == pytest.approx([3e-3 * 0.3 ** 4, 3e-3 * 0.3 ** 4, 3e-2 * 0.3 ** 4])


def test_lr_reads_the_first_group_and_sets_every_group():
    model, batches = _mlp(), _batches((16, 12), 5)
    opt = _decay_split(model)
    step = kernelwright.compile_training(model, batches[0], F.cross_entropy, optimizer=opt)
    assert step.lr == 3e-3 and step.lrs == [3e-3, 3e-3, 3e-2]
    opt.param_groups[2]["lr"] = 0.5  # as a scheduler sets it
    assert step.lrs == [3e-3, 3e-3, 0.5]
    step.lr = 1e-3
    assert step.lrs == [1e-3] * 3 and [g["lr"] for g in opt.param_groups] == [1e-3] * 3
    step.lrs = [1e-3, 2e-3, 4e-3]
    assert [g["lr"] for g in opt.param_groups] == [1e-3, 2e-3, 4e-3]
    with pytest.raises(ValueError, match="2 learning rates for 3 param groups"):
        step.lrs = [1e-3, 2e-3]


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
def test_checkpoint_of_groups_resumes_exactly(tmp_path):
    batches = _batches((16, 12), 5)

    def compiled(make_opt=_decay_split):
        model = _mlp()
        opt = make_opt(model)
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, [_warmup, lambda i: 0.7 ** i,
                                                           _warmup])
        step = kernelwright.compile_training(model, batches[0], F.cross_entropy,
                                             optimizer=opt)
        return step, schedule

    step, schedule = compiled()
    for i in range(4):
        step(*batches[i % 4])
        schedule.step()
    path = tmp_path / "groups.safetensors"
    step.save(path)
    saved_schedule = schedule.state_dict()
    losses_a = []
    for i in range(4, 8):
        losses_a.append(step(*batches[i % 4]))
        schedule.step()

    fresh, fresh_schedule = compiled()
    fresh.load(path)  # each group's lr with it
    assert fresh.steps == 4 and fresh.lrs == pytest.approx([3e-3, 3e-3 * 0.7 ** 4, 3e-2])
    fresh_schedule.load_state_dict(saved_schedule)
    losses_b = []
    for i in range(4, 8):
        losses_b.append(fresh(*batches[i % 4]))
        fresh_schedule.step()
    for a, b in zip(losses_a, losses_b):
        assert math.isclose(a, b, rel_tol=1e-6), (losses_a, losses_b)
    for name, t in step.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[name], t, atol=1e-6, rtol=1e-6)

    def other_split(model):  # the same settings, layer 0's bias in the decayed group
        opt = _decay_split(model)
        opt.param_groups[0]["params"].append(opt.param_groups[1]["params"].pop(0))
        return opt

    regrouped, _ = compiled(other_split)
    with pytest.raises(ValueError, match=r"groups\.safetensors: the checkpoint's param group 0 "
                                         r"holds \['0\.weight', '2\.weight'\], this step's "
                                         r"\['0\.bias', '0\.weight', '2\.weight'\]"):
        regrouped.load(path)
    decayed, _ = compiled(lambda model: _decay_split(model, wd=0.05))
    with pytest.raises(ValueError, match=r"groups\.safetensors: the checkpoint's groups"):
        decayed.load(path)
    single = kernelwright.compile_training(_mlp(), batches[0], F.cross_entropy,
                                           optimizer=kernelwright.optim.AdamW(lr=3e-3))
    with pytest.raises(ValueError, match=r"groups\.safetensors: the checkpoint's groups"):
        single.load(path)


def test_parameter_in_two_groups_or_none_is_refused():
    model, batch = _mlp(), _batches((16, 12), 5)[0]
    opt = _sgd_groups(model)
    opt.param_groups[1]["params"].append(model[0].weight)  # after torch's own check
    with pytest.raises(ValueError, match=r"0\.weight is in param groups 0 and 1"):
        kernelwright.compile_training(model, batch, F.cross_entropy, optimizer=opt)
    opt = torch.optim.AdamW([{"params": [model[0].weight]},
                             {"params": model[2].parameters(), "weight_decay": 0.0}])
    with pytest.raises(ValueError, match=r"missing: \['0\.bias', '4\.weight', '4\.bias'\]"):
        kernelwright.compile_training(model, batch, F.cross_entropy, optimizer=opt)


def test_unsupported_group_setting_is_refused():
    """A setting of torch's that kernelwright has not is refused (here one a later torch
    might add: every setting of torch 2.13's SGD, Adam and AdamW is supported); a key
    torch does not read either (a name the user keeps in a group) is ignored, as torch
    ignores it."""
    model, batch = _mlp(), _batches((16, 12), 5)[0]
    opt = _adam_groups(model)
    opt.defaults["new_setting"] = 1.0
    opt.param_groups[1]["new_setting"] = 0.5
    with pytest.raises(ValueError, match=r"setting new_setting=0\.5 \(param group 1\) is not "
                                         r"supported"):
        kernelwright.compile_training(model, batch, F.cross_entropy, optimizer=opt)

    def named(m):
        opt = _adam_groups(m)
        for i, group in enumerate(opt.param_groups):
            group["name"], group["layer_decay"] = f"group {i}", 0.5
        return opt

    _check(*_run(named))


def test_groups_changed_after_compiling_are_refused():
    """Only the lr is read at each step: another setting or another grouping after
    compiling is a ValueError at the next step, not a silently stale update."""
    model, batches = _mlp(), _batches((16, 12), 5)
    opt = _sgd_groups(model)
    step = kernelwright.compile_training(model, batches[0], F.cross_entropy, optimizer=opt)
    step(*batches[0])
    opt.param_groups[1]["weight_decay"] = 0.01
    with pytest.raises(ValueError, match=r"param group 1's weight_decay changed from 0 to "
                                         r"0\.01"):
        step(*batches[1])
    opt.param_groups[1]["weight_decay"] = 0.0
    opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(3))]})
    with pytest.raises(ValueError, match="param groups or their parameters changed"):
        step(*batches[1])
    assert step.steps == 1


@pytest.mark.parametrize("cls", [optim.SGD, optim.Adam, optim.AdamW])
def test_hyper_reads_names_what_each_scalar_depends_on(cls):
    """Groups share a per-step scalar where they agree in the settings it reads
    (`hyper_reads`): changing any other setting leaves its value unchanged."""
    base = cls(lr=0.1, **({"momentum": 0.9} if cls is optim.SGD else {}))
    other = {"lr": 0.3, "momentum": 0.5, "dampening": 0.2, "weight_decay": 0.07,
             "betas": (0.7, 0.9), "eps": 1e-5, "nesterov": False, "maximize": True,
             "amsgrad": True, "decoupled_weight_decay": not getattr(base, "decoupled_weight_decay",
                                                                    False)}
    fields = [f.name for f in dataclasses.fields(cls)]
    for setting in fields:
        changed = dataclasses.replace(base, **{setting: other[setting]})
        for step in (1, 2, 5):
            before = dict(zip(cls.hyper_reads, base.hyper(base.lr, step)))
            after = dict(zip(cls.hyper_reads, changed.hyper(changed.lr, step)))
            for name, reads in cls.hyper_reads.items():
                if setting not in reads:
                    assert before[name] == after[name], (setting, name, step)
