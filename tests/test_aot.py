"""torch.compile(backend="kernelwright") in an ordinary PyTorch training loop: forward and
backward graphs compiled through AOTAutograd, gradients and torch.optim losses against
eager autograd from the same weights; inference keeps the forward-only path."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kernelwright  # noqa: F401 - registers the backend
from kernelwright import CompileError
from kernelwright.frontend.dynamo import kernelwright_backend
from kernelwright.lower.registry import REGISTRY


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _recording(seen: list):
    """The kernelwright backend, keeping each callable it returns in `seen`."""
    def backend(gm, example_inputs):
        run = kernelwright_backend(gm, example_inputs)
        seen.append(run)
        return run
    return backend


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.GELU(),
                         nn.Linear(16, 3))


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 3)).train()


class Attention(nn.Module):
    """A tiny pre-norm causal self-attention block over two heads with a residual."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.ln, self.qkv, self.o = nn.LayerNorm(dim), nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        n, t, _ = x.shape
        q, k, v = self.qkv(self.ln(x)).view(n, t, 3, 2, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o(a.transpose(1, 2).reshape(n, t, -1))


def _check_gradients(model: nn.Module, x: torch.Tensor, loss_fn) -> None:
    reference = copy.deepcopy(model)
    seen: list = []
    compiled = torch.compile(model, backend=_recording(seen))
    xc, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = compiled(xc)
    loss_fn(out).backward()
    want = reference(xr)
    loss_fn(want).backward()
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-4)
    # kernelwright compiled both graphs: the callable is the training one
    assert seen and set(seen[0].graphs) == {"forward", "backward"}
    torch.testing.assert_close(xc.grad, xr.grad, atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")
    for (name, buf), ref in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(buf, ref, atol=1e-6, rtol=1e-5,
                                   msg=lambda m, name=name: f"{name}: {m}")


def test_mlp_gradients_match_eager():
    _check_gradients(_mlp(), torch.randn(5, 6), lambda out: F.cross_entropy(
        out, torch.tensor([0, 2, 1, 1, 0])))


def test_cnn_with_batch_norm_gradients_match_eager():
    # training mode: batch statistics, and the running statistics written back
    _check_gradients(_cnn(), torch.randn(2, 3, 6, 6), lambda out: (out ** 2).mean())


def test_attention_block_gradients_match_eager():
    _check_gradients(Attention(), torch.randn(2, 4, 8), lambda out: out.square().sum())


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1)], ids=["sgd_momentum", "adamw"])
def test_training_loop_matches_eager(make_opt):
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g))
            for _ in range(2)]
    batches = [data[0], data[1], data[0], data[1], data[0]]
    losses = {}
    for kind in ("eager", "kernelwright"):
        model = _mlp()
        run = model if kind == "eager" else torch.compile(model, backend="kernelwright")
        opt = make_opt(model.parameters())
        losses[kind] = []
        for x, y in batches:
            opt.zero_grad()
            loss = F.cross_entropy(run(x), y)
            loss.backward()
            opt.step()
            losses[kind].append(loss.item())
    for got, want in zip(losses["kernelwright"], losses["eager"]):
        assert math.isclose(got, want, rel_tol=1e-4), (losses["kernelwright"], losses["eager"])
    assert losses["eager"][-1] < losses["eager"][0]  # it trains (the same batch, later)


def test_inference_keeps_the_forward_path():
    seen: list = []
    model = _mlp()
    compiled = torch.compile(model, backend=_recording(seen))
    x = torch.randn(4, 6)
    with torch.no_grad():
        out = compiled(x)
        torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-4)
    assert len(seen) == 1 and hasattr(seen[0], "plans") and not hasattr(seen[0], "graphs")
    assert not out.requires_grad


def test_op_without_lowering_is_a_compile_error(monkeypatch):
    monkeypatch.delitem(REGISTRY, "aten.max_pool2d_with_indices_backward.default")
    compiled = torch.compile(_cnn(), backend="kernelwright")
    with pytest.raises(CompileError, match=r"backward graph: no lowering for ATen op "
                                           r"'aten\.max_pool2d_with_indices_backward[^']*' "
                                           r"in 3 \(MaxPool2d\)"):
        compiled(torch.randn(2, 3, 6, 6)).sum().backward()


class Pooled(nn.Module):
    def forward(self, x):
        return F.max_pool2d(x * 2, 2)


def test_missing_lowering_names_the_source_line(monkeypatch):
    monkeypatch.delitem(REGISTRY, "aten.max_pool2d_with_indices_backward.default")
    compiled = torch.compile(Pooled(), backend="kernelwright")
    with pytest.raises(CompileError, match=r"(?s)max_pool2d_with_indices_backward.*"
                                           r"test_aot\.py.*return F\.max_pool2d\(x \* 2, 2\)$"):
        compiled(torch.randn(2, 3, 6, 6, requires_grad=True)).sum().backward()
