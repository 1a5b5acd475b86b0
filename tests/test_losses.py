"""Losses, as torch.export decomposes them, against PyTorch eager (fp32, 1e-4)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import Fn, check

REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.slow
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_l1(reduction):
    a, b = torch.randn(4, 7), torch.randn(4, 7)
    check(Fn(lambda a, b: (F.mse_loss(a, b, reduction=reduction),
                           F.l1_loss(a, b, reduction=reduction))), a, b)


@pytest.mark.slow
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy(reduction):
    logits, target = torch.randn(6, 5) * 3, torch.randint(0, 5, (6,))
    check(Fn(lambda x, t: F.cross_entropy(x, t, reduction=reduction)), logits, target)


@pytest.mark.slow
def test_cross_entropy_options():
    logits, target = torch.randn(8, 5) * 3, torch.randint(0, 5, (8,))
    ignoring = target.clone()
    ignoring[2] = -100  # the default ignore_index
    target[3] = 3
    w = torch.rand(5) + 0.5
    check(Fn(lambda x, t, u: (F.cross_entropy(x, u), F.cross_entropy(x, u, weight=w),
                              F.cross_entropy(x, t, label_smoothing=0.1),
                              F.cross_entropy(x, t, ignore_index=3),
                              F.cross_entropy(x, t, weight=w, reduction="sum"))),
          logits, target, ignoring)


def test_cross_entropy_spatial_and_probabilities():
    logits, target = torch.randn(2, 4, 3, 5), torch.randint(0, 4, (2, 3, 5))
    probs = torch.softmax(torch.randn(2, 4, 3, 5), 1)
    check(Fn(lambda x, t, p: (F.cross_entropy(x, t), F.cross_entropy(x, p))),
          logits, target, probs)


def test_cross_entropy_module_unbatched():
    logits, target = torch.randn(5), torch.tensor(3)
    check(nn.CrossEntropyLoss(), logits, target)


@pytest.mark.slow
def test_nll_loss():
    logp, target = torch.log_softmax(torch.randn(7, 4), 1), torch.randint(0, 4, (7,))
    w = torch.rand(4)
    check(Fn(lambda x, t: (F.nll_loss(x, t), F.nll_loss(x, t, weight=w, reduction="none"))),
          logp, target)


def test_nll_loss_forward_lowering():
    """The ATen op some decomposition tables keep whole, called directly."""
    logp, target = torch.log_softmax(torch.randn(7, 4), 1), torch.randint(0, 4, (7,))
    target[1] = 2
    w = torch.rand(4) + 0.1
    check(Fn(lambda x, t: (torch.ops.aten.nll_loss_forward(x, t, w, 1, 2)[0],
                           torch.ops.aten.nll_loss_forward(x, t, None, 0, -100)[0],
                           *torch.ops.aten.nll_loss_forward(x, t, w, 2, -100))), logp, target)


def test_gather():
    x, i = torch.randn(4, 6), torch.randint(0, 6, (4, 3))
    j = torch.randint(0, 4, (2, 6))
    check(Fn(lambda x, i, j: (x.gather(1, i), x.gather(0, j), torch.take_along_dim(x, i, 1),
                              (x * 2).gather(1, i[:, :1]).squeeze(1))), x, i, j)


@pytest.mark.slow
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("delta", [1.0, 0.5])
def test_huber_smooth_l1(reduction, delta):
    a, b = torch.randn(5, 6) * 2, torch.randn(5, 6)
    check(Fn(lambda a, b: (F.huber_loss(a, b, reduction=reduction, delta=delta),
                           F.smooth_l1_loss(a, b, reduction=reduction, beta=delta))), a, b)


@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(log_target):
    logq = torch.log_softmax(torch.randn(4, 6), 1)
    p = torch.softmax(torch.randn(4, 6), 1)
    if not log_target:
        p[0, 2] = 0.0  # 0 * log 0 = 0
    t = p.log() if log_target else p
    check(Fn(lambda q, t: (F.kl_div(q, t, reduction="batchmean", log_target=log_target),
                           F.kl_div(q, t, reduction="sum", log_target=log_target))), logq, t)


@pytest.mark.parametrize("p,swap", [(2.0, False), (1.0, True)])
def test_triplet_margin(p, swap):
    a, pos, neg = torch.randn(5, 8), torch.randn(5, 8), torch.randn(5, 8)
    check(Fn(lambda a, b, c: (F.triplet_margin_loss(a, b, c, margin=1.0, p=p, swap=swap),
                              F.triplet_margin_loss(a, b, c, reduction="none", p=p))),
          a, pos, neg)


def test_hinge_embedding():
    x = torch.randn(4, 6)
    y = torch.randint(0, 2, (4, 6)).float() * 2 - 1
    check(Fn(lambda x, y: (F.hinge_embedding_loss(x, y),
                           F.hinge_embedding_loss(x, y, margin=0.5, reduction="none"))), x, y)


def test_cosine_similarity_loss():
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    b[0] = 0.0
    y = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])
    check(Fn(lambda a, b, y: (torch.mean(1 - F.cosine_similarity(a, b)),
                              1 - F.cosine_similarity(a, b, dim=0),
                              F.cosine_embedding_loss(a, b, y, margin=0.1))), a, b, y)


def test_binary_cross_entropy_and_margin_ranking():
    a, b = torch.randn(4, 5), torch.rand(4, 5)
    y = torch.randint(0, 2, (4, 5)).float() * 2 - 1
    check(Fn(lambda a, b, y: (F.binary_cross_entropy(torch.sigmoid(a), b),
                              F.binary_cross_entropy_with_logits(a, b),
                              F.margin_ranking_loss(a, b, y, margin=0.2),
                              F.soft_margin_loss(a, y))), a, b, y)
