"""Attention's backward in a training step (lower/attention.flash_attention_backward,
kernels/attention_grad.py): compile_training keeps SDPA as the CPU's flash attention op
where lower.attention.flash_fits says our kernels take it; the gradients of q, k and v
are checked against float64 autograd at the strict tolerance (rtol 1e-4, atol 1e-4 of
the gradient's largest magnitude), and the plan holds no L x S value."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kernelwright
from kernelwright.train.step import FLASH_FORWARD, capture_joint


class Attention(nn.Module):
    """sum(SDPA(q * x, k, v) * w) of parameters q [N, H, L, E], k, v [N, Hk, S, E]."""

    def __init__(self, n, h, hk, lq, s, e, mask=None, dropout=0.0, **kw) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.q = nn.Parameter(torch.randn(n, h, lq, e, generator=g))
        self.k = nn.Parameter(torch.randn(n, hk, s, e, generator=g))
        self.v = nn.Parameter(torch.randn(n, hk, s, e, generator=g))
        self.register_buffer("w", torch.randn(n, h, lq, e, generator=g))
        self.register_buffer("mask", mask)
        self.dropout = dropout
        self.kw = dict(kw, enable_gqa=h != hk)

    def forward(self, x):
        a = F.scaled_dot_product_attention(self.q * x, self.k, self.v, attn_mask=self.mask,
                                           dropout_p=self.dropout, **self.kw)
        return (a * self.w).sum()


def _bool_mask(lq: int, s: int, empty_row: int | None = None) -> torch.Tensor:
    m = torch.rand(lq, s, generator=torch.Generator().manual_seed(1)) > 0.3
    m[:, 0] = True
    if empty_row is not None:
        m[empty_row] = False  # every key masked: zeros out, zero gradient, as PyTorch
    return m


CASES = {
    "plain": dict(n=1, h=2, hk=2, lq=5, s=7, e=8),
    # lengths past one tile and not multiples of it; batch > 1
    "causal_odd": dict(n=2, h=2, hk=2, lq=37, s=37, e=8, is_causal=True),
    "causal_more_keys": dict(n=1, h=2, hk=2, lq=19, s=41, e=8, is_causal=True),
    "float_mask": dict(n=2, h=2, hk=2, lq=37, s=41, e=8,
                       mask=torch.randn(2, 1, 37, 41, generator=torch.Generator().manual_seed(2))),
    "bool_mask_empty_row": dict(n=1, h=2, hk=2, lq=9, s=11, e=8, mask=_bool_mask(9, 11, 3)),
    "gqa": dict(n=2, h=4, hk=2, lq=19, s=23, e=8),
    "gqa_causal_e64": dict(n=1, h=3, hk=1, lq=33, s=40, e=64, is_causal=True),
    "scale": dict(n=1, h=1, hk=1, lq=17, s=5, e=24, scale=0.3),
}


@pytest.mark.parametrize("cfg", CASES.values(), ids=CASES.keys())
def test_flash_gradients_match_float64(cfg):
    model = Attention(**cfg)
    reference = copy.deepcopy(model).double()
    x = torch.ones(())
    step = kernelwright.compile_training(model, (x,), None, optimizer=kernelwright.optim.SGD(
        lr=0.0, momentum=0.9))  # lr 0: the momentum buffer after one step is the gradient
    names = [k.name.split("+")[0] for k in step.plan.kernels]
    assert names.count("attention_grad") == 2 and "attention" in names, names
    n, h, lq, s, e = (cfg[k] for k in ("n", "h", "lq", "s", "e"))
    if lq * s > 4 * e * max(lq, s):  # larger than any value of [rows, 2 E + 1] per head
        biggest = max(b.nbytes for b in step.plan.buffers if b.kind == "temp")
        assert biggest < 4 * n * h * lq * s, "an L x S value is stored"
    loss = step(x)
    want = reference(x.double())
    want.backward()
    torch.testing.assert_close(torch.tensor(loss, dtype=torch.float64), want.detach(),
                               rtol=1e-4, atol=1e-4)
    grads = step.optimizer_state()
    for name, p in reference.named_parameters():
        got = grads[name]["momentum_buffer"].double()
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-4 * float(p.grad.abs().max()),
                                   msg=lambda m, name=name: f"{name}'s gradient: {m}")


def _flash_nodes(model) -> int:
    joint = capture_joint(model, (torch.ones(()),), None)
    return sum(n.target is FLASH_FORWARD for n in joint.graph.nodes)


def test_capture_keeps_flash_only_where_our_kernels_take_it():
    """lower.attention.flash_fits decides: dropout and head dims too wide for the kernels'
    tiles keep the math backend (plain matmul and softmax ops), the rest the flash op."""
    assert _flash_nodes(Attention(1, 2, 2, 4, 6, 8)) == 1
    assert _flash_nodes(Attention(1, 2, 2, 4, 6, 8, dropout=0.1)) == 0
    assert _flash_nodes(Attention(1, 1, 1, 4, 6, 512)) == 0
