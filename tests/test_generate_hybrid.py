"""Hybrid models (transformers' Jamba, Bamba, Falcon-H1 and Qwen3-Next: attention layers
beside linear attention layers, Falcon-H1's layers both) compiled, and run by
kernelwright.generate: one cache module holds the attention layers' keys and values and
the recurrent layers' convolution and SSM states; eager transformers' tokens from a
bounded set of plans."""

from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="hybrid models' tests need transformers (pip install -e '.[models]')")

import kernelwright  # noqa: E402
from kernelwright.decoding import _PLANS  # noqa: E402
from kernelwright.generate import attention_windows, compiled_plans, recurrent  # noqa: E402


def tiny(name: str, **extra) -> torch.nn.Module:
    """A two-layer model of `name` (an attention layer after a recurrent one; Falcon-H1's
    two layers both) with random weights large enough (initializer_range) that its greedy
    tokens vary."""
    torch.manual_seed(0)
    common = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                  num_key_value_heads=2, initializer_range=1.0, pad_token_id=0,
                  num_hidden_layers=2, **extra)
    mamba = dict(mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=8,
                 mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=8)
    if name == "jamba":
        config = transformers.JambaConfig(**common, attn_layer_period=2, attn_layer_offset=1,
                                          expert_layer_period=2, expert_layer_offset=1,
                                          num_experts=2, mamba_d_state=8, mamba_d_conv=4,
                                          mamba_expand=2)
        return transformers.JambaForCausalLM(config).eval()
    if name == "bamba":
        config = transformers.BambaConfig(**common, attn_layer_indices=[1], **mamba)
        return transformers.BambaForCausalLM(config).eval()
    if name == "falcon_h1":
        config = transformers.FalconH1Config(**common, mamba_d_ssm=64, head_dim=8, **mamba)
        return transformers.FalconH1ForCausalLM(config).eval()
    config = transformers.Qwen3NextConfig(
        **common, head_dim=8, linear_num_value_heads=2, linear_num_key_heads=1,
        linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
        num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
        shared_expert_intermediate_size=16, full_attention_interval=2)
    return transformers.Qwen3NextForCausalLM(config).eval()


def _prompt(n, batch=1, seed=1):
    return torch.randint(0, 100, (batch, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.slow
def test_qwen3_next_forward_matches_eager():
    """Qwen3-Next's gated delta rule (a loop over chunks writing each chunk's rows through
    index_put: a graph deeper than Python's recursion limit) compiles; eager's logits."""
    model = tiny("qwen3_next", use_cache=False)
    ids = _prompt(8)
    compiled = kernelwright.compile(model, [ids], progress=None)
    with torch.no_grad():
        want = model(ids).logits
    torch.testing.assert_close(compiled(ids).logits, want, atol=1e-4, rtol=1e-4)


def _eager(model, ids, new, **kwargs):
    return model.generate(ids, max_new_tokens=new, do_sample=False, eos_token_id=None,
                          pad_token_id=0, **kwargs)


def _plans(model):
    return next(iter(_PLANS[model].values()))


def test_layer_kinds():
    """Which layers keep states and which masks the attention layers take: a hybrid's by
    kind, "full_attention" always (Falcon-H1's layers of both read it); a kind generate
    does not run is a clear error."""
    def kinds(*names):
        return SimpleNamespace(layer_types=list(names), sliding_window=4)

    assert recurrent(kinds("linear_attention", "full_attention"))
    assert recurrent(kinds("hybrid")) and not recurrent(kinds("full_attention"))
    assert attention_windows(kinds("linear_attention", "conv")) == {}
    assert attention_windows(kinds("linear_attention", "full_attention")) == {
        "full_attention": None}
    assert attention_windows(kinds("hybrid", "hybrid")) == {"full_attention": None}
    assert attention_windows(kinds("linear_attention", "sliding_attention")) == {
        "full_attention": None, "sliding_attention": 4}
    with pytest.raises(ValueError, match="this model has hybrid_sliding layers"):
        attention_windows(kinds("hybrid_sliding", "full_attention"))


@pytest.fixture(scope="module", params=["jamba", "bamba", "falcon_h1"])
def model(request):
    return tiny(request.param)


@pytest.mark.slow
def test_greedy_tokens_from_a_bounded_set_of_plans(model):
    """Prompts of 1 to 20 tokens (2 rows) left-padded to their bucket (the padding keeps
    the recurrent states; the attention mask hides it): transformers' greedy tokens from
    the 16- and 32-token prompt plans and one decode plan, which a left-padded batch with
    its mask runs too; a second round compiles nothing."""
    for n in (6, 1, 20):
        ids = _prompt(n, batch=2, seed=n)
        got = kernelwright.generate(model, ids, max_new_tokens=9, eos_token_id=[],
                                    progress=None)
        assert torch.equal(got, _eager(model, ids, 9)), n
        assert len(set(got[0, n:].tolist())) > 2  # tokens that vary: a test that can fail
    plans = _plans(model)
    assert plans.pads_keep_state()
    assert sorted(map(str, plans.plans)) == ["('prompt', 16)", "('prompt', 32)", "1"]
    counted = compiled_plans(model)
    ids = torch.tensor([[0, 0, 0, 0, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14]])
    mask = (ids != 0).long()
    got = kernelwright.generate(model, ids, attention_mask=mask, max_new_tokens=8,
                                eos_token_id=[], progress=None)
    assert torch.equal(got, _eager(model, ids, 8, attention_mask=mask))
    assert torch.equal(got[0, 7:], _eager(model, ids[:1, 4:], 8)[0, 3:])
    kernelwright.generate(model, _prompt(17, batch=2), max_new_tokens=3, progress=None)
    assert compiled_plans(model) == counted == 3


@pytest.mark.slow
def test_beam_search_moves_keys_values_and_states():
    """Falcon-H1 (each layer attention and Mamba2): beam search's reorder plan moves the
    keys, values and both states after their beams; transformers' sequences. A
    max_length that leaves no room for the prompt's bucket runs the prompt unpadded."""
    model = tiny("falcon_h1")
    ids = _prompt(5, seed=3)
    got = kernelwright.generate(model, ids, max_new_tokens=6, num_beams=3,
                                num_return_sequences=2, eos_token_id=[], progress=None)
    assert torch.equal(got, _eager(model, ids, 6, num_beams=3, num_return_sequences=2))
    got = kernelwright.generate(model, ids, max_length=12, eos_token_id=[], progress=None)
    assert torch.equal(got, _eager(model, ids, 7))
    assert ("prompt", 5) in _PLANS[model][(1, 12)].plans


@pytest.mark.slow
def test_qwen3_next_generates():
    """Qwen3-Next's gated delta-rule layers keep their states through the same cache:
    transformers' greedy tokens from one prompt plan and one decode plan."""
    model = tiny("qwen3_next")
    for n in (6, 1):
        ids = _prompt(n, batch=2, seed=n)
        got = kernelwright.generate(model, ids, max_new_tokens=8, eos_token_id=[],
                                    progress=None)
        assert torch.equal(got, _eager(model, ids, 8)), n
    assert compiled_plans(model) == 2
