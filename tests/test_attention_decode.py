"""Attention of few queries (kernels/attention_decode.py) against torch SDPA: one kernel,
or two where a long cache over few heads has its keys split (decode_splits), with GQA,
float, boolean and causal masks and half K/V."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check

import kernelwright
from kernelwright.check.tolerance import Tolerance
from kernelwright.kernels import decode_splits
from kernelwright.kernels.attention_decode import DECODE_MAX_L, decode_config, decode_space
from kernelwright.lower import attention as attention_ops
from kernelwright.options import Waves


def _templates(compiled) -> list[str]:
    return [k.key.split()[0] for k in compiled.plan.kernels]


def _check(q, k, v, mask=None, **kw):
    """Compiled against eager; returns the plan's templates."""
    if mask is None:
        c = check(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw)), q, k, v)
    else:
        c = check(Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                         **kw)), q, k, v, mask)
    return _templates(c)


def _suffix_mask(lq: int, s: int, seen: int) -> torch.Tensor:
    """A KV cache's float mask: slots from `seen` on hidden (-inf)."""
    mask = torch.zeros(1, 1, lq, s)
    mask[..., seen:] = float("-inf")
    return mask


def test_splits_follow_the_keys_heads_and_waves():
    """One span while the batch * heads cover the device or the keys are short; else
    spans of at least DECODE_SPAN keys, up to one workgroup per slot."""
    waves = Waves(264, 132)
    assert decode_splits(9, 544, waves) == 1
    assert decode_splits(9, 2048, waves) == 4
    assert decode_splits(9, 4096, waves) == 8
    assert decode_splits(9, 1 << 20, waves) == 15  # ceil(132 / 9) workgroups per head
    assert decode_splits(132, 1 << 20, waves) == 1
    assert decode_splits(2, 4096, Waves(8, 4)) == 2


def test_the_decode_template_takes_few_queries():
    """Up to DECODE_MAX_L queries, and tiles within registers and workgroup memory."""
    assert decode_config(DECODE_MAX_L, 64, 64) and not decode_config(DECODE_MAX_L + 1, 64, 64)
    assert decode_config(8, 1024, 64) is None  # the staged queries exceed workgroup memory
    assert decode_config(8, 64, 512) is None  # 8 x 8 outputs an invocation
    assert attention_ops.fused(9, 1, 544, 64, 64) and attention_ops.fused(9, 8, 544, 64, 64)
    assert not attention_ops.fused(9, 9, 544, 64, 64)  # the tiled kernel or decomposed
    assert [k["WG"] for k in decode_space(1, 64, 64)] == [128, 256, 64, 32]


@pytest.mark.parametrize("e", [64, 80])
@pytest.mark.parametrize("s", [17, 544, 4096])
@pytest.mark.parametrize("lq", [1, 3])
def test_against_sdpa(lq, s, e):
    """One kernel, or two (the spans' parts combined) for the long cache."""
    torch.manual_seed(lq * s + e)
    q, k, v = torch.randn(1, 2, lq, e), torch.randn(1, 2, s, e), torch.randn(1, 2, s, e)
    kinds = _check(q, k, v)
    assert kinds == (["attention_decode", "elementwise"] if s == 4096
                     else ["attention_decode"]), kinds


@pytest.mark.parametrize("s", [544, 4096])
def test_kv_cache_suffix_mask_and_gqa(s):
    """SmolLM2's decode: 9 query heads over 3 KV heads (enable_gqa), the slots past the
    position hidden by a float mask; at 4096 keys whole spans are masked."""
    torch.manual_seed(s)
    q, k, v = torch.randn(1, 9, 1, 64), torch.randn(1, 3, s, 64), torch.randn(1, 3, s, 64)
    kinds = _check(q, k, v, _suffix_mask(1, s, 300), enable_gqa=True)
    assert kinds[0] == "attention_decode" and len(kinds) == (2 if s == 4096 else 1), kinds


def test_repeated_kv_views():
    """transformers' repeat_kv: expand and reshape of the KV heads, read as views."""
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 6, 2, 16), torch.randn(1, 2, 40, 16), torch.randn(1, 2, 40, 16)

    def attend(q, k, v):
        k, v = (x[:, :, None].expand(1, 2, 3, 40, 16).reshape(1, 6, 40, 16) for x in (k, v))
        return F.scaled_dot_product_attention(q, k, v)

    c = check(Fn(attend), q, k, v)
    assert _templates(c) == ["attention_decode"]


def test_boolean_mask_and_a_fully_masked_query():
    """A boolean mask (a query that sees no key gives zeros, as PyTorch), one kernel and
    split."""
    torch.manual_seed(2)
    for s in (33, 2048):
        q, k, v = torch.randn(1, 2, 3, 16), torch.randn(1, 2, s, 16), torch.randn(1, 2, s, 16)
        mask = torch.rand(1, 1, 3, s) > 0.3
        mask[0, 0, 1] = False
        kinds = _check(q, k, v, mask)
        assert kinds[0] == "attention_decode" and len(kinds) == (1 if s == 33 else 2), kinds


def test_causal_with_fewer_queries_than_keys():
    """PyTorch's causal mask is top-left aligned: query i sees keys 0..i (KEND)."""
    torch.manual_seed(3)
    q, k, v = torch.randn(2, 2, 3, 24), torch.randn(2, 2, 17, 24), torch.randn(2, 2, 17, 24)
    assert _check(q, k, v, is_causal=True, scale=0.3) == ["attention_decode"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_cache(dtype):
    """Half q, k, v (a half KV cache) read through the loaders, computed in f32."""
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 3, 1, 64).to(dtype), torch.randn(1, 3, 100, 64).to(dtype),
               torch.randn(1, 3, 100, 64).to(dtype))
    mask = _suffix_mask(1, 100, 70).to(dtype)
    module = Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
    compiled = kernelwright.compile(module, [q, k, v, mask])
    got = compiled(q, k, v, mask, poison=True)
    want = module(*(x.float() for x in (q, k, v, mask)))
    atol, rtol = Tolerance().for_dtype(dtype)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want, atol=atol, rtol=rtol)
    assert _templates(compiled)[0] == "attention_decode"


@pytest.mark.slow
def test_every_setting_of_the_decode_space():
    """Each workgroup size the tuner may pick: one and several key slices of a block,
    partial blocks, split and not."""
    torch.manual_seed(5)
    for s in (45, 1100):
        q, k, v = torch.randn(1, 2, 3, 20), torch.randn(1, 2, s, 20), torch.randn(1, 2, s, 72)
        for knobs in decode_space(3, 20, 72):
            c = check(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)), q, k, v,
                      choose=lambda r, k=knobs: k if r.kind == "attention_decode" else None)
            assert c.plan.kernels[0].knobs == knobs
