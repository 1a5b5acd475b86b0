"""kernelwright.generate: transformers causal LMs decoding on kernelwright's kernels with a
static KV cache on the GPU, giving eager transformers' greedy tokens, with a bounded
number of compiled plans (one decode step, one per prompt bucket)."""

import gc
import importlib
import importlib.util
import json
import sys
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="generate's tests need transformers (pip install -e '.[models]')")

import kernelwright  # noqa: E402
from kernelwright.codegen.codegen import used_bindings  # noqa: E402
from kernelwright.generate import compiled_plans, filter_logits  # noqa: E402

generation = importlib.import_module("kernelwright.generate")  # the module, not the function


def tiny(name: str) -> torch.nn.Module:
    """A randomly initialised two-layer model of family `name` (no download; Gemma 3 has
    three)."""
    torch.manual_seed(0)
    # layers mixing full and sliding attention, with a 4-token window the tests pass
    if name == "gemma2":  # soft-capped attention scores and logits (tanh)
        config = transformers.Gemma2Config(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, vocab_size=128, max_position_embeddings=256,
            sliding_window=4, layer_types=["sliding_attention", "full_attention"])
        return transformers.Gemma2ForCausalLM(config).eval()
    if name == "gemma3":  # its sliding layers' own rotary base
        config = transformers.Gemma3TextConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, vocab_size=128, max_position_embeddings=256,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"])
        return transformers.Gemma3ForCausalLM(config).eval()
    if name == "qwen2_mixed":  # layers from max_window_layers on slide; weights large
        config = transformers.Qwen2Config(  # enough that the window changes its tokens
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=160, max_position_embeddings=256,
            use_sliding_window=True, sliding_window=4, max_window_layers=1,
            initializer_range=0.1)
        return transformers.Qwen2ForCausalLM(config).eval()
    if name == "llama":
        config = transformers.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, max_position_embeddings=256)
        return transformers.LlamaForCausalLM(config).eval()
    if name == "qwen2":
        config = transformers.Qwen2Config(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=160, max_position_embeddings=256)
        return transformers.Qwen2ForCausalLM(config).eval()
    if name == "mistral":  # every layer slides: 18 tokens pass its 8-token window
        config = transformers.MistralConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, max_position_embeddings=256,
            sliding_window=8)
        return transformers.MistralForCausalLM(config).eval()
    if name in MOE:
        return tiny_moe(name)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=200,
                                     n_positions=256, bos_token_id=0, eos_token_id=199)
    return transformers.GPT2LMHeadModel(config).eval()


# Mixtures of experts: transformers routes each token through its top-k experts in
# `integrations/moe.py` ("grouped_mm" by default: tokens sorted by expert, histc counts,
# a grouped product: lower/linalg.grouped_mm). Qwen2-MoE adds a gated shared expert,
# OLMoE clips q, k and v; norm_topk_prob both ways.
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe")


def tiny_moe(name: str) -> torch.nn.Module:
    """A randomly initialised two-layer mixture of 4 experts, 2 a token, of family `name`."""
    base = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=128, max_position_embeddings=256,
                num_experts_per_tok=2)
    if name == "mixtral":
        config = transformers.MixtralConfig(**base, num_local_experts=4)
        return transformers.MixtralForCausalLM(config).eval()
    if name == "qwen2_moe":
        config = transformers.Qwen2MoeConfig(**base, num_experts=4, moe_intermediate_size=32,
                                             shared_expert_intermediate_size=48)
        return transformers.Qwen2MoeForCausalLM(config).eval()
    if name == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(**base, num_experts=4, moe_intermediate_size=32,
                                             norm_topk_prob=True)
        return transformers.Qwen3MoeForCausalLM(config).eval()
    config = transformers.OlmoeConfig(**base, num_experts=4, clip_qkv=8.0, pad_token_id=0,
                                      eos_token_id=127)
    return transformers.OlmoeForCausalLM(config).eval()


@pytest.fixture(scope="module")
def llama():
    return tiny("llama")


def eager_greedy(model, ids, new):
    """Greedy tokens of the model run without a cache: the argmax of a full forward."""
    with torch.no_grad():
        for _ in range(new):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    return ids


@pytest.mark.parametrize("name,batch", [("llama", 1), ("gpt2", 2), ("qwen2", 1),
                                        ("mistral", 1), ("gemma2", 1), ("gemma3", 1),
                                        ("qwen2_mixed", 1)])
def test_greedy_tokens_are_eager_transformers(name, batch, llama):
    """Eager transformers' greedy tokens (its default cache, its static cache, no cache);
    18 tokens pass the sliding windows (Mistral's 8, the mixed models' 4)."""
    model = llama if name == "llama" else tiny(name)
    before = compiled_plans(model)
    ids = torch.randint(0, 100, (batch, 6), generator=torch.Generator().manual_seed(1))
    got = kernelwright.generate(model, ids, max_new_tokens=12, eos_token_id=[])
    want = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    assert torch.equal(got, want)
    static = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None,
                            pad_token_id=0, cache_implementation="static")
    assert torch.equal(got, static)
    assert torch.equal(got, eager_greedy(model, ids, 12))
    assert compiled_plans(model) <= before + 2  # the prompt's bucket and the decode step
    if model is not llama:  # the plans kept for a model do not keep it alive
        gone = weakref.ref(model)
        del model
        gc.collect()
        assert gone() is None


class Logits(torch.nn.Module):
    """A causal LM's logits of a forward without a cache."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids, use_cache=False).logits


@pytest.mark.parametrize("name,experts", [("mixtral", "grouped_mm")] + [
    pytest.param(n, e, marks=pytest.mark.slow)
    for n, e in [("qwen2_moe", "grouped_mm"), ("qwen3_moe", "grouped_mm"),
                 ("olmoe", "grouped_mm"), ("mixtral", "batched_mm")]])
def test_mixtures_of_experts_compile_and_generate_eager_tokens(name, experts):
    model = tiny(name)
    model.config._experts_implementation = experts  # the one the model is configured with
    ids = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
    got = kernelwright.compile(Logits(model), [ids], progress=None)(ids)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    got = kernelwright.generate(model, ids, max_new_tokens=8, eos_token_id=[])
    want = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    assert torch.equal(got, want)
    assert model.config._experts_implementation == experts


@pytest.mark.slow
def test_bfloat16_mixture_of_experts_generates_eager_tokens():
    # bf16 experts trace to aten._grouped_mm (its meta refuses float32 ones: the
    # fallback op then), the stacked weights read packed through the gather
    model = tiny("mixtral").to(torch.bfloat16)
    ids = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(1))
    got = kernelwright.generate(model, ids, max_new_tokens=8, eos_token_id=[])
    want = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    assert torch.equal(got, want)


def test_bfloat16_greedy_tokens_are_eager_transformers():
    """A bf16 model, its KV caches packed bf16 and stored by each decode step's attention
    (schedule.joining_puts: the new slot read as rounded into the cache, as eager reads
    its bf16 cache): eager's greedy tokens."""
    model = tiny("llama").to(torch.bfloat16)
    ids = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(2))
    got = kernelwright.generate(model, ids, max_new_tokens=14, eos_token_id=[])
    want = model.generate(ids, max_new_tokens=14, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    assert torch.equal(got, want)


def test_prompt_lengths_share_a_bounded_set_of_plans(llama):
    """Prompts of 3 to 12 tokens share the 16-token bucket, 20 the 32-token one; all
    share one decode plan; a second round compiles nothing, nor do attention masks (the
    left padding is an input of the plans)."""
    before = compiled_plans(llama)
    for n in (3, 5, 9, 12, 20):
        ids = torch.randint(0, 128, (1, n), generator=torch.Generator().manual_seed(n))
        got = kernelwright.generate(llama, ids, max_new_tokens=8, eos_token_id=[])
        assert torch.equal(got, eager_greedy(llama, ids, 8)), n
    counted = compiled_plans(llama)
    assert counted <= 3 and counted - before <= 1  # at most the new 32-token bucket
    for n in (4, 17):
        kernelwright.generate(llama, torch.zeros(1, n, dtype=torch.long), max_new_tokens=3)
    assert compiled_plans(llama) == counted == kernelwright.generate.compiled_plans(llama)
    for pad in (0, 2, 6):  # 4 tokens left-padded to 4, 6 and 10
        tokens = torch.randint(0, 128, (1, 4), generator=torch.Generator().manual_seed(pad))
        ids, mask = left_padded([tokens[0]], width=4 + pad)
        got = kernelwright.generate(llama, ids, attention_mask=mask, max_new_tokens=8,
                                    eos_token_id=[])
        assert torch.equal(got[:, pad:], eager_greedy(llama, tokens, 8)), pad
    assert compiled_plans(llama) == counted


def test_generation_stops_at_the_end_token(llama):
    ids = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(7))
    free = kernelwright.generate(llama, ids, max_new_tokens=8, eos_token_id=[])[0, 5:]
    # the first new token that is none of those before it ends the sequence there
    stop = next(j for j in range(1, 8) if int(free[j]) not in free[:j].tolist())
    got = kernelwright.generate(llama, ids, max_new_tokens=8, eos_token_id=int(free[stop]))
    assert torch.equal(got[0, 5:], free[:stop + 1])
    want = llama.generate(ids, max_new_tokens=8, do_sample=False,
                          eos_token_id=int(free[stop]), pad_token_id=0)
    assert torch.equal(got, want)


@pytest.mark.parametrize("name,beams,length_penalty,early_stopping,padded", [
    ("llama", 2, 1.0, False, False), ("llama", 3, 0.5, True, True),
    ("llama", 4, 2.0, "never", False), ("gpt2", 4, -1.0, False, False)])
def test_beam_search_gives_transformers_sequences(name, beams, length_penalty, early_stopping,
                                                  padded, llama):
    """transformers' beam search: each row's num_beams best hypotheses, in its order and
    padding, the end token (the greedy third new token of row 0) ending some; a batch of
    two (left-padded prompts of 5 and 3 tokens). The plans: the prompt's bucket, the
    decode step and the cache reorder (a gather into a scratch and a copy back per cache
    buffer, and its output); another prompt compiles nothing more."""
    model = llama if name == "llama" else tiny(name)
    gen = torch.Generator().manual_seed(3)
    if padded:
        ids, mask = left_padded([torch.randint(1, 100, (n,), generator=gen) for n in (5, 3)])
    else:
        ids, mask = torch.randint(0, 100, (2, 5), generator=gen), None
    plain = kernelwright.generate(model, ids, attention_mask=mask, max_new_tokens=8,
                                  eos_token_id=[])
    options = dict(max_new_tokens=8, num_beams=beams, eos_token_id=int(plain[0, 7]),
                   length_penalty=length_penalty, early_stopping=early_stopping,
                   num_return_sequences=beams, attention_mask=mask)
    before = compiled_plans(model)
    got = kernelwright.generate(model, ids, **options)
    want = model.generate(ids, do_sample=False, **options)
    assert got.shape == want.shape and torch.equal(got, want)
    ended = (got[:, 5:] == options["eos_token_id"]).any(1)
    assert bool(ended.any()) and not bool(ended.all())  # the end token ends some beams
    assert compiled_plans(model) == before + 3
    plans = generation._PLANS[model][(2 * beams, 256)].plans
    assert set(plans) == {16, 1, "reorder"}
    assert len(plans["reorder"].plan.kernels) == 2 * 4  # 2 layers' keys and values
    other = torch.randint(0, 100, (2, 5), generator=torch.Generator().manual_seed(9))
    options.update(attention_mask=None, num_return_sequences=1)
    got = kernelwright.generate(model, other, **options)
    assert torch.equal(got, model.generate(other, do_sample=False, **options))
    assert compiled_plans(model) == before + 3


def test_beam_search_takes_logits_processors_and_stopping_criteria(llama):
    """Beam search's log-probabilities through transformers' processors (repetition
    penalty, no repeated bigram, min_new_tokens holding the end token back) and a
    StoppingCriteria ending the hypotheses at 9 tokens: transformers' sequences."""
    ids = torch.randint(0, 100, (2, 5), generator=torch.Generator().manual_seed(3))
    plain = kernelwright.generate(llama, ids, max_new_tokens=8, eos_token_id=[])

    class AtNine(transformers.StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= 9)

    options = dict(max_new_tokens=8, num_beams=3, eos_token_id=int(plain[0, 6]),
                   num_return_sequences=2)
    bare = kernelwright.generate(llama, ids, **options)
    for extra in (dict(repetition_penalty=1.5, no_repeat_ngram_size=2, min_new_tokens=3),
                  dict(stopping_criteria=transformers.StoppingCriteriaList([AtNine()]))):
        got = kernelwright.generate(llama, ids, **options, **extra)
        assert torch.equal(got, llama.generate(ids, do_sample=False, **options, **extra))
        assert not torch.equal(got, bare), extra
    assert got.shape[1] == 9


def test_beam_search_refuses_what_it_does_not_take(llama):
    ids = torch.zeros(1, 3, dtype=torch.long)
    for bad, match in [(dict(do_sample=True), "sampling"),
                       (dict(num_return_sequences=3), "num_return_sequences"),
                       (dict(early_stopping="soon"), "early_stopping"),
                       (dict(streamer=SimpleNamespace(put=print, end=print)), "streamer")]:
        with pytest.raises(ValueError, match=match):
            kernelwright.generate(llama, ids, max_new_tokens=2, num_beams=2, **bad)
    with pytest.raises(ValueError, match="num_beams"):
        kernelwright.generate(llama, ids, max_new_tokens=2, num_beams=0)
    with pytest.raises(ValueError, match="num_return_sequences"):
        kernelwright.generate(llama, ids, max_new_tokens=2, num_return_sequences=2)


def left_padded(rows: list[torch.Tensor], width: int | None = None, pad: int = 0):
    """`rows` (1-D token ids) left-padded with `pad` to `width` (default the longest), and
    their attention mask, as a tokenizer with padding_side="left" gives them."""
    width = width or max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = r
        mask[i, width - len(r):] = 1
    return ids, mask


@pytest.mark.parametrize("name", ["llama", "gpt2", "qwen2", "mistral", "gemma2"])
def test_a_left_padded_batch_gives_transformers_tokens(name, llama):
    """Prompts of 7, 3 and 5 tokens in one batch with their attention mask: transformers'
    greedy tokens with that mask, each row's those of its prompt alone (the rows pass
    Mistral's 8-token window and Gemma 2's 4-token one), and other masks of the batch
    compile no more plans."""
    model = llama if name == "llama" else tiny(name)
    gen = torch.Generator().manual_seed(4)
    rows = [torch.randint(1, 100, (n,), generator=gen) for n in (7, 3, 5)]
    ids, mask = left_padded(rows)
    before = compiled_plans(model)
    got = kernelwright.generate(model, ids, attention_mask=mask, max_new_tokens=12,
                                eos_token_id=[])
    want = model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                          eos_token_id=None, pad_token_id=0)
    assert torch.equal(got, want)
    for i, r in enumerate(rows):
        alone = model.generate(r[None], max_new_tokens=12, do_sample=False,
                               eos_token_id=None, pad_token_id=0)
        assert torch.equal(got[i, 7:], alone[0, len(r):]), i
    assert compiled_plans(model) <= before + 2  # the prompt's bucket and the decode step
    counted = compiled_plans(model)
    ids, mask = left_padded(rows[::-1], width=9, pad=5)  # other padding, no new plan
    got = kernelwright.generate(model, ids, attention_mask=mask, max_new_tokens=4,
                                eos_token_id=[])
    want = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False,
                          eos_token_id=None, pad_token_id=0)
    assert torch.equal(got, want)
    whole = torch.ones_like(mask)  # a mask of ones: no mask
    assert torch.equal(kernelwright.generate(model, ids, attention_mask=whole,
                                             max_new_tokens=4, eos_token_id=[]),
                       kernelwright.generate(model, ids, max_new_tokens=4, eos_token_id=[]))
    assert compiled_plans(model) == counted


def test_bad_attention_masks_are_refused(llama):
    ids = torch.randint(0, 128, (2, 5), generator=torch.Generator().manual_seed(2))
    ones = torch.ones(2, 5, dtype=torch.long)

    def refused(mask, match):
        with pytest.raises(ValueError, match=match):
            kernelwright.generate(llama, ids, attention_mask=mask, max_new_tokens=3)

    refused(ones[:, :4], "shape")
    refused(ones[:1], "shape")
    refused(ones * 2, "only 0")
    refused(torch.full((2, 5), 0.5), "only 0")
    refused(torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]), r"rows \[1\] are all padding")
    refused(torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]), "left padding")  # right
    refused(torch.tensor([[0, 1, 0, 1, 1], [1, 1, 1, 1, 1]]), "left padding")  # a gap
    # a bool mask is one of 0 and 1
    bools = torch.tensor([[False, True, True, True, True], [True] * 5])
    assert kernelwright.generate(llama, ids, attention_mask=bools, max_new_tokens=2,
                                 eos_token_id=[]).shape == (2, 7)


def test_sampling_is_reproducible_with_a_seeded_generator(llama):
    ids = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(3))

    def sample(seed, **kw):
        return kernelwright.generate(llama, ids, max_new_tokens=10, do_sample=True,
                                     generator=torch.Generator().manual_seed(seed),
                                     eos_token_id=[], **kw)

    first = sample(0, temperature=0.8, top_k=20, top_p=0.9)
    assert first.shape == (1, 15) and torch.equal(first[:, :5], ids)
    assert torch.equal(first, sample(0, temperature=0.8, top_k=20, top_p=0.9))
    # one token left by top-k or top-p: sampling is greedy
    greedy = kernelwright.generate(llama, ids, max_new_tokens=10, eos_token_id=[])
    assert torch.equal(sample(1, top_k=1), greedy)
    assert torch.equal(sample(2, top_p=1e-6), greedy)


def test_sampling_a_left_padded_batch(llama):
    """Sampling with an attention mask: the same seed gives the same tokens, and a single
    token left by top-k gives the greedy ones."""
    gen = torch.Generator().manual_seed(9)
    ids, mask = left_padded([torch.randint(0, 128, (n,), generator=gen) for n in (6, 2)])

    def sample(seed, **kw):
        return kernelwright.generate(llama, ids, attention_mask=mask, max_new_tokens=6,
                                     do_sample=True, eos_token_id=[],
                                     generator=torch.Generator().manual_seed(seed), **kw)

    first = sample(0, temperature=0.8, top_k=20, top_p=0.9)
    assert first.shape == (2, 12) and torch.equal(first[:, :6], ids)
    assert torch.equal(first, sample(0, temperature=0.8, top_k=20, top_p=0.9))
    greedy = kernelwright.generate(llama, ids, attention_mask=mask, max_new_tokens=6,
                                   eos_token_id=[])
    assert torch.equal(sample(1, top_k=1), greedy)


# transformers' generation options (decoding.Options): its own logits processors,
# stopping criteria and streamers on the tokens chosen on the host


def tiny_tokenizer():
    """A character tokenizer of the tiny models' first 128 ids, built locally (no
    download): one character a token (StopStringCriteria needs "abcdef" among them)."""
    import string

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    chars = string.ascii_letters + string.digits
    chars += "".join(chr(0x100 + i) for i in range(128 - len(chars)))
    backend = Tokenizer(models.WordLevel({c: i for i, c in enumerate(chars)}, unk_token="a"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    backend.decoder = decoders.Fuse()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend)


class Recorder:
    """A streamer (transformers' protocol) recording what it receives."""

    def __init__(self):
        self.calls = []

    def put(self, value):
        self.calls.append(("put", value.clone()))

    def end(self):
        self.calls.append(("end", None))


class StopAtLength(transformers.StoppingCriteria):
    """Ends row `row` once the ids reach `length`."""

    def __init__(self, row, length):
        self.row, self.length = row, length

    def __call__(self, input_ids, scores, **kwargs):
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
        done[self.row] = input_ids.shape[1] >= self.length
        return done


@pytest.mark.parametrize("options", [
    dict(repetition_penalty=1.8), dict(repetition_penalty=0.7), dict(no_repeat_ngram_size=2),
    dict(repetition_penalty=1.3, no_repeat_ngram_size=3),
    "logits_processor", "logits_processor_replacing_ours"])
def test_logits_processors_give_transformers_greedy_tokens(options, llama):
    """repetition_penalty (left padding of the batch left out), no_repeat_ngram_size and
    a caller's processors, in transformers' order: model.generate's greedy tokens, which
    the options change."""
    from transformers.generation.logits_process import (
        RepetitionPenaltyLogitsProcessor,
        SuppressTokensLogitsProcessor,
    )
    gen = torch.Generator().manual_seed(3)
    ids, mask = left_padded([torch.randint(0, 128, (n,), generator=gen) for n in (6, 3)])
    plain = kernelwright.generate(llama, ids, attention_mask=mask, max_new_tokens=14,
                                  eos_token_id=[])
    if options == "logits_processor":  # never the tokens plain greedy picks first
        options = dict(repetition_penalty=1.5, logits_processor=[
            SuppressTokensLogitsProcessor(plain[:, 6].tolist())])
    elif options == "logits_processor_replacing_ours":  # the caller's penalty, not 1.01
        options = dict(repetition_penalty=1.01, logits_processor=[
            RepetitionPenaltyLogitsProcessor(2.5)])
    got = kernelwright.generate(llama, ids, attention_mask=mask, max_new_tokens=14,
                                eos_token_id=[], **options)
    want = llama.generate(ids, attention_mask=mask, max_new_tokens=14, do_sample=False,
                          eos_token_id=None, pad_token_id=0, **options)
    assert torch.equal(got, want)
    assert not torch.equal(got, plain)


@pytest.mark.parametrize("least", [dict(min_new_tokens=6), dict(min_length=11)])
def test_min_new_tokens_holds_back_an_end_token_that_would_end_early(least, llama):
    """With the first token greedy picks as the end token a row ends at once; with
    min_new_tokens (or min_length, prompt included) it ends no sooner: transformers'
    tokens."""
    ids = torch.randint(0, 128, (2, 5), generator=torch.Generator().manual_seed(7))
    first = int(kernelwright.generate(llama, ids, max_new_tokens=1, eos_token_id=[])[0, 5])
    early = kernelwright.generate(llama, ids, max_new_tokens=12, eos_token_id=first)
    assert int(early[0, 5]) == first and bool((early[0, 6:] == first).all())
    got = kernelwright.generate(llama, ids, max_new_tokens=12, eos_token_id=first, **least)
    want = llama.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=first,
                          pad_token_id=0, **least)
    assert torch.equal(got, want)
    assert first not in got[:, 5:11].tolist()[0]


def test_sampled_tokens_with_processors_are_seeded_and_honour_them(llama):
    """Sampling after the processors: the same seed, the same tokens; no 2-gram repeats
    in a row; top_k=1 gives the greedy tokens with the same options."""
    ids = torch.randint(0, 128, (2, 5), generator=torch.Generator().manual_seed(4))

    def sample(seed, **kw):
        return kernelwright.generate(llama, ids, max_new_tokens=16, do_sample=True,
                                     eos_token_id=[], no_repeat_ngram_size=2,
                                     generator=torch.Generator().manual_seed(seed), **kw)

    first = sample(0, temperature=1.5)
    assert torch.equal(first, sample(0, temperature=1.5))
    for row in first.tolist():
        pairs = list(zip(row, row[1:]))
        assert len(pairs) == len(set(pairs))
    greedy = kernelwright.generate(llama, ids, max_new_tokens=16, eos_token_id=[],
                                   no_repeat_ngram_size=2)
    assert torch.equal(sample(1, top_k=1), greedy)


def test_stopping_criteria_end_a_row_at_a_length(llama):
    """A caller's StoppingCriteria ends row 0 at 9 ids: it goes on with the pad token
    (the model has an end token) while row 1 continues; ending every row ends the call;
    transformers' tokens."""
    ids = torch.randint(0, 128, (2, 5), generator=torch.Generator().manual_seed(8))
    free = kernelwright.generate(llama, ids, max_new_tokens=10, eos_token_id=[])
    criteria = transformers.StoppingCriteriaList([StopAtLength(0, 9)])
    got = kernelwright.generate(llama, ids, max_new_tokens=10, eos_token_id=127,
                                stopping_criteria=criteria)
    want = llama.generate(ids, max_new_tokens=10, do_sample=False, eos_token_id=127,
                          pad_token_id=127, stopping_criteria=criteria)
    assert torch.equal(got, want)
    assert torch.equal(got[0, :9], free[0, :9]) and bool((got[0, 9:] == 127).all())
    assert torch.equal(got[1], free[1])
    both = [StopAtLength(0, 8), StopAtLength(1, 8)]
    assert torch.equal(kernelwright.generate(llama, ids, max_new_tokens=10,
                                             stopping_criteria=both), free[:, :8])


def test_stop_strings_end_rows_as_transformers(llama):
    """stop_strings read with a tokenizer (a local character one): a row ends at the
    token completing one, across tokens; the other row goes on; transformers' tokens.
    Without a tokenizer they are refused before anything runs."""
    tokenizer = tiny_tokenizer()
    ids = torch.randint(0, 128, (2, 5), generator=torch.Generator().manual_seed(2))
    free = kernelwright.generate(llama, ids, max_new_tokens=12, eos_token_id=[])
    texts = tokenizer.batch_decode(free[:, 5:])
    stop = texts[0][3:5]  # the 4th and 5th new tokens of row 0
    assert stop not in texts[1]
    got = kernelwright.generate(llama, ids, max_new_tokens=12, eos_token_id=127,
                                stop_strings=[stop, "no such text"], tokenizer=tokenizer)
    want = llama.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=127,
                          pad_token_id=127, stop_strings=[stop, "no such text"],
                          tokenizer=tokenizer)
    assert torch.equal(got, want)
    end = texts[0].index(stop) + len(stop)  # one character a token
    assert torch.equal(got[0, :5 + end], free[0, :5 + end])
    assert bool((got[0, 5 + end:] == 127).all()) and torch.equal(got[1], free[1])
    with pytest.raises(ValueError, match="tokenizer"):
        kernelwright.generate(llama, ids, max_new_tokens=3, stop_strings="x")


def test_a_streamer_gets_the_prompt_then_each_token_as_transformers_gives_them(llama, capsys):
    """A streamer gets the prompt, each step's tokens ([B]) and its end, as transformers'
    generate hands them (an end token ending a row early, pad after it);
    TextStreamer prints the text."""
    ids = torch.randint(0, 128, (2, 5), generator=torch.Generator().manual_seed(7))
    free = kernelwright.generate(llama, ids, max_new_tokens=8, eos_token_id=[])
    eos = int(free[0, 8])
    mine, theirs = Recorder(), Recorder()
    got = kernelwright.generate(llama, ids, max_new_tokens=8, eos_token_id=eos, streamer=mine)
    llama.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=eos,
                   pad_token_id=eos, streamer=theirs)
    assert got.shape[1] > 9 and bool((got[0, 9:] == eos).all())  # row 1 went on
    assert [c[0] for c in mine.calls] == ["put"] * (1 + got.shape[1] - 5) + ["end"]
    assert torch.equal(mine.calls[0][1], ids)
    assert torch.equal(torch.stack([v for _, v in mine.calls[1:-1]], 1), got[:, 5:])
    assert len(mine.calls) == len(theirs.calls)
    assert all(a[0] == b[0] and (a[1] is None or torch.equal(a[1], b[1]))
               for a, b in zip(mine.calls, theirs.calls))
    nothing = Recorder()  # no token to generate: the prompt and the end
    kernelwright.generate(llama, ids, max_new_tokens=0, streamer=nothing)
    assert [c[0] for c in nothing.calls] == ["put", "end"]

    tokenizer = tiny_tokenizer()
    got = kernelwright.generate(llama, ids[:1], max_new_tokens=8, eos_token_id=[],
                                streamer=transformers.TextStreamer(tokenizer))
    assert capsys.readouterr().out == tokenizer.decode(got[0]) + "\n"


def test_filter_logits_matches_transformers_warpers():
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )
    for seed in range(4):
        logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(seed)) * 3
        want = TemperatureLogitsWarper(0.7)(None, logits.clone())
        want = TopKLogitsWarper(12)(None, want)
        want = TopPLogitsWarper(0.8)(None, want)
        got = filter_logits(logits, 0.7, 12, 0.8)
        assert torch.equal(got.isinf(), want.isinf())
        torch.testing.assert_close(got[~got.isinf()], want[~want.isinf()])


def test_a_prompt_longer_than_max_length_is_refused(llama):
    with pytest.raises(ValueError, match="max_length"):
        kernelwright.generate(llama, torch.zeros(1, 40, dtype=torch.long), max_length=32,
                              max_new_tokens=4)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        kernelwright.generate(llama, torch.zeros(1, 250, dtype=torch.long), max_new_tokens=8)


def test_attention_windows_give_a_mask_per_layer_kind_where_kinds_mix():
    """One mask for every layer unless layer_types mix full and sliding attention: then
    one per kind, the sliding one with the window; kinds generate cannot run refused."""
    def windows(name):
        return generation.attention_windows(tiny(name).config)

    assert windows("llama") == windows("qwen2") == {None: None}
    assert windows("mistral") == {None: 8}
    full_and_sliding = {"full_attention": None, "sliding_attention": 4}
    assert windows("gemma2") == windows("gemma3") == windows("qwen2_mixed") == full_and_sliding
    every = transformers.Qwen2Config(num_hidden_layers=2, use_sliding_window=True,
                                     sliding_window=4, max_window_layers=0)
    assert generation.attention_windows(every) == {None: 4}
    chunked = SimpleNamespace(sliding_window=4,
                              layer_types=["chunked_attention", "full_attention"])
    with pytest.raises(ValueError, match="chunked_attention"):
        generation.attention_windows(chunked)


def test_gemma2_soft_capping_is_computed():
    """Gemma 2 caps its attention scores and its logits at `cap * tanh(x / cap)`: with
    weights large enough and caps small enough that both tanh are far from linear (each
    cap left out moves eager's logits by more than 0.1), a prompt plan's logits are
    eager's."""
    def gemma2(attention_cap, logits_cap):
        config = tiny("gemma2").config
        config.initializer_range = 0.3
        config.attn_logit_softcapping = attention_cap
        config.final_logit_softcapping = logits_cap
        torch.manual_seed(0)
        return transformers.Gemma2ForCausalLM(config).eval()

    model = gemma2(0.5, 2.0)
    cached = generation.CacheModule(model, 1, 16)
    plan = kernelwright.compile(cached, cached.example(1, 16), progress=None)
    ids = torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(1))
    got = plan(ids, torch.arange(16), torch.tensor([15]), torch.zeros(1, dtype=torch.long))
    with torch.no_grad():
        want = model(ids).logits[:, -1]
        for uncapped in (gemma2(None, 2.0), gemma2(0.5, None)):
            assert (uncapped(ids).logits[:, -1] - want).abs().max() > 0.1
    torch.testing.assert_close(got, want)


def _constant_bytes(model) -> tuple[int, int]:
    """The device bytes of the constants (not the KV cache) `generate`'s plans for `model`
    hold, counting a shared buffer once; and the plans' count."""
    held, count = {}, 0
    for plans in generation._PLANS.get(model, {}).values():
        for cm in plans.plans.values():
            count += 1
            moving = {spec.buffer for _, spec in cm.plan.state}
            for bid in cm.plan.constants:
                if bid not in moving:
                    held.update((id(buf), buf.size) for buf in cm.exe.segments[bid])
    return sum(held.values()), count


def test_plans_of_a_model_hold_one_copy_of_its_weights():
    """A prompt bucket's plan and the decode step's upload the weights once: the device
    bytes of constants stay those of the model's weights as plans are added."""
    model = tiny("llama")
    weights = sum(p.numel() * 4 for p in model.parameters())
    ids = torch.randint(0, 128, (1, 40), generator=torch.Generator().manual_seed(5))
    got = kernelwright.generate(model, ids[:, :5], max_new_tokens=3, eos_token_id=[])
    assert torch.equal(got, eager_greedy(model, ids[:, :5], 3))
    first, plans = _constant_bytes(model)
    assert plans == 2 and weights <= first < 1.1 * weights
    for n in (20, 40):  # the 32- and 64-token buckets: two more plans, no more weights
        got = kernelwright.generate(model, ids[:, :n], max_new_tokens=3, eos_token_id=[])
        assert torch.equal(got, eager_greedy(model, ids[:, :n], 3))
    assert _constant_bytes(model) == (first, 4)
    total = kernelwright.generate.device_bytes(model)  # shared buffers counted once
    apart = sum(sum(cm.exe.device_buffers().values())
                for p in generation._PLANS[model].values() for cm in p.plans.values())
    assert first < total <= apart - 3 * first


def test_a_plan_does_not_share_weights_that_changed():
    """compile(share_state=) shares the other's constants only while its weights are
    those it uploaded: after an in-place change the new plan uploads its own."""
    linear = torch.nn.Linear(8, 8).eval()
    first = kernelwright.compile(linear, [torch.randn(2, 8)])
    same = kernelwright.compile(linear, [torch.randn(4, 8)], share_state=first)
    mine = {id(b) for bid in same.plan.constants for b in same.exe.segments[bid]}
    theirs = {id(b) for bid in first.plan.constants for b in first.exe.segments[bid]}
    assert mine == theirs
    with torch.no_grad():
        linear.weight.mul_(2)
    x = torch.randn(3, 8)
    changed = kernelwright.compile(linear, [x], share_state=first)
    mine = {id(b) for bid in changed.plan.constants for b in changed.exe.segments[bid]}
    assert not mine & theirs
    torch.testing.assert_close(changed(x), linear(x))


def _generate_bench():
    """tools/generate_bench.py as a module."""
    path = Path(__file__).resolve().parents[1] / "tools" / "generate_bench.py"
    spec = importlib.util.spec_from_file_location("generate_bench", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # where its dataclass looks its annotations up
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_plan_kernels_of_the_tiny_benchmark_model(dtype):
    """The decode step of generate_bench's tiny SmolLM2-shaped model (two layers, a cache
    of 544 slots): 51 kernels before (23 a layer: a matmul per projection; the keys' and
    the values' positions each searched over the cache, the cache rewritten whole, then
    copied into its state; each RMSNorm two kernels; the rotation's cos and sin per
    layer). 31 now: q, k and v one matmul, gate and up one
    (lower/linalg.merge_shared_products; the norm's scaling in the merged matmul's
    loader, SwiGLU in the down projection's), the keys and values each one `put` over
    their new slices written in place (test_put), each norm one row kernel, the
    rotation's cos and sin once for all layers. 29 since products of few rows take the
    gemv template (kernels/gemv.py), which sums its whole K in one kernel: attention's
    product by V (544 cached positions) had split-K and a reduce kernel a layer. 25 since
    attention of few queries is one kernel (kernels/attention_decode.py): the scores, each
    row's log-sum-exp and the product by V were three a layer. 21 since a gemv computes the
    statistics of its A rows itself (schedule.fuse_rows): each layer's two RMSNorms in
    the q/k/v and gate/up products; the final norm, read by the LM head through the
    gather of the last position, keeps its row kernel. 17 since the attention stores the
    new keys and values into the cache it reads (schedule.joining_puts,
    kernels/put.fused_puts): the two put kernels a layer are gone, 5 a layer remain.
    In bf16 too, the caches packed (two halves a word, stored a word at a time), and
    one more kernel: the logits narrowed into their bf16 output."""
    model = _generate_bench().make_model(True, dtype)
    plan = kernelwright.plan_module(generation.CacheModule(model, 1, 544),
                                    generation.CacheModule.example(1, 1))
    half = dtype == torch.bfloat16
    layers = plan.kernels[5:-2 - half]  # after the mask, ids, rotation; before the head
    assert len(layers) == 2 * 5 and len(plan.kernels) == 17 + half, plan.summary()
    assert {plan.buffers[t.buffer].dtype for _, t in plan.state} == {"bf16" if half else "f32"}
    assert not half or plan.kernels[-1].name == "materialize", plan.summary()
    # per layer: q/k/v, attention (storing k and v), o, gate/up, down (with SwiGLU in its
    # loader); then the final norm and the lm head
    assert sum("matmul" in k.name for k in layers) == 2 * 4
    attention = [k for k in layers if k.key.startswith("attention_decode")]
    assert len(attention) == 2 and all("put" in k.name for k in attention)
    caches = {t.buffer for _, t in plan.state}
    for k in attention:  # its output, and the layer's keys and values bound read_write
        written = [k.bindings[i] for i, a in used_bindings(k.source).items() if a == "read_write"]
        assert len(written) == 3 and set(written[:2]) <= caches, plan.summary()
    assert not any("put" in k.name for k in plan.kernels if k not in attention)
    assert plan.updates == []  # every cache written where its attention runs


@pytest.mark.parametrize("workload,beams,contexts", [("smollm2", 1, "16,20")] + [
    pytest.param(*case, marks=pytest.mark.slow) for case in [
        ("olmoe", 1, "16"), ("whisper-tiny", 1, None), ("smollm2", 3, "16"),
        ("whisper-tiny", 2, None), ("mamba", 1, "16"), ("llava", 1, "24")]])
def test_generate_bench_runs_at_the_tiny_config(workload, beams, contexts, tmp_path):
    """tools/generate_bench.py end to end at each workload's tiny config (a mixture of
    experts, an encoder-decoder, a state-space model, a vision-language model; greedy and
    beam search): every figure present, and kernelwright's tokens those of transformers'
    eager generate with a static cache (Mamba: its default cache, its states)."""
    bench = _generate_bench()
    out = tmp_path / "generate.json"
    result = bench.main(["--tiny", "--model", workload, "--num-beams", str(beams),
                         "--torch-compile-mode", "none", "--reps", "1", "--new-tokens", "4",
                         "--out", str(out)] + (["--contexts", contexts] if contexts else []))
    saved = json.loads(out.read_text())
    caches = {"mamba": "DynamicCache(LinearAttentionLayer)",  # per layer its states
              "whisper-tiny": "EncoderDecoderCache(StaticCache(StaticLayer), "
                              "StaticCache(StaticLayer))"}
    want = contexts.split(",") if contexts else ["32"]  # Whisper: its 32-frame window
    assert list(saved["contexts"]) == want
    assert saved["workload"] == workload and saved["num_beams"] == beams
    assert saved["mode"] == ("greedy" if beams == 1 else f"beam search, {beams} beams")
    assert saved["dtype"] == "float32" and saved["context_unit"]
    for row in result["contexts"].values():
        mine, eager = row["kernelwright"], row["eager"]
        assert mine["tokens_equal_eager"] and mine["first_token_differing"] is None
        assert mine["plans"] == 2 + (beams > 1) and mine["weights_held_as"] == ["float32"]
        assert mine["device_bytes"] > result["parameters"] * 4
        for side in (mine, eager):  # no decode rate where N tokens timed no slower than
            rate = side["decode_tokens_per_s"]  # one (a loaded CI machine's timer noise)
            assert side["prefill_ms"] > 0 and (rate is None or rate > 0)
        assert set(mine["compile_s"]) == {"prefill", "decode"} | ({"reorder"} if beams > 1
                                                                 else set())
        assert all(s > 0 for s in mine["compile_s"].values())
        assert mine["decode_step"]["kernels"] > 0 and mine["prefill_vs_eager"] > 0
        assert eager["weights_held_as"] == ["float32"] and "torch_compile" not in row
        assert eager["cache"] == caches.get(workload, "StaticCache(StaticLayer)")
    assert saved["torch_cache_implementation"] == (None if workload == "mamba" else "static")
    assert set(saved["torch_fast_path"]) == ({"causal_conv1d", "mamba_ssm"}
                                             if workload == "mamba" else set())


def test_generate_bench_refuses_what_its_workloads_do_not_take(tmp_path):
    bench = _generate_bench()
    with pytest.raises(ValueError, match="32 frames"):  # Whisper's window, no other length
        bench.main(["--tiny", "--model", "whisper-tiny", "--contexts", "30",
                    "--out", str(tmp_path / "x.json")])
    with pytest.raises(ValueError, match="21 or more"):  # no text after LLaVA's image
        bench.main(["--tiny", "--model", "llava", "--contexts", "24,20",
                    "--out", str(tmp_path / "x.json")])
    with pytest.raises(SystemExit):
        bench.main(["--tiny", "--num-beams", "0", "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()
