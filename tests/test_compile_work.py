"""The work a compile does, counted rather than timed: build_plan's rounds of binding
cuts generate again only the kernels a cut changed, and a training step's compile grows
by the same work per identical layer."""

import torch
import torch.nn.functional as F
from conftest import Fn
from torch import nn

import kernelwright
from kernelwright.frontend.capture import export_graph, fx_to_ir
from kernelwright.options import BindingLimits, CompileOptions
from kernelwright.schedule import schedule
from kernelwright.train import step as step_module
from kernelwright.train.optim import ParamGroups


def _counted(monkeypatch, module, name: str) -> list:
    """The arguments of each call of module.name, recorded as the calls happen."""
    calls, real = [], getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def _plan_of(fn, xs, options):
    ep = export_graph(fn, xs)
    b, torch_dtypes = fx_to_ir(ep.graph_module, {}, options=options)
    return schedule.build_plan(b.graph, "tuple", torch_dtypes, options)


def _kernels(plan):
    return [(k.source, k.bindings, k.grid) for k in plan.kernels]


def test_a_round_of_binding_cuts_generates_again_only_the_kernels_it_changed(monkeypatch):
    """A normalization reading five buffers does not fit a device of five bindings per
    kernel: the second round stores one of its inline values. The matmul beside it is
    the same kernel in both rounds and is generated once; the plan is the one that
    generating every kernel in every round gives."""
    fn = Fn(lambda x, m, g, v, b, w: ((x - m) * (g * torch.rsqrt(v + 1e-5)) + b, x @ w))
    xs = [torch.randn(4, 8, 16)] + [torch.randn(8, 1) for _ in range(4)] + \
        [torch.randn(16, 16)]
    options = CompileOptions("strict", None, BindingLimits(5, 1 << 30, 4), None)

    rounds = _counted(monkeypatch, schedule, "fuse")
    made = _counted(monkeypatch, schedule, "generate")
    plan = _plan_of(fn, xs, options)
    assert len(rounds) == 2 and len(plan.kernels) == 3
    assert len([t for _, t, *_ in made if t is not None and t.op == "matmul"]) == 1
    assert len(made) < 2 * len(plan.kernels)

    monkeypatch.setattr(schedule, "_generate", lambda g, materialized, band_only, options, _: (
        schedule.generate(g.root, g.template, materialized, id, options,
                          [(p.template, p.root) for p in g.phases], band_only)))
    assert _kernels(_plan_of(fn, xs, options)) == _kernels(plan)


class Stack(nn.Module):
    """`layers` identical blocks of linear, layer norm and GELU, then a head."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16),
                                                  nn.GELU()) for _ in range(layers))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def test_training_compile_work_grows_by_the_same_amount_per_layer(monkeypatch):
    """IR nodes and generated kernels of a training step of 1, 2 and 3 identical layers:
    each layer adds the same number of nodes, each kernel is generated once (a state's
    update written in place twice: generated, then again to read the state from its
    output, schedule.written_in_place), and each layer adds as many kernels, give or
    take one where fusion meets the step's ends (no pass does work per pair of layers)."""
    made = _counted(monkeypatch, schedule, "generate")
    batch = (torch.randn(8, 16), torch.randint(0, 4, (8,)))
    counts = []
    for layers in (1, 2, 3):
        made.clear()
        ep = step_module.capture_joint(Stack(layers), batch, F.cross_entropy)
        (b, torch_dtypes), _ = step_module._joint_graph(
            ep, ParamGroups.single(kernelwright.optim.AdamW(lr=1e-3)), 1.0, 1,
            CompileOptions())
        plan = schedule.build_plan(b.graph, "tuple", torch_dtypes, CompileOptions())
        states = {spec.buffer for _, spec in plan.state}
        in_place = sum(k.bindings[-1] in states and k.name != "copy" for k in plan.kernels)
        assert in_place >= 3 * layers  # each layer's weight, bias and their Adam moments
        counts.append((len(b.graph.nodes), len(made) - in_place, len(plan.kernels)))
    nodes, made_n, kernels = zip(*counts)
    assert made_n == kernels, counts  # one generation per kernel, in place ones twice
    assert nodes[2] - nodes[1] == nodes[1] - nodes[0] > 0, counts
    assert abs((kernels[2] - kernels[1]) - (kernels[1] - kernels[0])) <= 1, counts


def test_the_export_capture_shows_the_user_none_of_torchs_own_deprecation_warnings():
    """torch.export's decompositions (the capture's fallback) warn of torch's own use of
    its deprecated LeafSpec on torch 2.13: noise kept from the user's output."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        export_graph(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (torch.randn(2, 4),))
