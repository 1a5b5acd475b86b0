"""A first-order linear recurrence unrolled along a dim (a Python loop over a sequence:
transformers' Mamba slow path) becomes one `recur` kernel (GraphBuilder.linear_recurrences),
and its per-step products stacked along that dim one batched product
(GraphBuilder.stacked_steps): a kernel count that does not grow with the sequence."""

import copy

import pytest
import torch
from conftest import check

import kernelwright


class Loop(torch.nn.Module):
    """Mamba's selective scan: h_i = dA[:, :, i] * h + dBu[:, :, i] over [B, D, N], y_i =
    h_i @ C_i, stacked; `step` the index step (2: not consecutive, nothing to fold)."""

    def __init__(self, zeros: bool, step: int = 1):
        super().__init__()
        self.zeros, self.step = zeros, step

    def forward(self, da, dbu, c, h):
        if self.zeros:
            h = torch.zeros(dbu.shape[0], dbu.shape[1], dbu.shape[3])
        outs = []
        for i in range(0, dbu.shape[2], self.step):
            h = da[..., i, :] * h + dbu[:, :, i, :]  # da [D, L, N] or [B, D, L, N]: broadcast
            outs.append(torch.matmul(h, c[:, i, :].unsqueeze(-1))[:, :, 0])
        return torch.stack(outs, dim=-1), h


def _inputs(length: int, broadcast: bool = False, b: int = 2, d: int = 3, n: int = 4):
    g = torch.Generator().manual_seed(length)
    da = torch.rand(*(() if broadcast else (b,)), d, length, n, generator=g)
    return (da, torch.randn(b, d, length, n, generator=g), torch.randn(b, length, n, generator=g),
            torch.randn(b, d, n, generator=g))


def _kernels(module, inputs) -> list[str]:
    return [k.name for k in kernelwright.plan_module(module, list(inputs)).kernels]


@pytest.mark.parametrize("zeros", [True, False])
@pytest.mark.parametrize("length", [1, 37])
def test_unrolled_recurrence_matches_eager(zeros, length):
    check(Loop(zeros), *_inputs(length))


def test_broadcast_steps_and_a_bounded_kernel_count():
    """dA [D, L, N] broadcast over the batch; 5 and 37 steps: the same kernels, one a
    recurrence (and no kernel per step)."""
    check(Loop(False), *_inputs(37, broadcast=True))
    short, long = (_kernels(Loop(False), _inputs(n, broadcast=True)) for n in (5, 37))
    assert short == long and sum("recur" in k for k in long) == 1, (short, long)


def test_steps_that_skip_indices_are_not_folded():
    """Indices 0, 2, 4, ...: not a recurrence over consecutive slices, computed as written."""
    check(Loop(False, step=2), *_inputs(9))
    assert not any("recur" in k for k in _kernels(Loop(False, step=2), _inputs(9)))


def test_mamba_prompt_plan_does_not_grow_with_the_prompt():
    transformers = pytest.importorskip("transformers")
    from kernelwright.generate import CacheModule

    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=100, hidden_size=32, state_size=8,
                                      num_hidden_layers=2, expand=2, conv_kernel=4)
    model = transformers.MambaForCausalLM(config).eval()
    counts = [len(kernelwright.plan_module(CacheModule(model, 1, n + 8, (), True),
                                           CacheModule.example(1, n, ())).kernels)
              for n in (16, 64)]
    assert counts[0] == counts[1], counts


class Net(torch.nn.Module):
    """A recurrence over steps of projections, each step's select made anew (x[:, None, i]:
    an unsqueeze per step), trained."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = (torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):  # [B, L, 4] -> [B, L]
        da, dbu, c = torch.sigmoid(self.a(x)), self.b(x), self.c(x)
        h = torch.zeros(x.shape[0], 3, 4)
        outs = []
        for i in range(x.shape[1]):
            h = da[:, None, i, :] * h + dbu[:, None, i, :]
            outs.append(torch.matmul(h, c[:, i, :].unsqueeze(-1))[:, :, 0])
        return torch.stack(outs, dim=-1).sum(1)


def test_a_trained_recurrence_gives_eager_loss_and_gradients():
    model, x, y = Net(), torch.randn(2, 9, 4), torch.randn(2, 9)
    reference = copy.deepcopy(model)
    assert sum("recur" in k for k in _kernels(Net().eval(), [x])) == 1
    step = kernelwright.compile_training(model, (x, y), torch.nn.functional.mse_loss,
                                         optimizer=kernelwright.optim.SGD(lr=0.01))
    assert any("recur" in k.name for k in step.plan.kernels)
    loss = step(x, y)
    want = torch.nn.functional.mse_loss(reference(x), y)
    want.backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in reference.parameters()))
    assert loss == pytest.approx(want.item(), rel=1e-4)
    assert step.grad_norm == pytest.approx(norm.item(), rel=1e-4)
