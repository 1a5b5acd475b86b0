"""Forwards with transformers' KV caches (`use_cache=True`): a cache returned comes back
as a cache object of eager's class holding the GPU's keys and values; a cache passed in is
flattened into inputs and comes back updated, the same object, as eager's
(frontend/caches.py). Both captures, saved plans and torch.compile."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import kernelwright
from kernelwright.frontend import caches
from kernelwright.frontend.capture import trace_graph

transformers = pytest.importorskip(
    "transformers", reason="cache tests need transformers (pip install -e '.[models]')")

TOL = 1e-4


def _llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2)
    return transformers.LlamaForCausalLM(config).eval()


def _gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=200,
                                     n_positions=64, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


MODELS = {"llama": _llama, "gpt2": _gpt2}


@pytest.fixture(scope="module")
def models():
    return {name: make() for name, make in MODELS.items()}


def _ids(model, n, seed=1):
    return torch.randint(0, model.config.vocab_size, (1, n),
                         generator=torch.Generator().manual_seed(seed))


def _eager(model, *args, **kwargs):
    with torch.no_grad():
        return model(*args, **kwargs)


def _same_cache(got, want) -> None:
    assert type(got) is type(want) and len(got.layers) == len(want.layers)
    for a, b in zip(got.layers, want.layers):
        assert type(a) is type(b)
        for name in ("keys", "values"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.shape == y.shape and x.dtype == y.dtype
            torch.testing.assert_close(x, y, atol=TOL, rtol=TOL)
        assert a.get_seq_length() == b.get_seq_length()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_returned_cache_is_eagers(models, name, capture):
    model = models[name]
    ids = _ids(model, 8)
    compiled = kernelwright.compile(model, [ids], progress=None)
    got, want = compiled(ids), _eager(model, ids)
    assert type(got) is type(want) and list(got.keys()) == list(want.keys())
    torch.testing.assert_close(got.logits, want.logits, atol=TOL, rtol=TOL)
    _same_cache(got.cache, want.cache)
    # eager continues from the compiled module's cache as from its own
    step = ids[:, :1]
    torch.testing.assert_close(_eager(model, step, cache=got.cache).logits,
                               _eager(model, step, cache=want.cache).logits, atol=TOL, rtol=TOL)


def test_trace_captures_a_cache_in_and_out(models):
    """The trace capture itself (not export, its fallback) takes and returns caches."""
    model = models["gpt2"]
    ids = _ids(model, 4)
    out = trace_graph(model, [ids])
    assert out is not None and caches.is_cache_spec(out.out_spec.children()[1])
    assert trace_graph(model, [ids[:, :1], _eager(model, ids).cache]) is not None


class _Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


@pytest.mark.parametrize("name", sorted(MODELS))
def test_trace_takes_the_branches_export_takes(models, name):
    """Without a cache transformers checks its position ids for packed sequences, a branch
    on their values (which the trace's fake tensors do not have) that it skips under
    torch.export: the trace sets export's flags, so it captures the model itself."""
    module, ids = _Logits(models[name]), _ids(models[name], 8)
    assert trace_graph(module, [ids]) is not None
    compiled = kernelwright.compile(module, [ids], progress=None)
    torch.testing.assert_close(compiled(ids), _eager(module, ids), atol=TOL, rtol=TOL)


def test_cache_passed_in_is_updated_as_eager(models, capture):
    model = models["gpt2"]
    ids = _ids(model, 6)
    prefix = _eager(model, ids).cache
    given, mine = copy.deepcopy(prefix), copy.deepcopy(prefix)
    layer0 = given.layers[0]
    step = _ids(model, 1, seed=2)
    compiled = kernelwright.compile(model, [step, given], progress=None)
    assert given.get_seq_length() == 6  # compiling leaves it as it was
    got, want = compiled(step, given), _eager(model, step, cache=mine)
    torch.testing.assert_close(got.logits, want.logits, atol=TOL, rtol=TOL)
    assert got.cache is given and given.layers[0] is layer0 and want.cache is mine
    _same_cache(given, mine)
    with pytest.raises(ValueError, match="compile it again for the new shape"):
        compiled(step, given)  # now 7 tokens long: each length is its own compile


def test_static_cache_decodes_steps_with_one_compile(models):
    """A StaticCache holds its fill as a tensor: one compile serves every step, its
    tensors written in place as eager's."""
    model = models["llama"]
    ids = _ids(model, 5)
    given = transformers.StaticCache(config=model.config, max_cache_len=12)
    _eager(model, ids, cache=given)
    mine = copy.deepcopy(given)
    keys = given.layers[0].keys
    step = _ids(model, 1, seed=3)
    compiled = kernelwright.compile(model, [step, None, None, given], progress=None)
    for _ in range(2):
        got, want = compiled(step, None, None, given), _eager(model, step, cache=mine)
        torch.testing.assert_close(got.logits, want.logits, atol=TOL, rtol=TOL)
        assert got.cache is given and given.layers[0].keys is keys
        _same_cache(given, mine)
    assert given.get_seq_length() == 7


def test_saved_plan_keeps_the_cache_structure(models, tmp_path):
    model = models["gpt2"]
    ids = _ids(model, 6)
    prefix = _eager(model, ids).cache
    step = _ids(model, 1, seed=2)
    compiled = kernelwright.compile(model, [step, copy.deepcopy(prefix)], progress=None)
    compiled.plan.save(tmp_path / "plan")
    loaded = kernelwright.CompiledModule(kernelwright.Plan.load(tmp_path / "plan"))
    given, mine = copy.deepcopy(prefix), copy.deepcopy(prefix)
    got, want = loaded(step, given), _eager(model, step, cache=mine)
    assert type(got) is type(want) and got.cache is given
    torch.testing.assert_close(got.logits, want.logits, atol=TOL, rtol=TOL)
    _same_cache(given, mine)
    # a file naming a class outside transformers' caches is refused, never imported
    meta = json.loads((tmp_path / "plan" / "plan.json").read_text())
    meta["output_tree"]["pytree"] = meta["output_tree"]["pytree"].replace(
        "DynamicLayer", "os.system")
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(meta))
    with pytest.raises(kernelwright.PlanFileError, match="no cache class"):
        kernelwright.Plan.load(tmp_path / "plan")


def test_torch_compile_with_use_cache(models):
    model = models["llama"]
    ids = _ids(model, 6)
    run = torch.compile(model, backend="kernelwright")
    got, want = _eager(run, ids), _eager(model, ids)
    torch.testing.assert_close(got.logits, want.logits, atol=TOL, rtol=TOL)
    _same_cache(got.cache, want.cache)
    step = ids[:, :1]
    torch.testing.assert_close(_eager(run, step, cache=got.cache).logits,
                               _eager(model, step, cache=want.cache).logits,
                               atol=TOL, rtol=TOL)
    _same_cache(got.cache, want.cache)


def test_users_own_registration_wins():
    class MyCache(transformers.DynamicCache):
        pass

    torch.utils._pytree.register_pytree_node(
        MyCache, lambda c: ([], None), lambda leaves, ctx: MyCache())
    caches.register()
    assert not caches.is_cache(MyCache())
    assert caches.is_cache(transformers.DynamicCache())


class _EmptyCat(torch.nn.Module):
    """Concatenates onto an empty tensor, as DynamicCache's first update does."""

    def __init__(self, use: str) -> None:
        super().__init__()
        self.use = use

    def forward(self, x):
        empty = torch.tensor([], dtype=x.dtype)
        return torch.cat([empty, x]) * 2 if self.use == "cat" else empty.sum() + x


def test_an_empty_constant_is_computed_as_pytorch_does():
    """DynamicCache's first update concatenates onto torch.tensor([]): cat drops it, and
    any other use computes as PyTorch does (the sum of nothing is 0: tests/test_empty.py)."""
    x = torch.randn(5)
    for use in ("cat", "sum"):
        module = _EmptyCat(use)
        compiled = kernelwright.compile(module, [x], progress=None)
        torch.testing.assert_close(compiled(x), module(x))


def _mamba():
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=100, hidden_size=32, state_size=8,
                                      num_hidden_layers=2, expand=2, conv_kernel=4)
    return transformers.MambaForCausalLM(config).eval()


def _mamba2():
    torch.manual_seed(0)
    config = transformers.Mamba2Config(vocab_size=100, hidden_size=64, state_size=8,
                                       num_hidden_layers=2, expand=2, conv_kernel=4,
                                       num_heads=8, head_dim=16, n_groups=1, chunk_size=8)
    return transformers.Mamba2ForCausalLM(config).eval()


def _same_states(got, want) -> None:
    """Two caches of linear attention (Mamba) layers hold the same states and counts."""
    assert type(got) is type(want) and len(got.layers) == len(want.layers)
    for a, b in zip(got.layers, want.layers):
        assert type(a) is type(b) and a.has_previous_state == b.has_previous_state
        for name in ("conv_states", "recurrent_states"):
            x, y = getattr(a, name), getattr(b, name)
            assert list(x) == list(y)
            for i in x:
                assert x[i].shape == y[i].shape and x[i].dtype == y[i].dtype
                torch.testing.assert_close(x[i], y[i], atol=TOL, rtol=TOL)
        assert int(a.get_seq_length()) == int(b.get_seq_length())


@pytest.mark.parametrize("make", [_mamba, _mamba2], ids=["mamba", "mamba2"])
def test_state_space_cache_out_and_in(make):
    """Mamba's and Mamba2's cache (conv and recurrent states in dicts by state index) comes
    back with its structure; passed in, one compile decodes step after step, its states
    updated in place as eager's, and a saved plan keeps the dicts."""
    model = make()
    ids = _ids(model, 12)
    compiled = kernelwright.compile(model, [ids], progress=None)
    got, want = compiled(ids), _eager(model, ids)
    torch.testing.assert_close(got.logits, want.logits, atol=TOL, rtol=TOL)
    _same_states(got.cache, want.cache)
    spec = torch.utils._pytree.tree_structure(got)
    assert torch.utils._pytree.treespec_loads(torch.utils._pytree.treespec_dumps(spec)) == spec
    given, mine = copy.deepcopy(want.cache), copy.deepcopy(want.cache)
    conv = given.layers[0].conv_states[0]
    step = _ids(model, 1, seed=2)
    before = [None, None] if isinstance(model, transformers.MambaForCausalLM) else [None]
    decode = kernelwright.compile(model, [step, *before, given], progress=None)
    for _ in range(2):
        out = decode(step, *before, given)
        torch.testing.assert_close(out.logits, _eager(model, step, cache=mine).logits,
                                   atol=TOL, rtol=TOL)
        assert out.cache is given and given.layers[0].conv_states[0] is conv
        _same_states(given, mine)
    assert int(given.get_seq_length()) == 14
