"""Compiled training steps (kernelwright.compile_training) against a PyTorch eager loop
with torch.optim from the same initial weights and data: the loss at every step, the
gradient norm, the parameters after the steps; the learning rate changed without
recompiling; errors for what cannot be trained."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kernelwright
from kernelwright import CompileError
from kernelwright.codegen.codegen import used_bindings
from kernelwright.frontend.capture import decomposition_table
from kernelwright.lower.registry import REGISTRY
from kernelwright.train import step as step_module

STEPS = 20


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(),
                         nn.Linear(32, 5))


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    # no bias before batch norm: its gradient is rounding noise, which Adam scales up
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, stride=2),
                         nn.ReLU(), nn.Flatten(), nn.Linear(16 * 2 * 2, 5)).train()


def _batches(shape, classes: int | None, n: int = 4):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        x = torch.randn(*shape, generator=g)
        y = torch.randint(0, classes, (shape[0],), generator=g) if classes else \
            torch.randn(shape[0], 5, generator=g)
        out.append((x, y))
    return out


def _eager(model, batches, loss_fn, make_opt, steps, max_grad_norm=None, lrs=None):
    """Losses and step-0 gradient norm of a torch.optim loop; trains `model` in place."""
    opt = make_opt(model.parameters())
    losses, norm0 = [], None
    for i in range(steps):
        if lrs is not None:
            for group in opt.param_groups:
                group["lr"] = lrs[i]
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters()))
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        opt.step()
        losses.append(loss.item())
        norm0 = norm.item() if norm0 is None else norm0
    return losses, norm0


def _compare(model, batches, loss_fn, ours, theirs, max_grad_norm=None, param_atol=1e-4):
    reference = copy.deepcopy(model)
    step = kernelwright.compile_training(model, batches[0], loss_fn, optimizer=ours,
                                         max_grad_norm=max_grad_norm)
    losses, norms = [], []
    for i in range(STEPS):
        losses.append(step(*batches[i % len(batches)]))
        norms.append(step.grad_norm)
    want, norm0 = _eager(reference, batches, loss_fn, theirs, STEPS, max_grad_norm)
    for i, (got, exp) in enumerate(zip(losses, want)):
        assert math.isclose(got, exp, rel_tol=1e-3), (i, got, exp)
    assert math.isclose(norms[0], norm0, rel_tol=1e-3), (norms[0], norm0)
    last = (STEPS - 1) // len(batches) * len(batches)
    assert want[last] < want[0]  # it trains (the same batch, later)
    trained = step.state_dict()
    for name, t in reference.state_dict().items():
        torch.testing.assert_close(trained[name].to(t.dtype), t, atol=param_atol, rtol=1e-3,
                                   msg=lambda m, name=name: f"{name}: {m}")
    return step, reference


OPTIMIZERS = {
    "sgd_momentum": (kernelwright.optim.SGD(lr=0.05, momentum=0.9),
                     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
    "sgd_nesterov_wd": (kernelwright.optim.SGD(lr=0.05, momentum=0.8, nesterov=True,
                                               weight_decay=1e-2),
                        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True,
                                                  weight_decay=1e-2)),
    "sgd_dampening": (kernelwright.optim.SGD(lr=0.03, momentum=0.5, dampening=0.3),
                      lambda p: torch.optim.SGD(p, lr=0.03, momentum=0.5, dampening=0.3)),
    "adam_l2_amsgrad": (kernelwright.optim.Adam(lr=3e-3, weight_decay=1e-2, amsgrad=True),
                        lambda p: torch.optim.Adam(p, lr=3e-3, weight_decay=1e-2,
                                                   amsgrad=True)),
    "adamw": (kernelwright.optim.AdamW(lr=3e-3, betas=(0.8, 0.99), weight_decay=0.1),
              lambda p: torch.optim.AdamW(p, lr=3e-3, betas=(0.8, 0.99), weight_decay=0.1)),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_mlp_matches_torch_optim(name):
    ours, theirs = OPTIMIZERS[name]
    _compare(_mlp(), _batches((16, 12), 5), F.cross_entropy, ours, theirs)


def test_mlp_mse_with_clipping():
    ours, theirs = OPTIMIZERS["adamw"]
    _compare(_mlp(), _batches((16, 12), None), F.mse_loss, ours, theirs, max_grad_norm=0.05)


@pytest.mark.parametrize("name", ["sgd_momentum", "adamw"])
def test_cnn_matches_torch_optim(name):
    ours, theirs = OPTIMIZERS[name]
    model = _cnn()
    step, reference = _compare(model, _batches((4, 3, 12, 12), 5), F.cross_entropy, ours,
                               theirs, max_grad_norm=1.0)
    # batch norm's running statistics are carried from step to step, as eager's
    assert step.state_dict()["1.num_batches_tracked"].item() == STEPS
    fresh = _cnn()
    step.sync_to(fresh)
    x = torch.randn(2, 3, 12, 12)
    torch.testing.assert_close(fresh.eval()(x), reference.eval()(x), atol=1e-4, rtol=1e-3)


class TinyLM(nn.Module):
    """Embedding, LayerNorm, causal SDPA over two heads, a residual, SiLU, a head."""

    def __init__(self, vocab: int = 20, dim: int = 16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.ln = nn.Embedding(vocab, dim), nn.LayerNorm(dim)
        # no bias on qkv: the key's bias has no gradient but rounding noise (it moves every
        # score of a row alike), which Adam scales to steps of lr in either direction
        self.qkv, self.o, self.head = (nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim),
                                       nn.Linear(dim, vocab))

    def forward(self, tokens):
        n, t = tokens.shape
        h = self.emb(tokens)
        q, k, v = self.qkv(self.ln(h)).view(n, t, 3, 2, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.o(a.transpose(1, 2).reshape(n, t, -1))
        return self.head(F.silu(h))


def _lm_loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), label_smoothing=0.1)


def test_tiny_lm_matches_torch_optim():
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randint(0, 20, (2, 6), generator=g),
                torch.randint(0, 20, (2, 6), generator=g)) for _ in range(4)]
    ours, theirs = OPTIMIZERS["adamw"]
    _compare(TinyLM(), batches, _lm_loss, ours, theirs, max_grad_norm=1.0)


def test_learning_rate_changes_without_recompiling(monkeypatch):
    plans = []
    build = step_module.build_plan
    monkeypatch.setattr(step_module, "build_plan",
                        lambda *a, **k: plans.append(1) or build(*a, **k))
    model, batches = _mlp(), _batches((16, 12), 5)
    reference = copy.deepcopy(model)

    def warmup_cosine(i: int) -> float:
        return 0.02 * min(1.0, (i + 1) / 5) * 0.5 * (1 + math.cos(math.pi * i / STEPS))

    lrs = [warmup_cosine(i) for i in range(STEPS)]
    step = kernelwright.compile_training(model, batches[0], F.cross_entropy,
                                         optimizer=kernelwright.optim.AdamW(lr=1.0))
    losses = []
    for i in range(STEPS):
        if i < STEPS // 2:
            step.lr = lrs[i]  # set by hand
        else:
            step.lr_schedule = warmup_cosine  # or by a schedule of the step number
        losses.append(step(*batches[i % len(batches)]))
    want, _ = _eager(reference, batches, F.cross_entropy,
                     lambda p: torch.optim.AdamW(p, lr=1.0), STEPS, lrs=lrs)
    for got, exp in zip(losses, want):
        assert math.isclose(got, exp, rel_tol=1e-3), (got, exp)
    assert len(plans) == 1
    assert step.steps == STEPS


def test_nonfinite_loss_raises_and_leaves_the_model(monkeypatch):
    model, batches = _mlp(), _batches((16, 12), 5)
    step = kernelwright.compile_training(model, batches[0], F.cross_entropy,
                                         optimizer=kernelwright.optim.Adam(lr=1e-2))
    step(*batches[0])
    before = step.state_dict()
    moments = step.optimizer_state()
    bad = batches[1][0].clone()
    bad[3, 2] = float("nan")
    with pytest.raises(FloatingPointError, match="not finite"):
        step(bad, batches[1][1])
    for name, t in step.state_dict().items():
        assert torch.equal(t, before[name]), name
    for name, state in step.optimizer_state().items():
        for key, t in state.items():
            assert torch.equal(t, moments[name][key]), (name, key)
    assert step.steps == 1


def test_nonfinite_steps_skipped_when_asked():
    model, batches = _mlp(), _batches((16, 12), 5)
    reference = copy.deepcopy(model)
    step = kernelwright.compile_training(model, batches[0], F.cross_entropy,
                                         optimizer=kernelwright.optim.Adam(lr=1e-2),
                                         skip_nonfinite=True)
    bad = batches[0][0].clone()
    bad[0, 0] = float("inf")
    losses = []
    for i in range(6):
        if i == 2:
            assert not math.isfinite(step(bad, batches[0][1]))
        losses.append(step(*batches[i % len(batches)]))
    assert step.skipped == 1 and step.steps == 6
    want, _ = _eager(reference, batches, F.cross_entropy,
                     lambda p: torch.optim.Adam(p, lr=1e-2), 6)
    for got, exp in zip(losses, want):  # the skipped step changed nothing, Adam's t included
        assert math.isclose(got, exp, rel_tol=1e-3), (got, exp)


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_optimizer_states_are_written_once_each_in_place(optimizer):
    """Each Adam moment is guarded by the step's skip (`kept`) before the parameter's update
    reads it, and that update is its only reader, which computes the moments inline and
    stores them over their states (schedule.joining_updates): one kernel a parameter,
    writing the parameter (its output) and both moments (bound read_write), no state copy;
    an optimizer that bypasses `kept` is refused."""
    model = _mlp()
    make = {"adam": kernelwright.optim.Adam, "adamw": kernelwright.optim.AdamW}[optimizer]
    step = kernelwright.compile_training(model, _batches((16, 12), 1)[0], F.cross_entropy,
                                         optimizer=make(lr=1e-2))
    plan = step.plan
    states = {spec.buffer for _, spec in plan.state}
    written = [[k.bindings[i] for i, a in used_bindings(k.source).items() if a == "read_write"]
               for k in plan.kernels]
    writers = [(k, w) for k, w in zip(plan.kernels, written) if set(w) & states]
    n_params = sum(1 for _ in model.parameters())
    assert len(writers) == n_params and not plan.updates, plan.summary()
    for k, w in writers:  # exp_avg, exp_avg_sq, the parameter: each bound once
        assert len(w) == 3 and set(w) <= states and all(k.bindings.count(b) == 1 for b in w)
    assert {b for _, w in writers for b in w} == states

    class Unguarded(kernelwright.optim.SGD):
        def update(self, b, p, g, state, h, kept):
            new_p, _ = super().update(b, p, g, [], h, kept)
            return new_p, [b.ew("add", state[0], g)]

        def state_names(self):
            return ["momentum_buffer"]

    with pytest.raises(CompileError, match="without passing it through `kept`"):
        kernelwright.compile_training(_mlp(), _batches((16, 12), 1)[0], F.cross_entropy,
                                      optimizer=Unguarded(lr=0.1))


def test_op_without_gradient_lowering_is_a_compile_error(monkeypatch):
    monkeypatch.delitem(REGISTRY, "aten.max_pool2d_with_indices_backward.default")
    model = _cnn()
    with pytest.raises(CompileError, match=r"no gradient lowering for ATen op "
                                           r"'aten\.max_pool2d_with_indices_backward[^']*'.*"
                                           r"in 3 \(MaxPool2d\)"):
        kernelwright.compile_training(model, _batches((4, 3, 12, 12), 5)[0], F.cross_entropy,
                                      optimizer=kernelwright.optim.SGD(lr=0.1))


def test_joint_graph_is_one_trace_with_capture_decompositions(monkeypatch):
    """The joint graph comes from one trace of the eager model (no torch.export of the
    forward, which only a missing lowering's message needs), already decomposed by
    capture's table, with a gradient output for every parameter."""
    def no_export(*args, **kwargs):
        raise AssertionError("torch.export.export called")

    monkeypatch.setattr(torch.export, "export", no_export)
    model = _mlp()
    joint = step_module.capture_joint(model, _batches((16, 12), 5)[0], F.cross_entropy)
    table = decomposition_table()
    assert not [n.target for n in joint.graph.nodes if n.target in table]
    assert sorted(t for _, t in joint.grads) == \
        sorted(f"model.{n}" for n, _ in model.named_parameters())
    assert sorted(joint.params.values()) == sorted(t for _, t in joint.grads)


class Scaled(nn.Module):
    """A tensor attribute, a non-persistent buffer, a frozen bias and an unused layer."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.unused = nn.Linear(12, 16), nn.Linear(16, 5), nn.Linear(2, 2)
        self.scale = torch.linspace(0.5, 1.5, 16)
        self.register_buffer("shift", torch.full((16,), 0.1), persistent=False)
        self.a.bias.requires_grad_(False)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)) * self.scale + self.shift)


def test_tensor_attributes_frozen_and_unused_parameters_train_as_torch():
    model, batches = Scaled(), _batches((16, 12), 5)
    reference = copy.deepcopy(model)
    step = kernelwright.compile_training(model, batches[0], F.cross_entropy,
                                         optimizer=kernelwright.optim.SGD(lr=0.1))
    opt = torch.optim.SGD([p for p in reference.parameters() if p.requires_grad], lr=0.1)
    for x, y in batches:
        got = step(x, y)
        opt.zero_grad()
        loss = F.cross_entropy(reference(x), y)
        loss.backward()
        opt.step()
        assert math.isclose(got, loss.item(), rel_tol=1e-4), (got, loss.item())
    trained = step.state_dict()
    assert sorted(trained) == ["a.weight", "b.bias", "b.weight"]
    for name in trained:
        torch.testing.assert_close(trained[name], reference.get_parameter(name),
                                   atol=1e-5, rtol=1e-4)


def test_batch_of_another_shape_is_refused():
    model, batches = _mlp(), _batches((16, 12), 5)
    step = kernelwright.compile_training(model, batches[0], F.cross_entropy,
                                         optimizer=kernelwright.optim.SGD(lr=0.1))
    with pytest.raises(ValueError, match=r"compiled for float32\[16, 12\]"):
        step(torch.randn(8, 12), batches[0][1][:8])


def test_loss_must_be_one_element():
    model, batches = _mlp(), _batches((16, 12), None)
    with pytest.raises(CompileError, match="one floating-point tensor of one element"):
        kernelwright.compile_training(model, batches[0],
                                      lambda out, y: F.mse_loss(out, y, reduction="none"),
                                      optimizer=kernelwright.optim.SGD(lr=0.1))


def test_checkpoint_resumes_exactly(tmp_path):
    batches = _batches((16, 12), 5)
    opt = kernelwright.optim.Adam(lr=1e-2, amsgrad=True)
    step = kernelwright.compile_training(_mlp(), batches[0], F.cross_entropy, optimizer=opt)
    for i in range(5):
        step(*batches[i % 4])
    path = tmp_path / "ckpt.safetensors"
    step.save(path)
    losses_a = [step(*batches[i % 4]) for i in range(5, 10)]

    fresh = kernelwright.compile_training(_mlp(), batches[0], F.cross_entropy,
                                          optimizer=kernelwright.optim.Adam(lr=1e-2,
                                                                            amsgrad=True))
    fresh.load(path)
    assert fresh.steps == 5
    losses_b = [fresh(*batches[i % 4]) for i in range(5, 10)]
    for a, b in zip(losses_a, losses_b):
        assert math.isclose(a, b, rel_tol=1e-6), (losses_a, losses_b)
    for name, t in step.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[name], t, atol=1e-6, rtol=1e-6)

    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ValueError, match="damaged.safetensors"):
        fresh.load(damaged)
    other = kernelwright.compile_training(_mlp(), batches[0], F.cross_entropy,
                                          optimizer=kernelwright.optim.SGD(lr=0.1))
    with pytest.raises(ValueError, match="ckpt.safetensors.*optimizer"):
        other.load(path)
    wider = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 5))
    mismatched = kernelwright.compile_training(wider, batches[0], F.cross_entropy,
                                               optimizer=kernelwright.optim.Adam(
                                                   lr=1e-2, amsgrad=True))
    with pytest.raises(ValueError, match="ckpt.safetensors.*tensor"):
        mismatched.load(path)


def test_gradient_accumulation_matches_eager_loop():
    micro, updates = 3, 3
    batches = _batches((8, 12), 5, n=micro * updates)
    model = _mlp()
    reference = copy.deepcopy(model)
    step = kernelwright.compile_training(model, batches[0], F.cross_entropy,
                                         optimizer=kernelwright.optim.AdamW(lr=1e-2),
                                         max_grad_norm=0.5, accumulate=micro)
    losses, norms = [], []
    for i, (x, y) in enumerate(batches):
        losses.append(step(x, y))
        if i % micro == micro - 1:
            norms.append(step.grad_norm)
    assert step.steps == updates and step.micro == 0

    opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    want, want_norms = [], []
    for u in range(updates):
        opt.zero_grad()
        for x, y in batches[u * micro:(u + 1) * micro]:
            loss = F.cross_entropy(reference(x), y)
            (loss / micro).backward()
            want.append(loss.item())
        want_norms.append(torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5).item())
        opt.step()
    for i, (got, exp) in enumerate(zip(losses, want)):
        assert math.isclose(got, exp, rel_tol=1e-4), (i, got, exp)
    for got, exp in zip(norms, want_norms):
        assert math.isclose(got, exp, rel_tol=1e-4), (got, exp)
    trained = step.state_dict()
    for name, t in reference.state_dict().items():
        torch.testing.assert_close(trained[name], t, atol=1e-5, rtol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.slow
def test_train_lm_example_runs(tmp_path):
    import ast
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    ckpt = tmp_path / "lm.safetensors"
    env = dict(os.environ, PYTHONPATH=str(root / "src"))
    run = subprocess.run(
        [sys.executable, str(root / "examples" / "train_lm.py"), "--dim", "16", "--layers", "1",
         "--heads", "2", "--kv-heads", "1", "--seq", "8", "--batch", "2", "--steps", "2",
         "--accumulate", "2", "--log-every", "1", "--generate", "3",
         "--checkpoint", str(ckpt)], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("step")] == ["1", "2"]
    assert all("tokens/s" in line for line in lines if line.startswith("step"))
    assert ckpt.stat().st_size > 0
    generated = ast.literal_eval(lines[-1])  # the repr of the text it generated
    assert generated.startswith("The ") and len(generated) == 4 + 3


def _warmup_cosine(i: int) -> float:
    """A learning-rate factor: linear warmup over 3 steps, then a cosine decay."""
    return min(1.0, (i + 1) / 3) * 0.5 * (1 + math.cos(math.pi * i / 8))


# torch's scheduler warns as its optimizer's own step() never runs (the compiled step updates)
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
def test_torch_optimizer_and_scheduler_without_recompiling(monkeypatch):
    """A torch.optim optimizer passed as is, its lr driven by a torch scheduler between
    steps: eager's losses, one plan."""
    plans = []
    build = step_module.build_plan
    monkeypatch.setattr(step_module, "build_plan",
                        lambda *a, **k: plans.append(1) or build(*a, **k))
    model, batches = _mlp(), _batches((16, 12), 5)
    reference = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.02, weight_decay=0.05)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, _warmup_cosine)
    step = kernelwright.compile_training(model, batches[0], F.cross_entropy, optimizer=opt)
    losses = []
    for i in range(8):
        losses.append(step(*batches[i % len(batches)]))
        schedule.step()
    lrs = [0.02 * _warmup_cosine(i) for i in range(8)]
    want, _ = _eager(reference, batches, F.cross_entropy,
                     lambda p: torch.optim.AdamW(p, lr=0.02, weight_decay=0.05), 8, lrs=lrs)
    for got, exp in zip(losses, want):
        assert math.isclose(got, exp, rel_tol=1e-3), (losses, want)
    assert len(plans) == 1 and step.steps == 8
    assert math.isclose(step.lr, 0.02 * _warmup_cosine(8))


def test_torch_optimizer_of_part_of_the_model_or_unsupported_is_refused():
    model, batch = _mlp(), _batches((16, 12), 5)[0]
    with pytest.raises(ValueError, match=r"missing: \['2\.weight', '2\.bias', '4\.weight'"):
        kernelwright.compile_training(model, batch, F.cross_entropy,
                                      optimizer=torch.optim.SGD(model[0].parameters(), lr=0.1))
    with pytest.raises(ValueError, match="RMSprop is not supported"):
        kernelwright.compile_training(model, batch, F.cross_entropy,
                                      optimizer=torch.optim.RMSprop(model.parameters()))
    with pytest.raises(TypeError, match="optimizer must be"):
        kernelwright.compile_training(model, batch, F.cross_entropy, optimizer="adam")


def test_timing_a_step_times_every_kernel_and_is_a_step():
    """kernel_times_ms and gpu_time_ms time a real step: the parameters and counters move
    on as a plain call's do."""
    batches = _batches((16, 12), 5)
    timed = kernelwright.compile_training(_mlp(), batches[0], F.cross_entropy,
                                          optimizer=kernelwright.optim.Adam(lr=1e-2),
                                          max_grad_norm=1.0)
    plain = kernelwright.compile_training(_mlp(), batches[0], F.cross_entropy,
                                          optimizer=kernelwright.optim.Adam(lr=1e-2),
                                          max_grad_norm=1.0)
    times = timed.kernel_times_ms(*batches[0])
    assert [name for name, _ in times] == [k.name for k in timed.plan.kernels]
    assert all(t >= 0 for _, t in times) and sum(t for _, t in times) > 0
    plain(*batches[0])
    assert timed.steps == plain.steps == 1
    assert timed.grad_norm == pytest.approx(plain.grad_norm, rel=1e-6)
    # the timed step updated the parameters as a step does: the next losses agree
    for i in range(1, 3):
        assert timed(*batches[i]) == pytest.approx(plain(*batches[i]), rel=1e-6)
    bad = batches[0][0].clone()
    bad[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="not finite"):
        timed.kernel_times_ms(bad, batches[0][1])
    assert timed.steps == 3
    assert timed.gpu_time_ms(*batches[3]) > 0 and timed.steps == 4
    plain(*batches[3])
    assert timed(*batches[0]) == pytest.approx(plain(*batches[0]), rel=1e-6)
