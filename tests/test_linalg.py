"""Matmul family against PyTorch eager (convolution and pooling: test_conv.py, test_pool.py)."""

import pytest
import torch
from conftest import Fn, check


@pytest.mark.slow
@pytest.mark.parametrize("m,k,n", [(1, 7, 5), (17, 33, 65), (70, 16, 3), (64, 64, 64), (5, 200, 9)])
def test_mm(m, k, n):
    check(Fn(torch.mm), torch.randn(m, k), torch.randn(k, n))


@pytest.mark.slow
def test_transposed_operands_and_batched():
    a, b = torch.randn(19, 11), torch.randn(23, 11)
    check(Fn(lambda a, b: (a @ b.t(), a.t() @ a)), a, b)
    x, y = torch.randn(3, 9, 13), torch.randn(3, 13, 6)
    check(Fn(lambda x, y: (torch.bmm(x, y), torch.matmul(x, y.transpose(1, 2).transpose(1, 2)))),
          x, y)


@pytest.mark.slow
def test_matmul_broadcast_batch_and_vectors():
    x, w = torch.randn(2, 3, 5, 7), torch.randn(7, 4)
    check(Fn(lambda x, w: (x @ w, x @ w[:, 0], w[:, 0] @ w)), x, w)


@pytest.mark.slow
def test_linear_bias_activation_is_one_kernel():
    m = torch.nn.Sequential(torch.nn.Linear(21, 35), torch.nn.GELU())
    compiled = check(m, torch.randn(6, 21))
    assert len(compiled.plan.kernels) == 1, compiled.plan.summary()
