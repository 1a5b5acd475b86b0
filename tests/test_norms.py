"""Normalizations and vector norms against PyTorch eager (fp32, 1e-4)."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import Fn, check

import kernelwright


def _with_stats(m: nn.Module) -> nn.Module:
    """m with non-trivial running statistics and affine parameters."""
    with torch.no_grad():
        for name, t in m.named_buffers():
            if "running_mean" in name:
                t.copy_(torch.randn_like(t))
            elif "running_var" in name:
                t.copy_(torch.rand_like(t) + 0.5)
        for p in m.parameters():
            p.copy_(torch.randn_like(p))
    return m


def check_train(module: nn.Module, x: torch.Tensor):
    """A module in training mode: compile from a copy, compare with eager on another
    (eager updates the running statistics, so each side gets fresh ones)."""
    module.train()
    compiled = kernelwright.compile(copy.deepcopy(module), [x])
    with torch.no_grad():
        expected = copy.deepcopy(module)(x)
    torch.testing.assert_close(compiled(x, poison=True), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shape", [(3, 5), (2, 4, 7), (2, 3, 4, 5)])
def test_batch_norm_eval(shape):
    m = _with_stats(nn.BatchNorm1d(shape[1]) if len(shape) < 4 else nn.BatchNorm2d(shape[1]))
    check(m, torch.randn(*shape))


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(6, 5), (3, 4, 5, 2)])
def test_batch_norm_train_no_running_stats(shape, affine):
    bn = nn.BatchNorm1d if len(shape) < 4 else nn.BatchNorm2d
    m = _with_stats(bn(shape[1], affine=affine, track_running_stats=False))
    check_train(m, torch.randn(*shape) * 2 + 1)


def test_batch_norm_train_functional():
    w, bias = torch.randn(4), torch.randn(4)
    x = torch.randn(3, 4, 5) * 3 - 1
    check(Fn(lambda x: F.batch_norm(x, None, None, w, bias, training=True, eps=1e-3)), x)


def test_batch_norm_train_functional_op():
    """The op a train() module exports: output, batch mean and 1/std, and the updated
    running statistics (unbiased variance), called directly so all are outputs."""
    w, bias, rm, rv = torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3) + 0.5
    x = torch.randn(4, 3, 2, 5) * 2 + 0.5
    check(Fn(lambda x: torch.ops.aten._native_batch_norm_legit_functional(
        x, w, bias, rm, rv, True, 0.3, 1e-5)), x)


def test_batch_norm_train_module():
    """A train() module: the plan returns the output alone, computed with batch statistics
    (the running-statistic updates are buffer mutations, not outputs)."""
    check_train(_with_stats(nn.BatchNorm2d(3)), torch.randn(4, 3, 2, 5))
    check_train(_with_stats(nn.BatchNorm1d(5, momentum=0.2)), torch.randn(6, 5))


@pytest.mark.parametrize("affine,track", [(False, False), (True, False), (True, True)])
def test_instance_norm(affine, track):
    m = _with_stats(nn.InstanceNorm2d(3, affine=affine, track_running_stats=track))
    check(m, torch.randn(2, 3, 4, 5) * 2 + 1)


def test_instance_norm_reads_its_input_in_place():
    """InstanceNorm views its input as [1, N * C, H, W] for the statistics and the
    normalization: a view in the buffer's own order is recomputed by its readers
    (schedule.recompute_cheap_values), not copied; a transposed view read twice is
    still stored once."""
    rows = 300  # long enough for the statistics' own kernels (no row kernel)
    m = nn.InstanceNorm2d(3, affine=True)
    x = torch.randn(2, 3, rows, 120) * 2 + 1
    names = [k.name for k in check(m, x).plan.kernels]
    assert "copy" not in names, names
    y = torch.randn(40, 30)
    t = check(Fn(lambda y: (lambda t: (t * 2.0 + t.sum(0), t.amax(1)))(y.t())), y).plan.kernels
    assert [k.name for k in t].count("copy") == 1, [k.name for k in t]


def test_instance_norm_1d_functional():
    x = torch.randn(2, 4, 9)
    check(Fn(lambda x: F.instance_norm(x, eps=1e-3)), x)


@pytest.mark.parametrize("groups,shape", [(2, (2, 4, 3, 3)), (1, (3, 6, 5)), (6, (2, 6, 4)),
                                          (3, (2, 6, 2, 2, 2))])
def test_group_norm(groups, shape):
    check(_with_stats(nn.GroupNorm(groups, shape[1])), torch.randn(*shape) * 3 + 2)


def test_group_norm_no_affine():
    check(nn.GroupNorm(2, 4, affine=False), torch.randn(3, 4, 7))


def test_layer_norm():
    check(_with_stats(nn.LayerNorm([4, 6])), torch.randn(3, 4, 6))


@pytest.mark.slow
def test_long_rows_take_their_statistics_from_one_read():
    """Rows longer than a row kernel holds on chip (kernels.ROW_LIMIT) take their mean
    and variance from one read of x (GraphBuilder.moments: Welford's update per element,
    Chan's combine between invocations and between the pieces of a split row), then the
    normalization reads x again: two kernels read x, not three. Many rows (no split) and
    few (split), offset data, an unbiased variance alone."""
    torch.manual_seed(3)
    cases = [(Fn(lambda x: F.layer_norm(x, x.shape[1:])), torch.randn(512, 2, 16386) * 0.5 + 50, 2),
             (_with_stats(nn.GroupNorm(2, 8)), torch.randn(2, 8, 100, 90) * 3 - 20, 2),
             (Fn(lambda x: torch.var_mean(x, dim=(1, 2))), torch.randn(3, 4, 1 << 14) + 5, 1),
             (Fn(lambda x: x.var(dim=1)), torch.randn(3, 33000) * 4 + 1, 1)]
    for module, x, reads in cases:
        plan = check(module, x).plan
        readers = [k.name for k in plan.kernels if plan.inputs[0].buffer in k.bindings[:-1]]
        assert len(readers) == reads, plan.summary()
    # batch statistics over N x H x W: rows of a permuted view, split into pieces
    check_train(_with_stats(nn.BatchNorm2d(3)), torch.randn(4, 3, 100, 100) * 2 + 3)


@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rms_norm(eps):
    check(_with_stats(nn.RMSNorm(8, eps=eps)), torch.randn(3, 5, 8))
    check(Fn(lambda x: F.rms_norm(x, (4, 8), eps=eps)), torch.randn(3, 4, 8))


def test_rms_norm_by_hand():
    w = torch.randn(10)
    check(Fn(lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w),
          torch.randn(4, 10))


def test_frobenius_norm():
    x = torch.randn(3, 4, 5)
    check(Fn(lambda x: (torch.norm(x), torch.norm(x, p="fro", dim=(1, 2)),
                        torch.linalg.matrix_norm(x), x.norm(dim=-1, keepdim=True))), x)


@pytest.mark.slow
@pytest.mark.parametrize("ord", [2, 1, 3, 0.5, float("inf"), float("-inf"), 0, -1])
def test_vector_norm(ord):
    x = torch.randn(4, 7)
    x[0, 3] = 0.0
    check(Fn(lambda x: (torch.linalg.vector_norm(x, ord, dim=1),
                        torch.linalg.vector_norm(x, ord, dim=0, keepdim=True))), x)


@pytest.mark.parametrize("p,dim", [(2, 1), (1, 1), (2, 0), (2, -1)])
def test_normalize(p, dim):
    x = torch.randn(5, 6, 3)
    x[1] = 0.0  # all-zero rows divide by eps
    check(Fn(lambda x: F.normalize(x, p=p, dim=dim)), x)


def test_repeat():
    x = torch.randn(2, 3)
    check(Fn(lambda x: (x.repeat(2, 3), x.repeat(2, 1, 2))), x)
