"""kernelwright.generate with state-space models (transformers' Mamba and Mamba2): the
prompt's plan leaves each layer's convolution and SSM states in the plans' buffers, one
decode plan updates them per token; eager transformers' tokens from a bounded set of
plans (a plan per prompt bucket, left-padded where the padding provably keeps the states,
else per prompt length, and one decode plan)."""

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="generate's tests need transformers (pip install -e '.[models]')")

import kernelwright  # noqa: E402
from kernelwright.decoding import _PLANS  # noqa: E402
from kernelwright.generate import compiled_plans  # noqa: E402


def tiny(name: str, **extra) -> torch.nn.Module:
    """A two-layer model of `name` with random weights large enough (initializer_range)
    that its greedy tokens vary."""
    torch.manual_seed(0)
    if name == "mamba":
        config = transformers.MambaConfig(vocab_size=100, hidden_size=32, state_size=8,
                                          num_hidden_layers=2, expand=2, conv_kernel=4,
                                          initializer_range=1.0, **extra)
        return transformers.MambaForCausalLM(config).eval()
    config = transformers.Mamba2Config(vocab_size=100, hidden_size=64, state_size=8,
                                       num_hidden_layers=2, expand=2, conv_kernel=4,
                                       num_heads=8, head_dim=16, n_groups=1, chunk_size=8,
                                       initializer_range=1.0, **extra)
    return transformers.Mamba2ForCausalLM(config).eval()


@pytest.fixture(scope="module", params=["mamba", "mamba2"])
def model(request):
    return tiny(request.param)


def _eager(model, ids, new, **kwargs):
    return model.generate(ids, max_new_tokens=new, do_sample=False, eos_token_id=None,
                          pad_token_id=0, **kwargs)


def _prompt(n, batch=1, seed=1):
    return torch.randint(0, 100, (batch, n), generator=torch.Generator().manual_seed(seed))


def _plans(model):
    return next(iter(_PLANS[model].values()))


def test_greedy_tokens_from_a_bounded_set_of_plans(model):
    """Prompts of 1 to 20 tokens (2 rows): transformers' greedy tokens; the padding keeps
    the states, so prompts share the 16- and 32-token buckets and one decode plan, and a
    second round compiles nothing."""
    for n in (6, 1, 13, 20):
        ids = _prompt(n, batch=2, seed=n)
        got = kernelwright.generate(model, ids, max_new_tokens=9, eos_token_id=[],
                                    progress=None)
        assert torch.equal(got, _eager(model, ids, 9)), n
        assert len(set(got[0, n:].tolist())) > 2  # tokens that vary: a test that can fail
    plans = _plans(model)
    assert plans.pads_keep_state()
    assert sorted(map(str, plans.plans)) == ["('prompt', 16)", "('prompt', 32)", "1"]
    counted = compiled_plans(model)
    for n in (3, 17):
        kernelwright.generate(model, _prompt(n, batch=2), max_new_tokens=3, progress=None)
    assert compiled_plans(model) == counted == 3


def test_a_left_padded_batch_gives_transformers_tokens(model):
    """Prompts of 7, 3 and 5 tokens left-padded with their mask: transformers' tokens with
    that mask (its Mamba zeroes the padding's inputs), each row's those of its prompt."""
    gen = torch.Generator().manual_seed(4)
    rows = [torch.randint(1, 100, (n,), generator=gen) for n in (7, 3, 5)]
    ids, mask = torch.zeros(3, 7, dtype=torch.long), torch.zeros(3, 7, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, 7 - len(r):], mask[i, 7 - len(r):] = r, 1
    got = kernelwright.generate(model, ids, attention_mask=mask, max_new_tokens=8,
                                eos_token_id=[], progress=None)
    assert torch.equal(got, _eager(model, ids, 8, attention_mask=mask))
    for i, r in enumerate(rows):
        assert torch.equal(got[i, 7:], _eager(model, r[None], 8)[0, len(r):]), i


def test_beam_search_and_sampling(model):
    """Beam search moves the states' rows after their beams (decoding.reorder_cache):
    transformers' sequences; sampling is seeded."""
    ids = _prompt(5, seed=3)
    got = kernelwright.generate(model, ids, max_new_tokens=6, num_beams=3,
                                num_return_sequences=2, eos_token_id=[], progress=None)
    want = _eager(model, ids, 6, num_beams=3, num_return_sequences=2)
    assert torch.equal(got, want)
    runs = [kernelwright.generate(model, ids, max_new_tokens=6, do_sample=True, top_k=20,
                                  generator=torch.Generator().manual_seed(9), progress=None)
            for _ in range(2)]
    assert torch.equal(*runs)


def test_padding_that_changes_the_states_runs_each_prompt_length():
    """An in_proj bias reaches the padding's convolution inputs: the probe sees the states
    change, so each prompt runs at its own length (a plan per length), still eager's
    tokens, padded batches included."""
    model = tiny("mamba", use_bias=True)
    with torch.no_grad():
        for layer in model.backbone.layers:
            layer.mixer.in_proj.bias.normal_(generator=torch.Generator().manual_seed(5))
    for n in (6, 4):
        ids = _prompt(n, batch=2, seed=n)
        got = kernelwright.generate(model, ids, max_new_tokens=5, eos_token_id=[],
                                    progress=None)
        assert torch.equal(got, _eager(model, ids, 5)), n
    plans = _plans(model)
    assert not plans.pads_keep_state()
    assert sorted(map(str, plans.plans)) == ["('prompt', 4)", "('prompt', 6)", "1"]
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    mask = (ids != 0).long()
    got = kernelwright.generate(model, ids, attention_mask=mask, max_new_tokens=5,
                                eos_token_id=[], progress=None)
    assert torch.equal(got, _eager(model, ids, 5, attention_mask=mask))

