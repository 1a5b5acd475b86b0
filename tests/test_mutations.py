"""Buffers and inputs a module changes in forward are honoured, never dropped: a buffer's
new value is the next call's (CompiledModule.state), an input's is written back into
the caller's tensor, as eager does."""

import pytest
import torch

import kernelwright


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4, 3))

    def forward(self, x):
        self.total.add_(x)
        return self.total * 2


def test_a_buffer_changed_in_forward_carries_to_the_next_call():
    eager, module = Counter(), Counter()
    cm = kernelwright.compile(module, [torch.zeros(4, 3)])
    for seed in range(3):
        x = torch.randn(4, 3, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(cm(x), eager(x))
    torch.testing.assert_close(cm.state()["total"], eager.total)
    assert "update" in cm.plan.summary()


def test_batch_norm_in_training_mode_updates_its_running_statistics():
    eager = torch.nn.BatchNorm2d(3).train()
    module = torch.nn.BatchNorm2d(3).train()
    cm = kernelwright.compile(module, [torch.randn(2, 3, 4, 4)])
    for seed in range(2):
        x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(cm(x), eager(x), atol=1e-4, rtol=1e-4)
    state = cm.state()
    torch.testing.assert_close(state["running_mean"], eager.running_mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state["running_var"], eager.running_var, atol=1e-5, rtol=1e-5)
    assert int(state["num_batches_tracked"]) == int(eager.num_batches_tracked) == 2


class Cache(torch.nn.Module):
    """Writes its new keys into a cache passed in, as a static KV cache does."""

    def forward(self, cache, pos, k):
        cache.index_copy_(0, pos, k)
        return cache.sum(0)


def test_an_input_changed_in_place_is_written_back():
    cache, pos, k = torch.zeros(6, 3), torch.tensor([2]), torch.ones(1, 3)
    cm = kernelwright.compile(Cache(), [cache.clone(), pos, k])
    mine, theirs = torch.zeros(6, 3), torch.zeros(6, 3)
    for step in range(3):
        pos, k = torch.tensor([step]), torch.full((1, 3), float(step + 1))
        torch.testing.assert_close(cm(mine, pos, k), Cache()(theirs, pos, k))
    torch.testing.assert_close(mine, theirs)


def test_two_compiled_shapes_share_one_state():
    """A module compiled for two shapes with share_state updates one copy of its
    buffers: calls of either continue from the other's (a prompt and its decode steps)."""
    eager, module = Counter(), Counter()
    first = kernelwright.compile(module, [torch.zeros(4, 3)])

    class Rows(Counter):  # the same buffer, read by a call over one row
        def forward(self, x):
            self.total.add_(x)
            return self.total[:1] * 2

    other = kernelwright.compile(Rows(), [torch.zeros(1, 3)], share_state=first)
    x, y = torch.randn(4, 3), torch.randn(1, 3)
    torch.testing.assert_close(first(x), eager(x))
    torch.testing.assert_close(other(y), (eager.total + y)[:1] * 2)
    eager.total.add_(y)
    torch.testing.assert_close(first(x), eager(x))


class Sometimes(torch.nn.Module):
    """A buffer changed by calls of two rows or more, only read by a call of one."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x):
        if x.shape[0] > 1:
            self.seen.add_(x.sum(0))
        return x * 2 + self.seen


def test_a_shape_that_only_reads_shared_state_reads_its_latest_value():
    """A plan compiled with share_state reads the state the other plan updates from its
    buffer at each call, where its own forward does not change it (not its value at
    compile time); the other way round, compiling the updating shape second, is refused
    by name (the first plan holds the buffer as a constant)."""
    eager = Sometimes()
    rows = kernelwright.compile(Sometimes(), [torch.zeros(2, 3)])
    one = kernelwright.compile(Sometimes(), [torch.zeros(1, 3)], share_state=rows)
    for _ in range(2):
        x, y = torch.randn(2, 3), torch.randn(1, 3)
        torch.testing.assert_close(rows(x), eager(x))
        torch.testing.assert_close(one(y), eager(y))
    one_first = kernelwright.compile(Sometimes(), [torch.zeros(1, 3)])
    with pytest.raises(kernelwright.CompileError, match="share_state: this plan changes seen"):
        kernelwright.compile(Sometimes(), [torch.zeros(2, 3)], share_state=one_first)


class Slots(torch.nn.Module):
    """A cache buffer written along an inner dim (a KV cache's sequence dim), read whole."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 5, 3))

    def forward(self, pos, k):
        self.cache.index_copy_(1, pos, k)
        return self.cache.sum(1)


def test_a_buffer_written_along_an_inner_dim_reads_the_state_it_carries():
    """Each call reads the buffer as the last call left it, not its value at compile
    time, also where the write permutes it (index_copy_ off dim 0)."""
    eager, module = Slots(), Slots()
    cm = kernelwright.compile(module, [torch.tensor([0]), torch.zeros(2, 1, 3)])
    for step in range(3):
        pos, k = torch.tensor([step]), torch.full((2, 1, 3), float(step + 1))
        torch.testing.assert_close(cm(pos, k), eager(pos, k))
    torch.testing.assert_close(cm.state()["cache"], eager.cache)


def test_an_input_changed_in_place_through_torch_compile_is_written_back():
    """transformers' static KV cache through torch.compile(model.forward): the cache is
    an input the graph updates in place, which must reach the caller's tensor."""
    def step(cache, pos, k):
        cache.index_copy_(0, pos, k)
        return cache.sum(0)

    compiled = torch.compile(step, backend="kernelwright")
    mine, theirs = torch.zeros(6, 3), torch.zeros(6, 3)
    for i in range(3):
        pos, k = torch.tensor([i]), torch.full((1, 3), float(i + 1))
        torch.testing.assert_close(compiled(mine, pos, k), step(theirs, pos, k))
        torch.testing.assert_close(mine, theirs)


def test_state_is_loaded_into_the_next_call():
    """load_state writes the buffers the next call reads (a checkpoint's restore)."""
    cm = kernelwright.compile(Counter(), [torch.zeros(4, 3)])
    start = torch.arange(12.0).reshape(4, 3)
    cm.load_state({"total": start})
    x = torch.ones(4, 3)
    torch.testing.assert_close(cm(x), (start + x) * 2)
    with pytest.raises(ValueError, match="no such state"):
        cm.load_state({"missing": start})


class Attend(torch.nn.Module):
    """A KV cache buffer written in place, then attention over it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(1, 2, 8, 4))

    def forward(self, q, pos, k):
        self.keys.index_copy_(2, pos, k)
        return torch.nn.functional.scaled_dot_product_attention(q, self.keys, self.keys)


def test_the_one_trace_capture_keeps_state_and_attention_as_export_does():
    """compile's capture (capture.trace_graph: one functionalized trace) carries a buffer
    and an input changed in place as export does, keeps SDPA whole (one attention
    kernel, not its decomposition) and falls back to export for a Python number."""
    from kernelwright.frontend.capture import trace_graph

    q, pos, k = torch.randn(1, 2, 3, 4), torch.tensor([1]), torch.randn(1, 2, 1, 4)
    traced = trace_graph(Attend(), [q, pos, k])
    assert traced is not None and [n for _, n in traced.mutations.values()] == ["keys"]
    assert any("scaled_dot_product" in str(n.target) for n in traced.graph_module.graph.nodes)
    eager, module = Attend(), Attend()
    cm = kernelwright.compile(module, [q, pos, k])
    for step in range(3):
        pos, k = torch.tensor([step]), torch.randn(1, 2, 1, 4)
        torch.testing.assert_close(cm(q, pos, k), eager(q, pos, k), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cm.state()["keys"], eager.keys)

    cache, pos, k = torch.zeros(6, 3), torch.tensor([2]), torch.ones(1, 3)
    cm = kernelwright.compile(Cache(), [cache.clone(), pos, k])
    mine, theirs = torch.zeros(6, 3), torch.zeros(6, 3)
    for step in range(2):
        pos, k = torch.tensor([step]), torch.full((1, 3), float(step + 1))
        torch.testing.assert_close(cm(mine, pos, k), Cache()(theirs, pos, k))
    torch.testing.assert_close(mine, theirs)

    class Scaled(torch.nn.Module):
        def forward(self, x, s):
            return x * s

    assert trace_graph(Scaled(), [q, 2.0]) is None
    cm = kernelwright.compile(Scaled(), [q, 2.0])
    torch.testing.assert_close(cm(q, 2.0), q * 2.0)


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5)])
def test_the_one_trace_capture_keeps_linear_whole(shape):
    """trace_graph keeps aten.linear (capture.TRACE_KEEPS_WHOLE), lowered as the matmul
    of x and the weight's transpose, with and without a bias, at any input rank."""
    from kernelwright.frontend.capture import trace_graph

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 3, bias=False))
    x = torch.randn(shape)
    traced = trace_graph(module, [x])
    assert sum("linear" in str(n.target) for n in traced.graph_module.graph.nodes) == 2
    cm = kernelwright.compile(module, [x])
    torch.testing.assert_close(cm(x), module(x), atol=1e-5, rtol=1e-5)


class Named(torch.nn.Module):
    """Parameters, persistent and non-persistent buffers, a plain tensor attribute and
    nested inputs, one of them named like an op of the graph."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)
        self.register_buffer("shift", torch.ones(4), persistent=False)
        self.scale = torch.full((4,), 2.0)

    def forward(self, xs, extra, mul):
        return self.bn(xs[0] + xs[1]) * extra["Gain.a"] * self.scale + self.shift * mul


def test_the_one_trace_capture_names_tensors_as_export_does():
    """trace_graph's placeholders have torch.export's names (messages name the user's
    tensors alike whichever capture ran) and its weights are the module's own tensors,
    the persistent ones, as export's (changed_weights sees `p.data = ...`)."""
    from kernelwright.frontend.capture import export_graph, from_exported, trace_graph

    module = Named().train()
    args = [[torch.randn(3, 4), torch.randn(3, 4)], {"Gain.a": torch.randn(4)}, torch.randn(4)]
    traced = trace_graph(module, args)
    exported = from_exported(export_graph(module, args))
    names = [[n.name for n in c.graph_module.graph.find_nodes(op="placeholder")]
             for c in (traced, exported)]
    assert sorted(names[0]) == sorted(names[1])
    assert {"p_bn_weight", "b_shift", "b_scale", "xs_0", "xs_1", "extra_gain_a", "mul"} \
        <= set(names[0])
    assert set(traced.constants) == set(exported.constants)
    assert sorted(traced.mutations.values()) == sorted(exported.mutations.values())
    assert [n for n, _ in traced.weights] == [n for n, _ in exported.weights] == [
        "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    own = dict(module.state_dict(keep_vars=True))
    assert all(t is own[n] for n, t in traced.weights)
    cm = kernelwright.compile(module, args)
    module.bn.bias.data = torch.zeros(4)
    assert cm.changed_weights() == ["bn.bias"]
