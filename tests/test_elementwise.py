"""Elementwise ops and activations against PyTorch eager (fp32, 1e-4)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check

UNARY = {
    "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=5.0), "elu": F.elu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "hardtanh": F.hardtanh,
    "hardtanh_range": lambda x: F.hardtanh(x, -0.5, 2.0), "neg_abs": lambda x: -x.abs(),
    "exp": torch.exp, "erf": torch.erf, "clamp": lambda x: x.clamp(-0.3, 0.7),
    "clamp_min": lambda x: x.clamp(min=0.1), "pow2": lambda x: x ** 2, "pow3": lambda x: x ** 3,
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "sign": torch.sign,
    "floor": lambda x: torch.floor(x * 3), "round": lambda x: torch.round(x * 3),
}

POSITIVE = {"log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
            "reciprocal": torch.reciprocal, "pow_half": lambda x: x ** 0.5,
            "pow_frac": lambda x: x ** 1.7}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    x = torch.randn(5, 37) * 3
    check(Fn(UNARY[name]), x)


@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_unary_positive(name):
    x = torch.rand(3, 29) + 0.05
    check(Fn(POSITIVE[name]), x)


@pytest.mark.slow
@pytest.mark.parametrize("shapes", [((4, 7), (4, 7)), ((4, 7), (7,)), ((3, 1, 5), (1, 4, 1)),
                                    ((2, 3, 4, 5), (3, 1, 1)), ((6,), ())])
def test_binary_broadcast(shapes):
    a, b = torch.randn(shapes[0]), torch.randn(shapes[1])
    check(Fn(lambda x, y: (x + y, x - y, x * y, x / (y.abs() + 0.5), torch.maximum(x, y),
                           torch.minimum(x, y))), a, b)


def test_scalars_and_chain():
    x = torch.randn(3, 45)
    check(Fn(lambda x: ((x * 2.5 + 1) / 3 - 0.25).relu() * x.sigmoid()), x)


def test_ternary_where_and_compare():
    x, y = torch.randn(4, 9), torch.randn(4, 9)
    check(Fn(lambda x, y: (torch.where(x > y, x, y * 2), x >= y, x != y,
                           torch.where(x < 0, 0.0, x))), x, y)


def test_int_and_bool_outputs():
    x = torch.randn(5, 6)
    check(Fn(lambda x: ((x > 0).to(torch.int64) * 3, (x > 0) & (x < 1), (x * 4).long())), x)


def test_casts_from_int_input():
    i = torch.randint(-5, 5, (4, 7))
    check(Fn(lambda i: (i.float() * 0.5, i * 2 + 1, i > 0)), i)


def test_large_numel_uses_2d_grid():
    x = torch.randn(65536 * 4 + 3)  # more than 65535 workgroups of 4
    check(Fn(lambda x: x * 3 - 1), x)


def test_several_elements_per_invocation_on_large_tensors():
    x = torch.randn((1 << 20) + 5)  # past the size where each invocation takes 4 elements
    check(Fn(lambda x: torch.nn.functional.gelu(x) + 1), x)
