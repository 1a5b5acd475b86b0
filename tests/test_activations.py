"""Activations and elementwise ops as torch.export decomposes them, arange, and int64 /
bool tensors, against PyTorch eager (fp32, 1e-4)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import Fn, check


def new_gelu(x):
    """minGPT's GELU, written out by hand."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 *
                                                                  torch.pow(x, 3.0))))


ACTIVATIONS = {
    "selu": F.selu, "celu": F.celu, "celu_alpha": lambda x: F.celu(x, alpha=0.5),
    "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "softsign": F.softsign,
    "mish": F.mish, "log_sigmoid": F.logsigmoid, "new_gelu": new_gelu,
    "threshold": lambda x: F.threshold(x, 0.1, 20.0), "relu6": F.relu6,
    "glu": F.glu, "glu_dim0": lambda x: F.glu(x, 0), "softmin": lambda x: F.softmin(x, 1),
    "hardshrink": F.hardshrink, "softshrink": lambda x: F.softshrink(x, 0.3),
    "tanhshrink": F.tanhshrink, "rrelu_eval": lambda x: F.rrelu(x, training=False),
    "silu_by_hand": lambda x: x * torch.sigmoid(x), "square": torch.square,
    "sigmoid_swish": lambda x: x * torch.sigmoid(1.702 * x), "exp2": torch.exp2,
    "expm1": torch.expm1, "log1p_abs": lambda x: torch.log1p(x.abs()),
    "min_max_scalars": lambda x: (torch.clamp(x, max=0.5), torch.clamp(x, min=-0.2, max=0.1),
                                  torch.maximum(x, torch.tensor(0.2)),
                                  torch.minimum(x, torch.tensor(-0.1)), x.clamp_max(1),
                                  torch.fmax(x, torch.tensor(0.0))),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(name):
    x = torch.randn(4, 10) * 3
    x[0, :3] = torch.tensor([0.0, 25.0, -25.0])
    check(Fn(ACTIVATIONS[name]), x)


def test_modules():
    x = torch.randn(3, 6, 4) * 2
    check(nn.Sequential(nn.SELU(), nn.CELU(0.7), nn.Mish(), nn.Softsign()), x)
    check(nn.Sequential(nn.ReLU6(), nn.Hardswish(), nn.Threshold(0.5, -1.0)), x)


@pytest.mark.parametrize("channels", [1, 6])
def test_prelu(channels):
    m = nn.PReLU(channels)
    with torch.no_grad():
        m.weight.copy_(torch.randn(channels))
    check(m, torch.randn(2, 6, 5))


def test_logit():
    x = torch.rand(4, 9) * 0.98 + 0.01
    check(Fn(lambda x: (torch.logit(x), torch.logit(x, eps=0.05), torch.special.logit(x))), x)


def test_clamp_tensor_bounds():
    x, lo = torch.randn(4, 7), torch.randn(4, 7) - 0.5
    hi = torch.rand(7) + 0.2
    check(Fn(lambda x, lo: (torch.clamp(x, lo, lo + 1), torch.clamp(x, min=lo),
                            torch.clamp(x, max=hi), torch.max(torch.min(x, hi), lo))), x, lo)


def test_where_and_comparisons():
    x, y = torch.randn(5, 6), torch.randn(6)
    check(Fn(lambda x, y: (torch.where(x > 0.5, x, y), torch.where(x < y, 1.0, -1.0),
                           x == y, x != 0, x < y, x <= 0.1, x > y, x >= -0.2,
                           torch.where(x.isnan(), 0.0, x), x.isinf(), x.isfinite())), x, y)


def test_nan_inf_predicates():
    x = torch.tensor([[0.0, float("nan"), float("inf"), float("-inf"), -1.5, 3e38]])
    check(Fn(lambda x: (torch.isnan(x), torch.isinf(x), torch.isfinite(x),
                        torch.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0))), x)


def test_dropout_eval():
    m = nn.Sequential(nn.Linear(6, 5), nn.Dropout(0.3), nn.ReLU(), nn.Dropout1d(0.2))
    check(m, torch.randn(3, 6))
    check(Fn(lambda x: F.dropout(x, 0.5, training=False) * 2), torch.randn(3, 6))


def test_casts():
    x = torch.randn(4, 6) * 5
    i = torch.randint(-4, 5, (4, 6))
    check(Fn(lambda x, i: (x.long(), x.int(), x.to(torch.bool), i.float() / 3, i.to(torch.bool),
                           (x > 0).float(), (x > 0).long() + i, x.to(torch.float64).float(),
                           i.to(torch.int32) * 2, x.round().long())), x, i)


def test_arange():
    x = torch.randn(3, 6)
    check(Fn(lambda x: (x + torch.arange(6), x * torch.arange(1, 12, 2, dtype=torch.float32),
                        x * torch.arange(0.5, 3.4, 0.5), torch.arange(6) * 2,
                        torch.arange(10, 4, -2), torch.arange(3, dtype=torch.float32) + 0.5)), x)


def test_arange_masks():
    """Index tensors built from arange: a causal mask and a one-hot compare."""
    x = torch.randn(5, 5)
    t = torch.randint(0, 5, (5,))
    check(Fn(lambda x, t: (x.masked_fill(torch.arange(5)[None, :] > torch.arange(5)[:, None],
                                         float("-inf")).softmax(-1),
                           (torch.arange(5)[None, :] == t[:, None]).float() * x)), x, t)


def test_int64_bool_elementwise():
    i, j = torch.randint(-6, 7, (3, 8)), torch.randint(1, 5, (3, 8))
    b = torch.rand(3, 8) > 0.5
    check(Fn(lambda i, j, b: (i * j + 3, i // j, i % j, torch.where(b, i, -j), i.abs(),
                              -i, torch.maximum(i, j), i.clamp(-2, 2), b & (i > 0), b | ~b,
                              b ^ (j > 2), i.sum(1), b.sum(0), b.any(1), b.all(0),
                              i.argmax(1), i.max(0).values, (i == j).long())), i, j, b)


def test_bitwise_int():
    i, j = torch.randint(-9, 10, (3, 7)), torch.randint(0, 16, (3, 7))
    check(Fn(lambda i, j: (i & j, i | j, i ^ j, ~i, i & 6, j | 1, ~(i > 0))), i, j)


def test_log_sigmoid_forward_op():
    """The two-output ATen op (output, backward buffer), called directly."""
    x = torch.randn(3, 8) * 10
    check(Fn(lambda x: torch.ops.aten.log_sigmoid_forward(x)[0]), x)


def test_random_training_ops_are_compile_errors():
    import kernelwright
    from kernelwright.ir.ir import CompileError

    x = torch.randn(3, 4)
    for fn in (lambda x: F.rrelu(x, training=True), lambda x: F.dropout(x, 0.5, training=True)):
        with pytest.raises(CompileError, match="training mode is random"):
            kernelwright.compile(Fn(fn), [x])


def test_relu_and_clamp_keep_nan_as_pytorch():
    x = torch.tensor([[float("nan"), -2.0, 0.5, 3.0, float("inf"), float("-inf"), -0.0, 7.0]])
    check(Fn(lambda x: (torch.relu(x), torch.clamp(x, -1.0, 1.0), torch.clamp(x, min=0.25),
                        torch.clamp(x, max=0.25), F.hardtanh(x), F.relu6(x))), x,
          equal_nan=True)
