"""Matmul family against PyTorch eager (convolution and pooling: test_conv.py, test_pool.py)."""

import pytest
import torch
from conftest import Fn, check

import kernelwright


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


def _grouped_inputs(dtype=torch.float32):
    """x [10, 16], w [3, 16, 8] (each row's matrix of K x N) and offsets ending groups of
    3, 0 and 7 rows."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(10, 16, generator=g).to(dtype)
    w = torch.randn(3, 8, 16, generator=g).to(dtype).transpose(1, 2)  # as transformers'
    return x, w, torch.tensor([3, 3, 10], dtype=torch.int32)


def test_grouped_mm_rows_take_their_groups_matrix():
    # torch's meta of _grouped_mm takes bfloat16 alone (its CPU kernel float32 too)
    x, w, offs = _grouped_inputs(torch.bfloat16)
    compiled = check(Fn(lambda x, w, offs: torch._grouped_mm(x, w, offs=offs)), x, w, offs,
                     atol=2e-2, rtol=2e-2)
    assert not any(b.nbytes >= 10 * 16 * 8 * 2 for b in compiled.plan.buffers
                   if b.kind == "temp"), compiled.plan.summary()  # w gathered in place


def test_transformers_grouped_mm_fallback_zeroes_rows_past_the_last_offset():
    pytest.importorskip("transformers.integrations.moe")
    x, w, _ = _grouped_inputs()
    offs = torch.tensor([2, 2, 7], dtype=torch.int32)
    check(Fn(lambda x, w, offs: torch.ops.transformers.grouped_mm_fallback(x, w, offs)),
          x, w, offs)


def test_grouped_mm_batched_form_and_refused_forms():
    x, w, offs = _grouped_inputs(torch.bfloat16)
    a = x[:9].reshape(3, 3, 16)
    check(Fn(lambda a, w: torch._grouped_mm(a, w)), a, w, atol=2e-2, rtol=2e-2)
    with pytest.raises(kernelwright.CompileError, match="grouped product"):  # 2-d by 2-d
        kernelwright.compile(Fn(lambda a, b, offs: torch._grouped_mm(a, b.t(), offs=offs)),
                             [x[:8], x[:8], torch.tensor([3, 3, 16], dtype=torch.int32)])
