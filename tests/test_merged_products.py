"""Products of one operand by several weights compiled as one matmul against the weights
side by side (lower/linalg.merge_shared_products), against PyTorch eager."""

import pytest
import torch
import torch.nn.functional as F
from conftest import check

import kernelwright


def matmuls(compiled) -> int:
    """The plan's matmul kernels."""
    return sum("matmul" in k.name for k in compiled.plan.kernels)


class Projections(torch.nn.Module):
    """q, k and v projections of one input, then an elementwise op of all three."""

    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.q = torch.nn.Linear(24, 16, bias=bias)
        self.k = torch.nn.Linear(24, 8, bias=bias)
        self.v = torch.nn.Linear(24, 8, bias=bias)

    def forward(self, x):
        return self.q(x)[..., 8:] * self.k(x) + self.v(x)


class SwiGLU(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(24, 40, bias=False)
        self.up = torch.nn.Linear(24, 40, bias=False)
        self.down = torch.nn.Linear(40, 24, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 24), (2, 5, 24)])
def test_three_projections_of_one_input_are_one_matmul(bias, shape):
    torch.manual_seed(0)
    compiled = check(Projections(bias), torch.randn(shape))
    # unmerged: three matmul kernels, the last with the mul and add as its epilogue
    assert matmuls(compiled) == 1, compiled.plan.summary()
    assert len(compiled.plan.kernels) == 2, compiled.plan.summary()
    if bias:  # the biases side by side, added by the merged matmul's epilogue
        assert any(k.name == "matmul+add" for k in compiled.plan.kernels)


def test_swiglu_gate_and_up_are_one_matmul():
    torch.manual_seed(0)
    compiled = check(SwiGLU(), torch.randn(2, 3, 24))
    # unmerged: up, gate with silu(gate) * up as its epilogue, down
    assert matmuls(compiled) == 2, compiled.plan.summary()


def test_half_weights_are_merged_in_their_dtype():
    torch.manual_seed(0)
    module = SwiGLU().to(torch.bfloat16)
    compiled = check(module, torch.randn(2, 3, 24, dtype=torch.bfloat16), atol=2e-2, rtol=2e-2)
    assert matmuls(compiled) == 2, compiled.plan.summary()
    # the merged weight is stored as bf16, as the module's weights are
    assert all(compiled.plan.buffers[b].dtype == "bf16" for b in compiled.plan.constants)


class SharedWeight(torch.nn.Module):
    """a's weight is read by two products (of x and of y): one copy on the GPU."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(24, 16, bias=False)
        self.b = torch.nn.Linear(24, 16, bias=False)

    def forward(self, x, y):
        return self.a(x) * self.b(x) + self.a(y)


def test_a_weight_read_elsewhere_is_not_merged():
    torch.manual_seed(0)
    compiled = check(SharedWeight(), torch.randn(3, 24), torch.randn(3, 24))
    assert matmuls(compiled) == 3, compiled.plan.summary()
    weights = sum(p.numel() for p in SharedWeight().parameters())
    held = sum(compiled.plan.buffers[b].nbytes for b in compiled.plan.constants)
    assert held == 4 * weights  # no weight held twice


class OwnEpilogues(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(24, 16)
        self.b = torch.nn.Linear(24, 8)

    def forward(self, x):
        return F.gelu(self.a(x)), torch.relu(self.b(x))


def test_products_with_epilogues_of_their_own_keep_their_kernels():
    """Merged, gelu and relu would be kernels of their own: two kernels stay two."""
    torch.manual_seed(0)
    compiled = check(OwnEpilogues(), torch.randn(4, 24))
    assert len(compiled.plan.kernels) == 2, compiled.plan.summary()


def test_a_changed_weight_of_a_merged_product_is_refused():
    torch.manual_seed(0)
    module = Projections(bias=True).eval()
    x = torch.randn(2, 24)
    compiled = kernelwright.compile(module, [x])
    assert matmuls(compiled) == 1
    with torch.no_grad():
        module.k.weight.mul_(2)
    with pytest.raises(RuntimeError, match="k.weight"):
        compiled(x)


def test_plans_sharing_weights_make_the_merged_weight_once():
    """A plan compiled with share_state takes the merged weight the other plan made
    (GraphBuilder.made: the same host array, so the same device buffer, neither made
    nor compared again); after the weights changed it makes its own from the new ones."""
    torch.manual_seed(0)
    model = SwiGLU().eval()
    first = kernelwright.compile(model, [torch.randn(2, 24)])
    x = torch.randn(5, 24)
    second = kernelwright.compile(model, [x], share_state=first)
    torch.testing.assert_close(second(x), model(x), rtol=1e-4, atol=1e-5)

    def widest(cm):  # the merged gate and up weight, [24, 80]
        return next(a for a in cm.plan.constants.values() if a.shape == (24, 80))

    assert widest(second) is widest(first)
    with torch.no_grad():
        model.gate.weight.mul_(-1)
    changed = kernelwright.compile(model, [x], share_state=first)
    assert widest(changed) is not widest(first)
    torch.testing.assert_close(changed(x), model(x), rtol=1e-4, atol=1e-5)
