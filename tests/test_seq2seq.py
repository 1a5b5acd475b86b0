"""kernelwright.generate with encoder-decoder models (seq2seq.py): Whisper, BART and T5
decoding on kernelwright's kernels give eager transformers' greedy tokens, from a
bounded number of plans (a prefill plan per decoder prompt bucket and one decode step)
that share the caches (self- and cross-attention keys and values) and the weights."""

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="generate's tests need transformers (pip install -e '.[models]')")

import kernelwright  # noqa: E402
from kernelwright.generate import compiled_plans  # noqa: E402

START, PAD, EOS = 150, 151, 152  # the tiny models' special ids (vocabulary of 160)


def tiny(name: str) -> torch.nn.Module:
    """A randomly initialised encoder-decoder of family `name`, two layers each side."""
    torch.manual_seed(0)
    if name == "whisper":
        # no suppressed tokens: transformers' greedy search is then the plain argmax
        config = transformers.WhisperConfig(
            vocab_size=160, num_mel_bins=80, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, d_model=64,
            encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=16,
            max_target_positions=64, decoder_start_token_id=START, pad_token_id=PAD,
            bos_token_id=PAD, eos_token_id=EOS, begin_suppress_tokens=None,
            suppress_tokens=None)
        return transformers.WhisperForConditionalGeneration(config).eval()
    if name == "bart":
        config = transformers.BartConfig(
            vocab_size=160, d_model=64, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
            decoder_ffn_dim=128, max_position_embeddings=64, decoder_start_token_id=START,
            pad_token_id=PAD, bos_token_id=START, eos_token_id=EOS, forced_bos_token_id=None,
            forced_eos_token_id=None, init_std=0.3)  # varied tokens: a mask changes them
        return transformers.BartForConditionalGeneration(config).eval()
    config = transformers.T5Config(
        vocab_size=160, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
        decoder_start_token_id=PAD, pad_token_id=PAD, eos_token_id=EOS)
    return transformers.T5ForConditionalGeneration(config).eval()


def encoder_inputs(name: str, batch: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if name == "whisper":  # [B, mels, 2 * max_source_positions]
        return torch.randn(batch, 80, 32, generator=gen)
    return torch.randint(0, 150, (batch, 9), generator=gen)


def eager_greedy(model, inputs, ids, new, **kw):
    """Greedy decoder tokens without a cache: the argmax of a full forward."""
    with torch.no_grad():
        for _ in range(new):
            logits = model(inputs, decoder_input_ids=ids, **kw).logits[:, -1]
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
    return ids


@pytest.mark.parametrize("name", ["whisper", "bart", "t5"])
def test_greedy_tokens_are_eager_transformers(name):
    """Transformers' greedy generate from a decoder prompt, batch 2; another input of the
    same shape, a prompt in the same bucket and the default start token compile
    nothing more: the prefill plan of the prompt's bucket and the decode step."""
    model = tiny(name)
    inputs = encoder_inputs(name, 2, 1)
    prompt = torch.tensor([[START if name != "t5" else PAD, 153, 154]]).repeat(2, 1)
    got = kernelwright.generate(model, inputs, max_new_tokens=10, decoder_input_ids=prompt,
                                eos_token_id=[])
    want = model.generate(inputs, max_new_tokens=10, do_sample=False, decoder_input_ids=prompt,
                          eos_token_id=None, return_dict_in_generate=True).sequences
    assert torch.equal(got, want)
    assert torch.equal(got, eager_greedy(model, inputs, prompt, 10))
    assert compiled_plans(model) == 2 == kernelwright.generate.compiled_plans(model)
    other = encoder_inputs(name, 2, 2)
    start = prompt[:, :1]
    for ids in (prompt[:, :2], start):
        got = kernelwright.generate(model, other, max_new_tokens=6, eos_token_id=[],
                                    decoder_input_ids=None if ids is start else ids)
        assert torch.equal(got, eager_greedy(model, other, ids, 6))
    assert compiled_plans(model) == 2


def test_text_encoders_take_a_padded_batch():
    """BART's encoder inputs padded with their attention mask, an input of the prefill
    plan (the encoder's mask) and of the decode step (the cross-attention's): a row's
    tokens are those of its input alone, not those of its padded input unmasked."""
    model = tiny("bart")
    inputs = encoder_inputs("bart", 2, 3)
    mask = torch.ones_like(inputs)
    mask[1, 3:] = 0
    inputs[1, 3:] = PAD
    got = kernelwright.generate(model, inputs, attention_mask=mask, max_new_tokens=12,
                                eos_token_id=[])
    start = torch.full((2, 1), START)
    assert torch.equal(got, eager_greedy(model, inputs, start, 12, attention_mask=mask))
    assert torch.equal(got[1:], eager_greedy(model, inputs[1:, :3], start[1:], 12))
    unmasked = eager_greedy(model, inputs[1:], start[1:], 12)
    assert not torch.equal(got[1:], unmasked)
    assert compiled_plans(model) == 2


def test_beam_search_gives_transformers_sequences():
    """BART's beam search (3 beams, length_penalty 0.5, early_stopping, 2 sequences a
    row) from a padded batch of encoder inputs: transformers' sequences, the end token
    (the greedy fourth new token of row 0) ending each at its length; the encoder's inputs run once
    per beam and the cache reorder moves the cross-attention keys and values with the
    self-attention ones (one buffer a layer each). Another input compiles nothing."""
    model = tiny("bart")
    inputs = encoder_inputs("bart", 2, 5)
    mask = torch.ones_like(inputs)
    mask[1, 6:] = 0
    inputs[1, 6:] = PAD
    plain = kernelwright.generate(model, inputs, attention_mask=mask, max_new_tokens=8,
                                  eos_token_id=[])
    options = dict(max_new_tokens=8, num_beams=3, eos_token_id=int(plain[0, 4]),
                   length_penalty=0.5, early_stopping=True, num_return_sequences=2,
                   attention_mask=mask)
    got = kernelwright.generate(model, inputs, **options)
    want = model.generate(inputs, do_sample=False, **options)
    assert got.shape == want.shape and torch.equal(got, want)
    # each ends at the end token, the shorter padded to the longest
    assert bool((got[:, 1:] == options["eos_token_id"]).any(1).all())
    assert bool((got == PAD).any())
    counted = compiled_plans(model)
    assert counted == 2 + 3  # greedy's two plans; beam search's prefill, decode, reorder
    other = encoder_inputs("bart", 2, 6)
    options.update(attention_mask=None, num_beams=2, early_stopping="never")
    del options["num_return_sequences"]
    got = kernelwright.generate(model, other, **options)
    assert torch.equal(got, model.generate(other, do_sample=False, **options))
    options.update(num_beams=3)
    got = kernelwright.generate(model, other, **options)
    assert torch.equal(got, model.generate(other, do_sample=False, **options))
    assert compiled_plans(model) == counted + 3  # num_beams=2: plans for 4 rows


def test_whisper_stops_at_the_end_token_and_samples_reproducibly():
    model = tiny("whisper")
    features = encoder_inputs("whisper", 1, 4)
    free = kernelwright.generate(model, features, max_new_tokens=8, eos_token_id=[])[0, 1:]
    # the last new token that is none of those before it (the first is one) ends there
    stop = max(j for j in range(8) if int(free[j]) not in free[:j].tolist())
    got = kernelwright.generate(model, features, max_new_tokens=8, eos_token_id=int(free[stop]))
    assert torch.equal(got[0, 1:], free[:stop + 1])

    def sample(seed, **kw):
        return kernelwright.generate(model, features, max_new_tokens=8, do_sample=True,
                                     generator=torch.Generator().manual_seed(seed),
                                     eos_token_id=[], **kw)

    assert torch.equal(sample(0, top_k=20), sample(0, top_k=20))
    assert torch.equal(sample(1, top_k=1), free[None].new_tensor([[START, *free.tolist()]]))


def test_bad_arguments_are_refused():
    whisper = tiny("whisper")
    features = encoder_inputs("whisper", 1, 5)
    with pytest.raises(ValueError, match="no attention mask"):
        kernelwright.generate(whisper, features, attention_mask=torch.zeros(1, 32),
                              max_new_tokens=2)
    with pytest.raises(ValueError, match="decoder_input_ids"):
        kernelwright.generate(whisper, features, decoder_input_ids=torch.tensor([[START, 170]]),
                              max_new_tokens=2)
    with pytest.raises(ValueError, match="positions"):
        kernelwright.generate(whisper, features, max_new_tokens=80)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        vocab_size=64)).eval()
    with pytest.raises(ValueError, match="encoder-decoder"):
        kernelwright.generate(llama, torch.zeros(1, 3, dtype=torch.long), max_new_tokens=2,
                              decoder_input_ids=torch.zeros(1, 1, dtype=torch.long))
    assert compiled_plans(whisper) == 0


def test_generation_options_apply_to_the_decoder_as_in_transformers():
    """The shared loop's options on BART's decoder ids: repetition_penalty,
    no_repeat_ngram_size and min_new_tokens (the end token the first greedy pick), a
    StoppingCriteria ending row 0 early and a streamer given the decoder prompt, each
    step's tokens and the end; transformers' greedy tokens and streamed values."""
    model = tiny("bart")
    inputs = encoder_inputs("bart", 2, 5)
    plain = kernelwright.generate(model, inputs, max_new_tokens=12, eos_token_id=[])
    eos = int(plain[0, 1])

    class StopRow0(transformers.StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.tensor([input_ids.shape[1] >= 9, False])

    calls = {"mine": [], "theirs": []}

    def streamer(name):
        record = calls[name]
        return type("Recorder", (), {"put": lambda self, v: record.append(v.clone()),
                                     "end": lambda self: record.append(None)})()

    options = dict(repetition_penalty=1.6, no_repeat_ngram_size=2, min_new_tokens=4,
                   stopping_criteria=transformers.StoppingCriteriaList([StopRow0()]))
    got = kernelwright.generate(model, inputs, max_new_tokens=12, eos_token_id=eos,
                                streamer=streamer("mine"), **options)
    want = model.generate(inputs, max_new_tokens=12, do_sample=False, eos_token_id=eos,
                          pad_token_id=PAD, streamer=streamer("theirs"), **options)
    assert torch.equal(got, want) and not torch.equal(got, plain)
    assert eos not in got[:, 1:5].flatten().tolist() and bool((got[0, 9:] == PAD).all())
    assert len(calls["mine"]) == len(calls["theirs"]) == 2 + got.shape[1] - 1
    assert calls["mine"][-1] is None and torch.equal(calls["mine"][0], got[:, :1])
    assert all(torch.equal(a, b) for a, b in zip(calls["mine"][:-1], calls["theirs"][:-1]))
