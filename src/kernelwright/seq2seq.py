"""kernelwright.generate for transformers encoder-decoder models (Whisper, BART, T5).

`generate(model, inputs, max_new_tokens=...)` dispatches here when the model's config
is `is_encoder_decoder`. `Seq2SeqCacheModule` wraps the model with registered buffers
its forward updates in place: each decoder layer's keys and values (`keys_{i}`,
`values_{i}`: [batch, heads, length + source, head_dim]), the first `length` positions
its self-attention cache (written at the slots the plan takes, as generate.py's
CacheModule does), the rest its cross-attention keys and values over the encoder's
output. One buffer for both halves makes it state that every plan updates, so all read the one
copy on the GPU (compile's `share_state` shares the buffers a plan writes).

Two kinds of plan share these buffers and the weights (compile's `share_state`): a
prefill plan per decoder prompt bucket runs the encoder on the inputs, projects its
output to every layer's cross keys and values and writes them, and runs the decoder
prompt (right-padded to its bucket, as generate.py's prompts are);
one decode plan runs a token, reading the cross keys and values (transformers'
EncoderDecoderCache with every layer's cross-attention `is_updated`) and writing its
self-attention keys and values. A text encoder's attention mask is an input of both
(the cross-attention's mask). The plans are kept per batch, input shape and cache
length (`compiled_plans` counts them beside the decoder-only ones), so another input
of that shape compiles nothing. Tokens are chosen on the host as generate.py's
(decoding.decode; beam search: beams.py, one more plan moving the caches' rows after
their beams, cross-attention halves included). The decoder's positions come from the
cache's `get_seq_length`, the plan's first slot (a tensor: one plan serves every step).

generate's logits processors, stopping criteria and streamer apply to the decoder's ids
as transformers' do (decoding.Options). Not supported: Whisper's timestamps, language
detection, long-form (more than one 30-second window) and its generation config's
suppress_tokens, begin_suppress_tokens and forced ids; the options a generation config
holds are not read (BART's forced_bos/eos ids, no_repeat_ngram_size, ...: pass those
generate takes); a decoder prompt with padding.
"""

from __future__ import annotations

import functools
import inspect
import weakref

import torch

from .beams import Beams, beam_search
from .compiler import CompiledModule, compile
from .decoding import (
    _PLANS,
    Options,
    Sampling,
    _bucket,
    _BufferCache,
    _eos_ids,
    _new_tokens,
    _pad_id,
    _ShapeProbe,
    cache_length,
    decode,
    no_decoding,
    reorder_cache,
)


class _CrossSlots:
    """The cross-attention half of the cache: the owner's buffers past its first `slots`
    positions hold each layer's keys and values of the encoder's output. `update`
    writes them there whole; `layers[i].keys` and `.values` read them (transformers'
    path once `is_updated`)."""

    class _Layer:
        def __init__(self, owner, i, slots):
            self.keys = getattr(owner, f"keys_{i}")[:, :, slots:]
            self.values = getattr(owner, f"values_{i}")[:, :, slots:]

    def __init__(self, owner: torch.nn.Module, layers: int, slots: int) -> None:
        self.layers = [self._Layer(owner, i, slots) for i in range(layers)]

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        layer = self.layers[layer_idx]
        layer.keys.copy_(key_states.to(layer.keys.dtype))
        layer.values.copy_(value_states.to(layer.values.dtype))
        return layer.keys, layer.values


@functools.cache
def _cache_class():
    """An EncoderDecoderCache (the class the models' attention tests for) of two given
    caches: its self-attention cache, its cross-attention one, whether every layer's
    cross keys and values are there to read (`encoded`), and the decoder's first slot
    (`get_seq_length`: the positions the models count from, a tensor)."""
    from transformers.cache_utils import EncoderDecoderCache

    class Cache(EncoderDecoderCache):
        def __init__(self, self_cache, cross_cache, layers: int, encoded: bool,
                     start) -> None:  # not EncoderDecoderCache's: it takes its own caches
            self.self_attention_cache = self_cache
            self.cross_attention_cache = cross_cache
            self.is_updated = dict.fromkeys(range(layers), encoded)
            self.count = layers
            self.start = start

        def __len__(self):
            return self.count

        def get_seq_length(self, layer_idx: int = 0):
            return self.start

        # every layer attends fully (the decoder mask is given whole)
        is_sliding = is_linear = is_dummy = property(lambda self: [False] * self.count)

    return Cache


def _text_encoder(model) -> bool:
    """Whether the model's encoder reads token ids (BART, T5) rather than features
    (Whisper's input_features): then it takes an attention mask."""
    return getattr(model, "main_input_name", "input_ids") == "input_ids"


class Seq2SeqCacheModule(torch.nn.Module):
    """An encoder-decoder model with static caches as buffers for `batch` sequences: a
    decoder self-attention cache of `length` slots and the cross-attention keys and
    values of an encoder input of shape `source` (without the batch).

    forward(decoder_ids [batch, T], positions [T], last [1], *encoder_inputs) runs the
    decoder's tokens at slots `positions` (consecutive) and returns the logits of token
    `last` ([batch, vocab]). With the encoder's inputs (input_features; or input_ids
    and attention_mask) it first runs the encoder and writes the cross keys and values;
    without (a text encoder's attention_mask alone: every plan's input, the
    cross-attention's mask), it reads those written."""

    def __init__(self, model: torch.nn.Module, batch: int, length: int,
                 source: tuple[int, ...], shapes: dict | None = None) -> None:
        super().__init__()
        self.model = model
        self.length = length
        self.text = _text_encoder(model)
        self.cache_arg = "cache" if "cache" in inspect.signature(
            model.forward).parameters else "past_key_values"
        shapes = shapes or self.probe(model, batch, source)
        self.layers = len(shapes["self"])
        for i in range(self.layers):
            for name, own, cross in (("keys", *(shapes[k][i][0] for k in ("self", "cross"))),
                                     ("values", *(shapes[k][i][1] for k in ("self", "cross")))):
                if (own[1], own[3]) != (cross[1], cross[3]):
                    raise ValueError(f"decoder layer {i}'s self- and cross-attention {name} "
                                     f"differ in heads or head size: {list(own)}, "
                                     f"{list(cross)}")
                self.register_buffer(f"{name}_{i}", torch.zeros(
                    batch, own[1], length + cross[2], own[3], dtype=shapes["self"][i][2]))
        self.encoded_shape = shapes["encoded"]

    @staticmethod
    def probe(model, batch: int, source: tuple[int, ...]) -> dict:
        """The shapes of each decoder layer's self- and cross-attention keys and values
        and of the encoder's output (one eager run on zeros: the encoder once, one
        decoder token)."""
        own, cross = _ShapeProbe(), _ShapeProbe()
        inputs = torch.zeros(batch, *source, dtype=torch.long if _text_encoder(model)
                             else next(model.parameters()).dtype)
        with torch.no_grad():
            encoded = model.get_encoder()(inputs).last_hidden_state
            cache = _cache_class()(own, cross, 0, False, 0)  # no layer's cross K/V yet
            model(encoder_outputs=(encoded,), decoder_input_ids=torch.zeros(
                batch, 1, dtype=torch.long), decoder_attention_mask=torch.zeros(
                batch, 1, 1, 1, dtype=encoded.dtype), use_cache=True, **{
                "cache" if "cache" in inspect.signature(model.forward).parameters
                else "past_key_values": cache})
        return {"self": own.shapes, "cross": cross.shapes, "encoded": tuple(encoded.shape)}

    @staticmethod
    def example(batch: int, tokens: int, encoder_inputs: tuple = ()) -> list[torch.Tensor]:
        """forward's inputs for `tokens` decoder tokens per row (what a plan is compiled
        for), then `encoder_inputs` (forward's)."""
        return [torch.zeros(batch, tokens, dtype=torch.long), torch.arange(tokens),
                torch.zeros(1, dtype=torch.long), *encoder_inputs]

    def forward(self, decoder_ids: torch.Tensor, positions: torch.Tensor, last: torch.Tensor,
                *encoder_inputs: torch.Tensor) -> torch.Tensor:
        b, t = decoder_ids.shape
        encoder = self.model.get_encoder()
        mask = encoder_inputs[-1] if self.text else None
        encode = len(encoder_inputs) == (2 if self.text else 1)
        if encode and self.text:
            encoded = encoder(input_ids=encoder_inputs[0], attention_mask=mask).last_hidden_state
        elif encode:
            encoded = encoder(encoder_inputs[0]).last_hidden_state
        else:  # the cross keys and values are read from the buffers: only its shape counts
            encoded = torch.zeros(self.encoded_shape, dtype=self.keys_0.dtype)
        slots = torch.arange(self.length, device=positions.device)
        allowed = slots.unsqueeze(0) <= positions.unsqueeze(1)  # [T, length]: causal
        dtype = self.keys_0.dtype
        causal = torch.zeros(b, 1, t, self.length, dtype=dtype).masked_fill(
            ~allowed.view(1, 1, t, self.length), torch.finfo(dtype).min)
        cache = _cache_class()(_BufferCache(self, positions, self.length),
                               _CrossSlots(self, self.layers, self.length), self.layers,
                               not encode, positions[0])
        logits = self.model(encoder_outputs=(encoded,), attention_mask=mask,
                            decoder_input_ids=decoder_ids, decoder_attention_mask=causal,
                            use_cache=True, **{self.cache_arg: cache}).logits
        return logits.index_select(1, last)[:, 0]


class _Seq2SeqPlans:
    """The compiled plans of one set of caches: the decode step's (key 1... tokens per
    call, as generate.py's) and a prefill plan per prompt bucket (key ("prefill",
    bucket)), all on the same buffers. Each is compiled from a Seq2SeqCacheModule made
    for it (the same buffers by name and shape), dropped after."""

    def __init__(self, model: torch.nn.Module, batch: int, length: int,
                 source: tuple[int, ...]) -> None:
        self.model = weakref.ref(model)
        self.shape = (batch, length, source)
        self.shapes = Seq2SeqCacheModule.probe(model, batch, source)
        self.first: CompiledModule | None = None
        self.plans: dict = {}

    def stale(self) -> bool:
        """Whether the model's weights changed since the plans were compiled."""
        return self.first is not None and bool(self.first.changed_weights())

    def get(self, key, example: list[torch.Tensor], device, progress) -> CompiledModule:
        plan = self.plans.get(key)
        if plan is None:
            module = Seq2SeqCacheModule(self.model(), *self.shape, shapes=self.shapes)
            plan = compile(module, example, device=device, progress=progress,
                           share_state=self.first)
            self.first = self.first or plan
            self.plans[key] = plan
        return plan


def _decoder_prompt(model, decoder_input_ids, batch: int) -> torch.Tensor:
    """The decoder's prompt: `decoder_input_ids`, else each row's decoder start token (the
    generation config's, else the model config's)."""
    if decoder_input_ids is None:
        start = getattr(getattr(model, "generation_config", None), "decoder_start_token_id",
                        None)
        start = start if start is not None else model.config.decoder_start_token_id
        if start is None:
            raise ValueError("give decoder_input_ids: the model has no decoder_start_token_id")
        return torch.full((batch, 1), int(start), dtype=torch.long)
    ids = torch.as_tensor(decoder_input_ids).long()
    ids = ids.expand(batch, -1) if ids.dim() == 2 and ids.shape[0] == 1 else ids
    if ids.dim() != 2 or ids.shape[0] != batch or ids.shape[1] == 0:
        raise ValueError(f"decoder_input_ids must be [batch {batch}, length > 0], got "
                         f"{list(ids.shape)}")
    return ids


def generate_seq2seq(model: torch.nn.Module, inputs: torch.Tensor, max_new_tokens: int | None,
                     sampling: Sampling, options: Options, eos_token_id,
                     max_length: int | None,
                     attention_mask: torch.Tensor | None, decoder_input_ids, device,
                     progress, beams: Beams) -> torch.Tensor:
    """generate() for an encoder-decoder model: `inputs` the encoder's (Whisper's
    input_features [B, mels, frames]; BART's and T5's input_ids [B, S], with
    `attention_mask`), continued from the decoder prompt `decoder_input_ids` (default:
    the decoder start token). Returns [B, prompt + new] decoder ids, as transformers'
    generate returns them; with `beams` of num_beams > 1, each row's best
    num_return_sequences ([B * num_return_sequences, prompt + new], beams.py), the
    encoder's inputs run once per beam."""
    text = _text_encoder(model)
    batch = inputs.shape[0]
    if text:
        vocab = model.get_input_embeddings().num_embeddings
        inputs = inputs.long()
        if inputs.dim() != 2 or inputs.shape[1] == 0:
            raise ValueError(f"input_ids must be [batch, length] with length > 0, got "
                             f"{list(inputs.shape)}")
        if int(inputs.min()) < 0 or int(inputs.max()) >= vocab:
            raise ValueError(f"input_ids hold ids outside the vocabulary [0, {vocab})")
        mask = torch.ones_like(inputs) if attention_mask is None else attention_mask
        if tuple(mask.shape) != tuple(inputs.shape) or not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"attention_mask must be input_ids' shape {list(inputs.shape)} "
                             f"of 0 (padding) and 1 (a token)")
        encoder_inputs = (inputs, mask.long())
    else:
        if attention_mask is not None and not bool((attention_mask == 1).all()):
            raise ValueError("this model's encoder takes no attention mask (Whisper's "
                             "features are padded to its window and used whole)")
        encoder_inputs = (inputs.to(next(model.parameters()).dtype),)
    ids = _decoder_prompt(model, decoder_input_ids, batch)
    vocab = model.get_output_embeddings().out_features
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise ValueError(f"decoder_input_ids hold ids outside the vocabulary [0, {vocab})")
    length = ids.shape[1]
    new = _new_tokens(length, max_new_tokens, max_length)
    if new <= 0:
        return no_decoding(ids.repeat_interleave(beams.num_return_sequences, 0), options)
    ids = beams.expand(ids)  # a row per beam
    encoder_inputs = tuple(beams.expand(t) for t in encoder_inputs)
    batch = ids.shape[0]
    # the decoder's positions: Whisper's max_target_positions, BART's
    # max_position_embeddings (T5's relative positions have none)
    cache_len = cache_length(length + new, max_length, model.config,
                             ("max_target_positions", "max_position_embeddings"))
    eos = _eos_ids(model, eos_token_id)
    pad = _pad_id(model, eos)

    source = tuple(inputs.shape[1:])
    caches = _PLANS.setdefault(model, {})
    key = ("seq2seq", batch, source, cache_len)
    plans = caches.get(key)
    if plans is None or plans.stale():
        plans = caches[key] = _Seq2SeqPlans(model, batch, cache_len, source)

    width = _bucket(length, cache_len)
    padded = torch.zeros(batch, width, dtype=torch.long)  # id 0: any id of the vocabulary
    padded[:, :length] = ids
    held = encoder_inputs[1:]  # a text encoder's mask: the decode step's input too

    def prefill():
        example = Seq2SeqCacheModule.example(batch, width, encoder_inputs)
        return plans.get(("prefill", width), example, device, progress)(
            padded, torch.arange(width), torch.tensor([length - 1]), *encoder_inputs)

    def step(fed, i):
        example = Seq2SeqCacheModule.example(batch, 1, held)
        return plans.get(1, example, device, progress)(
            fed, torch.tensor([length + i]), torch.zeros(1, dtype=torch.long), *held)

    if beams.num_beams > 1:
        return beam_search(ids, prefill, step,
                           lambda parents: reorder_cache(plans, parents, device, progress),
                           new, beams, options, eos, pad)
    return decode(ids, prefill, step, new, sampling, options, eos, pad)
