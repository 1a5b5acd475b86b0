"""The device memory of a planned training step (train.step.plan_training) against a bound
computed from the model: AdamW holds parameters, gradients and two moments (4 x the
parameters' bytes), plus the batch and the forward's activations (every tensor the eager
forward computes, the loss's included) and two of the largest of them for the backward's
temporaries. A plan that copies each updated state from a buffer of its own (3 x the
parameters' bytes more) or holds temporaries apart that could share exceeds it."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from kernelwright import compile_training
from kernelwright.ir.ir import Graph, Node, Value
from kernelwright.options import CompileOptions
from kernelwright.schedule.remat import recompute_late_reads
from kernelwright.schedule.schedule import fuse, live_nodes, readers
from kernelwright.suite.training import mlp
from kernelwright.train import optim, step
from kernelwright.train.step import plan_training


class ActivationBytes(TorchDispatchMode):
    """Sums the bytes of every tensor the ops run under it return, and the largest."""

    def __init__(self) -> None:
        super().__init__()
        self.total = self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                n = t.numel() * 4  # held as f32 or i32 on the device
                self.total += n
                self.largest = max(self.largest, n)
        return out


def test_mlp_plan_bytes_within_adam_state_and_activations():
    cfg = {"batch": 4, "inputs": 64, "hidden": 128, "depth": 3, "classes": 5}
    torch.manual_seed(0)
    model = mlp.build(cfg).train()
    batch = mlp.batch(cfg, 0)
    acts = ActivationBytes()
    with torch.no_grad(), acts:
        F.cross_entropy(model(batch[0]), batch[1])
    params = sum(p.numel() for p in model.parameters()) * 4
    step = plan_training(model, batch, mlp.loss, optim.AdamW(lr=1e-3, weight_decay=0.1),
                         CompileOptions(), max_grad_norm=1.0)
    plan = step.plan
    bound = 4 * params + sum(t.numel() * 4 for t in batch) + acts.total + 2 * acts.largest
    assert sum(b.nbytes for b in plan.buffers) <= bound
    assert plan.updates == []  # every parameter and moment copied as soon as it may be


class SelfAttention(nn.Module):
    """x [batch, length, heads * dim] -> the sum of its self-attention (one projection
    for q, k and v), causal, under a boolean [length, length] mask, or neither."""

    def __init__(self, heads: int, dim: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.dim, self.causal = heads, dim, causal
        self.qkv = nn.Linear(heads * dim, 3 * heads * dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        n, t, _ = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, self.dim).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              is_causal=self.causal).sum()


def spans(graph: Graph, numel: int) -> tuple[list[tuple[int, int]], dict[Node, int]]:
    """(the kernel writing it, its last reader) of each value of `numel` elements that
    the kernels of `graph` (schedule.fuse's groups, in their order) write, and the kernel
    of each node."""
    nodes = live_nodes(graph)
    users = readers(nodes)
    groups = fuse(graph, nodes)
    index = {n: i for i, g in enumerate(groups) for n in g.members}
    for i, g in enumerate(groups):
        for p in g.phases:
            index.update(dict.fromkeys(p.members, i))

    def last_read(v: Value) -> int:  # through values folded into their readers' kernels
        return max((index[u] if u in index else last_read(u.out) for u in users.get(v, [])),
                   default=-1)

    return [(i, last_read(g.root)) for i, g in enumerate(groups)
            if g.root.numel == numel], index


def held_across(graph: Graph, numel: int) -> int:
    """The most values of `numel` elements that the kernels of `graph` hold across one
    kernel: written before it, read after it."""
    held, _ = spans(graph, numel)
    return max(sum(a < k < b for a, b in held) for k in range(max(b for _, b in held)))


@pytest.mark.parametrize("flash", [True, False], ids=["flash", "math"])
@pytest.mark.parametrize("masking", ["causal", "mask", "none"])
def test_attention_step_keeps_at_most_one_scores_sized_tensor(monkeypatch, masking, flash):
    """Under the flash op (lower.attention.flash_fits) the step writes no [B, H, L, S]
    tensor at all; under the math backend (where the flash op does not apply) the
    backward of an attention reads its probabilities, not its scores: the step holds
    one [B, H, L, S] tensor from the forward to the backward, not also the scores or a
    copy of the probabilities in the product's [B * H, L, S] shape."""
    b, heads, length, dim = 2, 3, 24, 4
    torch.manual_seed(0)
    model = SelfAttention(heads, dim, masking == "causal")
    x = torch.randn(b, length, heads * dim)
    batch = (x, torch.rand(length, length) > 0.3) if masking == "mask" else (x,)
    numel = b * heads * length * length
    held: list[int] = []
    build_plan = step.build_plan

    def counting(graph: Graph, *args):
        written = spans(graph, numel)[0]
        held.append(held_across(graph, numel) if written else 0)
        return build_plan(graph, *args)

    monkeypatch.setattr(step, "build_plan", counting)
    if not flash:
        monkeypatch.setattr(step, "flash_fits", lambda *args: False)
    plan_training(model, batch, None, optim.SGD(lr=0.1), CompileOptions())
    assert held == ([0] if flash else [1])


class TwoAttentions(nn.Module):
    """x [batch, length, heads * dim] -> the sum of two causal self-attentions in turn."""

    def __init__(self, heads: int, dim: int) -> None:
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = nn.ModuleList(nn.Linear(heads * dim, 3 * heads * dim) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, _ = x.shape
        for qkv in self.qkv:
            q, k, v = qkv(x).view(n, t, 3, self.heads, self.dim).permute(2, 0, 3, 1, 4)
            x = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x.transpose(1, 2).reshape(n, t, -1)
        return x.sum()


def test_late_reads_recomputed_hold_one_scores_tensor_and_train_alike(monkeypatch):
    """recompute_late_reads (here for every scores-sized value, however small) computes
    the first attention's probabilities again in its backward (under the math backend:
    the flash op's backward stores none): the step holds one [B, H, L, S] tensor at a
    time, not the first's across the second attention's forward and backward, and its
    losses and gradient norms are those of the step that holds them, bit for bit."""
    b, heads, length, dim = 2, 3, 24, 4
    scores = b * heads * length * length
    torch.manual_seed(0)
    model = TwoAttentions(heads, dim)
    batches = [(torch.randn(b, length, heads * dim, generator=torch.Generator().manual_seed(i)),)
               for i in range(3)]

    def train(recompute) -> tuple[list[float], list[float], list[int]]:
        held: list[int] = []
        build_plan = step.build_plan

        def counting(graph: Graph, *args):
            held.append(held_across(graph, scores))
            return build_plan(graph, *args)

        with monkeypatch.context() as m:
            m.setattr(step, "flash_fits", lambda *args: False)
            m.setattr(step, "recompute_late_reads", recompute)
            m.setattr(step, "build_plan", counting)
            compiled = compile_training(copy.deepcopy(model), batches[0], None,
                                        optimizer=optim.AdamW(lr=1e-2), max_grad_norm=1.0)
        losses, norms = [], []
        for x in batches * 2:
            losses.append(compiled(*x))
            norms.append(compiled.grad_norm)
        return losses, norms, held

    count: list[int] = []

    def recompute_scores(graph: Graph) -> int:
        count.append(recompute_late_reads(graph, min_bytes=4 * scores, min_gap=8))
        return count[-1]

    losses, norms, held = train(recompute_scores)
    want_losses, want_norms, want_held = train(lambda graph: 0)
    assert count[0] >= 1 and held == [1] and want_held == [2]
    assert losses == want_losses and norms == want_norms
