"""Modules whose forward changes a plain tensor attribute (capture.with_state_buffers): the
compiled module carries the change to its next call as eager does (the user's module
is left as it was), except where torch.export does not record it (an assignment in a
submodule's forward): then each call computes what eager's first call does, and a
warning says so."""

import copy
import warnings

import pytest
import torch

import kernelwright


class Cell(torch.nn.Module):
    """An RNN cell keeping its hidden state in a plain tensor attribute."""

    def __init__(self, how: str):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))
        self.hidden = torch.randn(2, 4)  # not a registered buffer
        self.how = how

    def forward(self, x):
        new = torch.tanh(x @ self.w + self.hidden)
        if self.how == "assign":
            self.hidden = new
        elif self.how == "copy_":
            self.hidden.copy_(new)
        else:
            self.hidden += x
        return self.hidden * 2.0


class Outer(torch.nn.Module):
    """The cell as a submodule, reading its state after the step too."""

    def __init__(self):
        super().__init__()
        self.cell = Cell("assign")
        self.scale = torch.tensor(3.0)  # a plain tensor attribute that is only read

    def forward(self, x):
        return self.cell(x) + self.cell.hidden * self.scale


@pytest.mark.parametrize("module", [Cell("assign"), Cell("copy_"), Cell("add_")],
                         ids=["assign", "copy_", "add_"])
def test_changed_tensor_attribute_carries_to_the_next_call(module, capture):
    # (the one trace captures copy_ and add_; an assigned attribute makes it export instead)
    x = torch.randn(2, 4)
    before = {k: v.clone() for k, v in vars(module).items() if isinstance(v, torch.Tensor)}
    eager = copy.deepcopy(module)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*changes its tensor attribute")
        compiled = kernelwright.compile(module, [x])
    for k, v in before.items():  # compiling changed nothing
        assert torch.equal(getattr(module, k), v) and not getattr(module, k).requires_grad
    with torch.no_grad():
        calls = [eager(x) for _ in range(3)]
    assert not torch.allclose(calls[0], calls[1])
    for want in calls:
        torch.testing.assert_close(compiled(x), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(compiled.state()["hidden"], eager.hidden, atol=1e-5, rtol=1e-5)


def test_changed_attribute_of_a_submodule_is_read_at_its_compile_time_value(capture):
    module, x = Outer(), torch.randn(2, 4)
    eager = copy.deepcopy(module)
    with pytest.warns(UserWarning, match=r"changes its tensor attribute\(s\) cell\.hidden in a "
                                         "submodule"):
        compiled = kernelwright.compile(module, [x])
    with torch.no_grad():
        first, second = eager(x), eager(x)
    torch.testing.assert_close(compiled(x), first)
    torch.testing.assert_close(compiled(x), first)  # not carried forward
    assert not torch.allclose(first, second)  # (eager's is)


def test_tensor_attribute_only_read_or_set_to_itself():
    """An attribute reassigned to itself (`self.h0 = self.h0.to(x.device)`, as some RNN
    models do) or only read gives no warning."""

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = torch.nn.GRU(4, 5, batch_first=True)
            self.h0 = torch.randn(1, 2, 5)

        def forward(self, x):
            self.h0 = self.h0.to(x.device)
            return self.gru(x, self.h0)[0][:, -1]

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Model()

        def forward(self, x):
            return self.inner(x)

    for m in (Model().eval(), Outer().eval()):
        state_read_or_set_to_itself(m)


def state_read_or_set_to_itself(m):
    x = torch.randn(2, 3, 4)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*changes its tensor attribute")
        compiled = kernelwright.compile(m, [x])
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), m(x), atol=1e-5, rtol=1e-5)


class _Accumulates(torch.nn.Module):
    """A forward that changes a buffer and returns nothing."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.total.add_(x)


def test_a_forward_returning_none(tmp_path):
    """A module that only changes its state returns None, as eager, its state carried
    from call to call; so does its saved and loaded plan."""
    compiled = kernelwright.compile(_Accumulates(), [torch.ones(3)])
    assert compiled(torch.ones(3)) is None and compiled(torch.full((3,), 2.0)) is None
    torch.testing.assert_close(compiled.state()["total"], torch.full((3,), 3.0))
    compiled.plan.save(tmp_path / "plan")
    loaded = kernelwright.CompiledModule(kernelwright.Plan.load(tmp_path / "plan"))
    assert loaded(torch.ones(3)) is None
    torch.testing.assert_close(loaded.state()["total"], torch.ones(3))
