"""Hybrid models (transformers' Jamba, Bamba, Falcon-H1 and Qwen3-Next: attention layers
beside linear attention layers, Falcon-H1's layers both) compiled, and run by
kernelwright.generate: one cache module holds the attention layers' keys and values and
the recurrent layers' convolution and SSM states; eager transformers' tokens from a
bounded set of plans."""

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="hybrid models' tests need transformers (pip install -e '.[models]')")

import kernelwright  # noqa: E402


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


def test_qwen3_next_forward_matches_eager():
    """Qwen3-Next's gated delta rule (a loop over chunks writing each chunk's rows through
    index_put: a graph deeper than Python's recursion limit) compiles; eager's logits."""
    model = tiny("qwen3_next", use_cache=False)
    ids = _prompt(8)
    compiled = kernelwright.compile(model, [ids], progress=None)
    with torch.no_grad():
        want = model(ids).logits
    torch.testing.assert_close(compiled(ids).logits, want, atol=1e-4, rtol=1e-4)
