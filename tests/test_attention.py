"""Attention against PyTorch eager: F.scaled_dot_product_attention (plain, causal,
float and boolean masks, custom scale, grouped-query) through the fused attention
template and through the decomposition, and nn.MultiheadAttention in its forms."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check
from torch import nn

from kernelwright.kernels import attention_config
from kernelwright.lower import attention as attention_ops


@pytest.fixture(params=["fused", "decomposed"])
def path(request, monkeypatch):
    monkeypatch.setattr(attention_ops, "FUSED", request.param == "fused")
    return request.param


def _kinds(compiled):
    return [k.name for k in compiled.plan.kernels]


def _assert_path(compiled, path):
    fused = any("attention" in k for k in _kinds(compiled))
    assert fused == (path == "fused"), _kinds(compiled)


def _qkv(b=2, h=3, lq=5, s=6, e=4, ev=None):
    return (torch.randn(b, h, lq, e), torch.randn(b, h, s, e), torch.randn(b, h, s, ev or e))


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [dict(), dict(lq=1, s=1), dict(lq=19, s=23, e=8, ev=5),
                                   dict(lq=7, s=3), dict(b=1, h=1, lq=40, s=40, e=16),
                                   dict(b=1, h=1, lq=18, s=9, e=128, ev=33),
                                   # several query blocks and key blocks, a partial last one
                                   dict(b=1, h=2, lq=130, s=97, e=64, ev=80)])
def test_sdpa(path, causal, shape):
    q, k, v = _qkv(**shape)
    c = check(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
              q, k, v)
    _assert_path(c, path)


def test_causal_decomposition_bounds_the_product_by_v(monkeypatch):
    """Decomposed, causal attention's probabilities are said to be zero above the
    diagonal, so the product by V walks each tile's keys only up to its last query
    (linalg.k_range: a `khi` bound), as the scores' product skips tiles past it; with
    more keys than queries (the mask top-left aligned) and a partial last tile."""
    monkeypatch.setattr(attention_ops, "FUSED", False)
    for lq, s in ((150, 150), (70, 130)):
        q, k, v = _qkv(b=1, h=2, lq=lq, s=s, e=16)
        c = check(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
                  q, k, v)
        products = [k.source for k in c.plan.kernels if "matmul" in k.name]
        assert len(products) == 2 and "let khi = " in products[1], _kinds(c)
        # nothing reads the scores past the diagonal: their tiles store nothing (the
        # buffers are poisoned, so a reader of an unwritten score would fail the check)
        assert "{ return; }" in products[0], products[0]


def test_banded_scores_are_stored_whole_where_something_reads_past_the_band():
    """Scores masked by a band written in the module (aranges compared), softmax-like:
    with only masked readers (the rows' max, the probabilities by V) the tiles past the
    diagonal store nothing (ir.read_only_in_band); returned, or read unmasked by the
    max, they are stored whole (-inf past the diagonal)."""
    def attend(q, k, v, masked_max):
        i = torch.arange(q.shape[-2]).unsqueeze(-1)
        j = torch.arange(k.shape[-2])
        x = torch.where(j <= i, 0.25 * q @ k.transpose(-1, -2), float("-inf"))
        m = (torch.where(j <= i, x, float("-inf")) if masked_max else x).amax(-1, True)
        return torch.where(j <= i, (x - m).exp(), 0.0) @ v, x

    q, k, v = _qkv(b=1, h=2, lq=150, s=150, e=16)
    for name, f, skips in (("masked", lambda q, k, v: attend(q, k, v, True)[0], True),
                           ("returned", lambda q, k, v: attend(q, k, v, True), False),
                           ("read unmasked", lambda q, k, v: attend(q, k, v, False)[0],
                            False)):
        c = check(Fn(f), q, k, v)
        first = next(k for k in c.plan.kernels if "matmul" in k.name)
        assert "let khi = " in first.source, c.plan.summary()
        assert ("{ return; }" in first.source) == skips, (name, c.plan.summary())


@pytest.mark.slow
def test_sdpa_scale_and_3d(path):
    q, k, v = torch.randn(4, 9, 6), torch.randn(4, 11, 6), torch.randn(4, 11, 3)
    c = check(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.7)), q, k, v)
    _assert_path(c, path)


@pytest.mark.slow
@pytest.mark.parametrize("mask_shape", [(5, 6), (2, 1, 5, 6), (2, 3, 5, 6), (1, 6)])
def test_sdpa_float_mask(path, mask_shape):
    q, k, v = _qkv()
    m = torch.randn(*mask_shape)
    check(Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
          q, k, v, m)


def test_sdpa_bool_mask_with_fully_masked_rows(path):
    q, k, v = _qkv(lq=7, s=9)
    m = torch.rand(7, 9) > 0.4
    m[2] = False  # a row with no visible key: PyTorch gives zeros
    m[4] = True
    c = check(Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
              q, k, v, m)
    _assert_path(c, path)


def test_sdpa_minus_inf_float_mask(path):
    q, k, v = _qkv(lq=4, s=5)
    m = torch.zeros(4, 5)
    m[1] = float("-inf")
    m[3, :2] = float("-inf")
    check(Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
          q, k, v, m)


def test_sdpa_grouped_query(path):
    q, k, v = torch.randn(2, 6, 5, 4), torch.randn(2, 2, 7, 4), torch.randn(2, 2, 7, 4)
    check(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)), q, k, v)


@pytest.mark.slow
def test_sdpa_transposed_and_computed_operands_fuse(path):
    """q, k, v as views of one projection (the transformer layout), a mask built from a
    lengths vector: the loaders read them all in place."""
    x, w = torch.randn(2, 7, 24), torch.randn(24, 24)

    def f(x, w):
        qkv = (x @ w).view(2, 7, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(qkv[0], qkv[1] * 2.0, torch.tanh(qkv[2]))
    c = check(Fn(f), x, w)
    _assert_path(c, path)
    if path == "fused":
        assert len(c.plan.kernels) == 2, _kinds(c)  # the projection, then attention


def test_sdpa_epilogue_fuses(path):
    q, k, v = _qkv()
    c = check(Fn(lambda q, k, v: torch.relu(F.scaled_dot_product_attention(q, k, v)) * 3 + 1),
              q, k, v)
    if path == "fused":
        assert len(c.plan.kernels) == 1, _kinds(c)


def test_the_path_is_chosen_by_the_size_of_the_scores(monkeypatch):
    """Unforced, attention of more than 8 queries decomposes unless its scores would
    take MAX_SCORES_BYTES or more; heads too wide for the kernel's tiles decompose even
    when fusing is forced."""
    monkeypatch.setattr(attention_ops, "FUSED", None)
    rows = attention_ops.MAX_SCORES_BYTES // 4 // 1024  # batch x heads x L with S = 1024
    assert not attention_ops.fused(rows // 1024 - 1, 1024, 1024, 64, 64)
    assert attention_ops.fused(rows // 1024, 1024, 1024, 64, 64)
    assert not attention_ops.fused(1, 1 << 20, 1 << 20, 4100, 64)
    monkeypatch.setattr(attention_ops, "FUSED", True)
    assert attention_ops.fused(1, 5, 6, 4, 4) and not attention_ops.fused(1, 5, 6, 4100, 4)
    monkeypatch.setattr(attention_ops, "FUSED", None)
    q, k, v = _qkv(lq=9)  # more queries than the decode kernel's (test_attention_decode)
    c = check(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)), q, k, v)
    _assert_path(c, "decomposed")
    monkeypatch.setattr(attention_ops, "MAX_SCORES_BYTES", 2 * 3 * 9 * 6 * 4)
    c = check(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)), q, k, v)
    _assert_path(c, "fused")


def test_wide_heads_fall_back_to_decomposition():
    assert attention_config(64, 64) is not None
    assert attention_config(4096, 4096) is None
    q, k, v = torch.randn(1, 2, 3, 4100), torch.randn(1, 2, 4, 4100), torch.randn(1, 2, 4, 3)
    c = check(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)), q, k, v)
    _assert_path(c, "decomposed")


def test_sdpa_dropout_is_an_error():
    import kernelwright

    q, k, v = _qkv()
    with pytest.raises(kernelwright.CompileError, match="dropout"):
        kernelwright.compile(Fn(lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, dropout_p=0.5)), [q, k, v])


class MHA(nn.Module):
    def __init__(self, need_weights, batch_first, kdim=None, average=True, mask=None):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=batch_first, kdim=kdim, vdim=kdim)
        self.need_weights, self.average, self.mask = need_weights, average, mask

    def forward(self, q, k, v):
        out, w = self.attn(q, k, v, need_weights=self.need_weights, attn_mask=self.mask,
                           average_attn_weights=self.average)
        return (out, w) if self.need_weights else out


@pytest.mark.slow
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention(path, batch_first, need_weights):
    m = MHA(need_weights, batch_first)
    shape_q, shape_kv = ((2, 5, 8), (2, 6, 8)) if batch_first else ((5, 2, 8), (6, 2, 8))
    kv = torch.randn(*shape_kv)
    c = check(m, torch.randn(*shape_q), kv, kv)
    if not need_weights:
        _assert_path(c, path)


@pytest.mark.slow
def test_multihead_attention_self_with_mask_and_kdim(path):
    causal = torch.triu(torch.full((5, 5), float("-inf")), diagonal=1)
    x = torch.randn(2, 5, 8)
    check(MHA(False, True, mask=causal), x, x, x)
    check(MHA(True, True, average=False, mask=causal), x, x, x)
    check(MHA(False, True, kdim=6), x, torch.randn(2, 4, 6), torch.randn(2, 4, 6))


@pytest.mark.slow
def test_transformer_encoder_layer_reaches_attention_whole(path):
    """The layer's attention arrives as one SDPA op, so either path can take it."""
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=24, dropout=0.0, batch_first=True)
    c = check(layer, torch.randn(2, 5, 16))
    _assert_path(c, path)


@pytest.mark.slow
def test_every_setting_of_the_attention_space(monkeypatch):
    """Each setting the tuner and the search may pick (kernels.attention_space) is
    correct: rows per invocation 4 and 8, one and two keys per invocation, the causal
    bound and a partial last block of queries and of keys."""
    from kernelwright.kernels import attention_space

    monkeypatch.setattr(attention_ops, "FUSED", True)
    q, k, v = _qkv(b=1, h=2, lq=70, s=45, e=20, ev=24)
    space = attention_space(20, 24)
    assert len(space) >= 5 and {4, 8} <= {attention_config(20, 24, s)["RM"] for s in space}
    for knobs in space:
        c = check(Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                    is_causal=True)),
                  q, k, v, choose=lambda r, k=knobs: k if r.kind == "attention" else None)
        assert [k.knobs for k in c.plan.kernels] == [knobs]
