"""Random ops from the counter-based generator (lower/random.py, kernels/random.wgsl):
the dropout mask's statistics, fresh draws per call and per op, and dropout under
compile_training (seeded, repeatable, identity in eval mode, training) and through
torch.compile."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kernelwright
from kernelwright.compiler import CompiledModule
from kernelwright.ir.ir import GraphBuilder
from kernelwright.lower.random import key_tensor, native_dropout, rand, randn
from kernelwright.options import CompileOptions
from kernelwright.schedule.schedule import build_plan

N = 1 << 15


def _compile(build) -> CompiledModule:
    """A plan computing `build(b)`'s values from the random key alone."""
    b = GraphBuilder(CompileOptions())
    b.random = True
    outs = [b.ew("copy", v) for v in build(b)]
    dtypes = {b.random_key: "int32"}
    dtypes.update({v: "bool" if v.dtype == "bool" else "float32" for v in outs})
    b.graph.outputs = outs
    plan = build_plan(b.graph, "tuple", dtypes, CompileOptions())
    plan.scalars = {}
    return CompiledModule(plan)


def test_dropout_mask_mean_is_keep_probability_and_draws_differ():
    p = 0.3
    ones = GraphBuilder().scalar(1.0)

    def build(b):
        x = b.expand(ones, (N,))
        out, mask = native_dropout(b, x, p, True)
        _, other = native_dropout(b, x, p, True)  # a second op: a stream of its own
        return out, mask, other

    compiled = _compile(build)
    out, mask, other = compiled(key_tensor(7, 0))
    bound = 5 * math.sqrt(p * (1 - p) / N)  # five standard deviations of the mean
    assert abs(mask.float().mean().item() - (1 - p)) < bound
    torch.testing.assert_close(out, mask.float() / (1 - p))
    _, mask_next, _ = compiled(key_tensor(7, 1))  # the next call
    _, mask_seed, _ = compiled(key_tensor(8, 0))  # another seed
    again = compiled(key_tensor(7, 0))[1]
    assert torch.equal(again, mask)  # a key draws the same mask every time
    for m in (other, mask_next, mask_seed):
        agree = (m == mask).float().mean().item()
        # independent masks agree on p^2 + (1-p)^2 of the elements
        assert abs(agree - (p * p + (1 - p) ** 2)) < 5 * math.sqrt(0.25 / N), agree


def test_uniform_and_normal_statistics():
    compiled = _compile(lambda b: (rand(b, [N]), randn(b, [N])))
    u, z = compiled(key_tensor(123456789, 3))
    assert 0.0 <= u.min().item() and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 5 * math.sqrt(1 / 12 / N)
    assert abs(u.var().item() - 1 / 12) < 0.005
    hist = torch.histc(u, bins=16, min=0.0, max=1.0) / N  # no bin far from 1/16
    assert (hist - 1 / 16).abs().max().item() < 5 * math.sqrt(1 / 16 / N)
    assert abs(z.mean().item()) < 5 / math.sqrt(N)
    assert abs(z.std().item() - 1.0) < 0.02
    assert torch.isfinite(z).all()


def _dropout_mlp(p: float = 0.2) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Dropout(p), nn.Linear(32, 5)).train()


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 12, generator=g), torch.randint(0, 5, (16,), generator=g)


def _losses(model, steps: int, seed: int | None, opt=None) -> list[float]:
    step = kernelwright.compile_training(
        model, _batch(), F.cross_entropy,
        optimizer=opt or kernelwright.optim.AdamW(lr=1e-2), seed=seed)
    return [step(*_batch()) for _ in range(steps)]


def test_same_seed_same_losses_other_seed_others():
    first = _losses(_dropout_mlp(), 3, seed=11)
    assert _losses(_dropout_mlp(), 3, seed=11) == first
    assert _losses(_dropout_mlp(), 3, seed=12) != first
    assert len(set(first)) == 3


def test_dropout_model_trains():
    losses = _losses(_dropout_mlp(0.3), 15, seed=0)
    assert sum(losses[-3:]) < 0.7 * sum(losses[:3]), losses


def test_eval_mode_dropout_is_the_identity():
    model = _dropout_mlp(0.5).eval()
    reference = copy.deepcopy(model)
    step = kernelwright.compile_training(model, _batch(), F.cross_entropy,
                                         optimizer=kernelwright.optim.SGD(lr=0.1))
    assert not step.random  # nothing random left in the plan
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        got = step(*_batch())
        opt.zero_grad()
        loss = F.cross_entropy(reference(_batch()[0]), _batch()[1])
        loss.backward()
        opt.step()
        assert math.isclose(got, loss.item(), rel_tol=1e-4), (got, loss.item())


def test_checkpoint_resumes_the_draws(tmp_path):
    step = kernelwright.compile_training(_dropout_mlp(), _batch(), F.cross_entropy,
                                         optimizer=kernelwright.optim.Adam(lr=1e-2), seed=4)
    step(*_batch())
    step.save(tmp_path / "run.safetensors")
    want = [step(*_batch()) for _ in range(2)]
    resumed = kernelwright.compile_training(_dropout_mlp(), _batch(), F.cross_entropy,
                                            optimizer=kernelwright.optim.Adam(lr=1e-2))
    resumed.load(tmp_path / "run.safetensors")
    assert [resumed(*_batch()) for _ in range(2)] == want


@pytest.fixture
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_dropout_through_torch_compile(_fresh_dynamo):
    """The forward draws the mask, the backward reads the one the forward returned: the
    gradient of a linear model through dropout is the input's kept part, scaled."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Dropout(0.5), nn.Linear(64, 1, bias=False)).train()
    compiled = torch.compile(model, backend="kernelwright")
    x = torch.randn(4, 64).abs() + 0.1  # no zero element: a zero in x*mask is a dropped one
    x.requires_grad_()
    out = compiled(x)
    out.sum().backward()
    w = model[1].weight.detach()
    kept = x.grad != 0  # d out / d x = mask * 2 * w
    assert 0.3 < kept.float().mean().item() < 0.7
    torch.testing.assert_close(x.grad, kept * 2 * w.expand_as(x))
    torch.testing.assert_close(model[1].weight.grad[0], (x.detach() * kept * 2).sum(0))
    torch.testing.assert_close(out, (x.detach() * kept * 2) @ w.T)
