"""The device memory of a planned training step (train.step.plan_training) against a bound
computed from the model: AdamW holds parameters, gradients and two moments (4 x the
parameters' bytes), plus the batch and the forward's activations (every tensor the eager
forward computes, the loss's included) and two of the largest of them for the backward's
temporaries. A plan that copies each updated state from a buffer of its own (3 x the
parameters' bytes more) or holds temporaries apart that could share exceeds it."""

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from kernelwright.options import CompileOptions
from kernelwright.suite.training import mlp
from kernelwright.train import optim
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
