"""Text generation with a transformers causal language model on kernelwright's kernels.

`generate(model, input_ids, max_new_tokens=...)` runs a causal LM (Llama, Qwen2,
Mistral, GPT-2, ...) with a static KV cache held on the GPU: `CacheModule` wraps the
model with the cache's keys and values as registered buffers that its forward
updates in place, so a compiled plan carries them from call to call
(CompiledModule.state). One plan decodes a token ([B, 1]); a prompt runs through a
plan for its length rounded up to a power of two (at least MIN_PROMPT, at most the
cache's length), right-padded: the causal mask keeps the padding out of every real
token's attention, the logits are taken at the last real token, and decoding starts
at the real length, overwriting the padded slots before any query may see them. All
plans of one cache share its buffers (compile's `share_state`) and are kept on the
model (`compiled_plans`), so another call whose prompt falls in a compiled bucket
compiles nothing; they hold one copy of the model's weights on the GPU, uploaded by
the first (compile's `share_state` shares equal constants too; `device_bytes`).

A padded batch (`attention_mask`, left padding as transformers expects) runs on the
same plans: every plan takes each row's count of left padding (`pads`, [B]) as an
input beside the cache positions, and builds from both the additive attention mask
(a row's real tokens see only its slots from its first token on) and the position ids
(slot - pads, transformers' cumsum of the mask). The cache's slots are the padded
positions, one set for all rows; a row's padding slots are written like any other and
masked for its tokens, while a padding token attends to itself alone (no row of the
mask all hidden, whose softmax would not be finite). The model gets this 4-D additive
mask and uses it as is (transformers builds none). Without a mask the pads are zeros:
the same plans and kernel count (docs/DECISIONS.md), no plan per mask. Right padding
(transformers would continue after the padding) is refused.

Sliding attention: a layer with a sliding window sees only the keys fewer than the window
before each query. Where every layer slides (Mistral) the one mask has the window; where
`config.layer_types` mix full and sliding attention (Gemma 2 and 3, Qwen2 with
max_window_layers) the model gets a mask per kind (transformers' mask mapping, each layer
taking its kind's: `attention_windows`). Every layer's cache holds all positions (no ring
buffer), so generation runs past the window as far as the model's positions.

State-space models (Mamba, Mamba2: `config.layer_types` all linear attention,
`recurrent`) keep per layer a convolution state [B, D, kernel] and an SSM state (Mamba
[B, D, N], Mamba2 [B, H, P, N]) instead of keys and values: CacheModule holds them as
buffers (`conv_{layer}_{state}`, `ssm_{layer}_{state}`) that the model reads and writes
through decoding._BufferCache, the prompt's plan (`fresh`) from zero states, the decode
plan from the buffers (transformers' one-token path, in place). A prompt is left-padded to
its bucket, the padding hidden by transformers' 2-D mask (the model zeroes a padding
token's inputs), where an eager probe shows that padding leaves the states zero
(`CacheModule.pads_keep_state`): then the prompt runs as if alone. Else (an in_proj bias
reaches the padding's convolution inputs) each prompt length is a plan of its own. A
batch's `attention_mask` is that same 2-D mask; positions do not exist. A hybrid (Jamba,
Bamba, Qwen3-Next: attention layers beside recurrent ones; Falcon-H1: layers of both) holds
both in one CacheModule, keys and values per attention layer, states per recurrent one; the
model gets transformers' mask mapping (the additive mask per attention kind, the 2-D one for
the recurrent kinds). Its prompt is left-padded to its bucket (at most the cache's length
less the new tokens) where the probe allows, the additive mask hiding the padding as a
batch's (`pads`), the decode steps writing the slots after it; else it runs unpadded.

Tokens are chosen on the host (decoding.decode): greedily (the argmax, as transformers'
greedy search) or sampled with a torch.Generator after temperature, top-k and top-p
filtering, the logits first through transformers' own logits processors (repetition
penalty, ...); transformers' stopping criteria and streamers take the tokens as its
`model.generate` gives them. Beam search (beams.py) runs each row as num_beams rows of
the plans, the cache's rows following their beams through a plan of their own
(decoding.reorder_cache).
"""

from __future__ import annotations

import inspect
import weakref

import torch

from .beams import Beams, beam_search
from .compiler import CompiledModule, compile
from .decoding import (
    _PLANS,
    MIN_PROMPT,  # noqa: F401 (generate's prompt buckets, read by tools)
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
    filter_logits,  # noqa: F401 (kernelwright.generate.filter_logits)
    no_decoding,
    reorder_cache,
)
from .multimodal import check_placeholders, inputs_key, placeholders, prompt_inputs
from .runtime.runtime import device_bytes as _device_bytes
from .seq2seq import generate_seq2seq


class CacheModule(torch.nn.Module):
    """A causal LM with a static KV cache of `length` positions for `batch` sequences,
    its keys and values registered buffers (`keys_{i}`, `values_{i}`: [batch, heads,
    length, head_dim]). forward(input_ids [batch, T], positions [T], last [1], pads
    [batch]) runs the tokens at cache positions `positions` (the slots, one set for all
    rows), writes their keys and values into the cache, and returns the logits of token
    `last` ([batch, vocab]). Row b's first `pads[b]` slots are its left padding: its
    tokens' position ids count from slot pads[b] (transformers' cumsum of the attention
    mask), and each of its real tokens attends to the slots from pads[b] up to its own
    (in a sliding layer, fewer than its window before it: `attention_windows`); a
    padding token attends to itself alone (its outputs reach no real token). All pads 0:
    no padding. Every layer's cache holds all `length` positions, a sliding layer's mask
    hiding those behind its window. A recurrent layer's states are buffers too
    (`conv_{i}_{state}`, `ssm_{i}_{state}`: decoding._BufferCache), from zeros where
    `fresh` (a prompt's plan), its padding zeroed by the 2-D mask."""

    def __init__(self, model: torch.nn.Module, batch: int, length: int,
                 extras: tuple[str, ...] = (), fresh: bool = False) -> None:
        super().__init__()
        self.model = model
        self.length = length
        self.batch = batch
        self.extras = extras
        self.recurrent = recurrent(text_config(model))
        self.fresh = fresh
        self.windows = attention_windows(text_config(model))  # {}: no attention layer
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.keeps_logits = "logits_to_keep" in params
        probe = _ShapeProbe()
        with torch.no_grad():
            self._run(torch.zeros(batch, 1, dtype=torch.long),
                      torch.zeros(batch, 1, dtype=torch.long), probe,
                      self._masks(lambda window: torch.zeros(batch, 1, 1, 1), None))
        self.attention = sorted(probe.shapes)  # the attention layers' indices
        for i in self.attention:
            k, v, dtype = probe.shapes[i]
            self.register_buffer(f"keys_{i}", torch.zeros(batch, k[1], length, k[3], dtype=dtype))
            self.register_buffer(f"values_{i}",
                                 torch.zeros(batch, v[1], length, v[3], dtype=dtype))
        for name, (shape, dtype) in probe.states.items():  # a recurrent layer's states
            self.register_buffer(name, torch.zeros(shape, dtype=dtype))

    @staticmethod
    def example(batch: int, tokens: int, extras: tuple = ()) -> list[torch.Tensor]:
        """forward's inputs for `tokens` tokens per row (what a plan is compiled for), then
        `extras` (the values of the module's `extras`)."""
        return [torch.zeros(batch, tokens, dtype=torch.long), torch.arange(tokens),
                torch.zeros(1, dtype=torch.long), torch.zeros(batch, dtype=torch.long), *extras]

    def _masks(self, make, states):
        """The `attention_mask` the model takes: `make(window)` for its one mask, or a
        dict of them by layer kind (transformers' mask mapping, used as given); a model
        of recurrent layers alone `states`, the 2-D mask (None: no padding), which a
        hybrid's mapping holds for its recurrent layers' kinds."""
        masks = {kind: make(window) for kind, window in self.windows.items()}
        if not self.recurrent:
            return masks[None] if None in masks else masks
        return {**masks, **dict.fromkeys(STATE_KINDS, states)} if masks else states

    def _run(self, input_ids, position_ids, cache, mask, last=None, extras=()):
        kwargs = {self.cache_arg: cache, "use_cache": True, **dict(zip(self.extras, extras))}
        if last is not None and self.keeps_logits:
            kwargs["logits_to_keep"] = last
        if self.windows:  # a model of recurrent layers alone has no positions
            kwargs["position_ids"] = position_ids
        return self.model(input_ids=input_ids, attention_mask=mask, **kwargs).logits

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, last: torch.Tensor,
                pads: torch.Tensor, *extras: torch.Tensor) -> torch.Tensor:
        b, t = input_ids.shape
        # a prompt's padding hidden from the recurrent layers' states: the 2-D mask
        states = (torch.arange(t, device=pads.device).view(1, t) >= pads.view(b, 1)).long() \
            if self.recurrent and self.fresh else None
        cache = _BufferCache(self, positions, fresh=self.fresh)
        if not self.windows:
            logits = self._run(input_ids, None, cache, states, last, extras)
            return self._last(logits, last)
        slots = torch.arange(self.length, device=positions.device).view(1, 1, self.length)
        query = positions.view(1, t, 1)
        # a real token's keys start at its row's first real slot; a padding token's at itself
        start = torch.minimum(pads.view(b, 1, 1), query)  # [b, T, 1]
        seen = (slots <= query) & (slots >= start)  # [b, T, length]
        dtype = getattr(self, f"keys_{self.attention[0]}").dtype

        def additive(window: int | None) -> torch.Tensor:
            # transformers' sliding window: a key fewer than `window` positions back
            allowed = seen if window is None else seen & (slots > query - window)
            return torch.zeros(b, 1, t, self.length, dtype=dtype).masked_fill(
                ~allowed.unsqueeze(1), torch.finfo(dtype).min)

        position_ids = (positions.unsqueeze(0) - pads.unsqueeze(1)).clamp(min=0)  # [b, T]
        logits = self._run(input_ids, position_ids, cache, self._masks(additive, states), last,
                           extras)
        return self._last(logits, last)

    def _last(self, logits: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        if not self.keeps_logits or logits.shape[1] != 1:
            logits = logits.index_select(1, last)
        return logits[:, 0]

    def pads_keep_state(self, vocab: int) -> bool:
        """Whether left padding leaves a recurrent model's states as they were: a fresh
        module's two padding tokens (ids other than the embedding's padding_idx) leave
        every state buffer zero. Then each padding token's inputs to its layers are
        zeros (its conv buffer's entries, all it passes to later tokens' convolutions)
        and its SSM update from a zero state is zero (a second one would double a
        nonzero first), whatever tokens and however many: a prompt left-padded to its
        bucket runs as the prompt alone (transformers' Mamba and Mamba2 zero a padding
        token's inputs; an in_proj bias would not). A hybrid's attention layers pass
        the padding on, but each recurrent layer zeroes its inputs the same way, and the
        attention mask hides it from the real tokens."""
        pad = getattr(self.model.get_input_embeddings(), "padding_idx", None)
        ids = [i for i in range(vocab) if i != pad][:2]
        b = self.batch
        with torch.no_grad():
            self(torch.tensor([ids] * b), torch.arange(2), torch.tensor([1]),
                 torch.full((b,), 2))
        states = [buf for name, buf in self.named_buffers() if name.startswith(("conv_", "ssm_"))]
        return not any(bool(buf.any()) for buf in states)


class _Plans:
    """The compiled plans of one cache: the decode step's and one per prompt bucket, all
    reading and updating the same cache buffers on the GPU. Each is compiled from a
    CacheModule made for it (the same buffers by name and shape), dropped after."""

    def __init__(self, model: torch.nn.Module, batch: int, length: int) -> None:
        self.model = weakref.ref(model)
        self.shape = (batch, length)
        self.first: CompiledModule | None = None
        self.plans: dict = {}  # tokens per call (and prompt inputs' inputs_key) -> plan
        self.placeholders: dict = {}  # a prompt plan with inputs -> its image token count
        self.recurrent = recurrent(text_config(model))
        self._pads_keep_state: bool | None = None

    def pads_keep_state(self) -> bool:
        """A model's CacheModule.pads_keep_state (one with recurrent layers), found once."""
        if self._pads_keep_state is None:
            model = self.model()
            self._pads_keep_state = CacheModule(model, *self.shape, fresh=True).pads_keep_state(
                model.get_input_embeddings().num_embeddings)
        return self._pads_keep_state

    def stale(self) -> bool:
        """Whether the model's weights changed since the plans were compiled."""
        return self.first is not None and bool(self.first.changed_weights())

    def key(self, tokens: int, inputs: dict[str, torch.Tensor], fresh: bool = False):
        key = (tokens, inputs_key(inputs)) if inputs else tokens
        # a recurrent model's prompt starts from zero states, its steps from the buffers'
        return ("prompt", key) if fresh and self.recurrent else key

    def get(self, tokens: int, device, progress, inputs: dict[str, torch.Tensor] | None = None,
            fresh: bool = False) -> CompiledModule:
        """The plan that runs `tokens` tokens per row (with the prompt `inputs` the model
        takes by keyword, compiled for their shapes; `fresh`: a prompt, the first tokens),
        compiled if it is not yet."""
        inputs = inputs or {}
        key = self.key(tokens, inputs, fresh)
        plan = self.plans.get(key)
        if plan is None:
            example = CacheModule.example(self.shape[0], tokens, tuple(inputs.values()))
            plan = compile(CacheModule(self.model(), *self.shape, tuple(inputs), fresh), example,
                           device=device, progress=progress, share_state=self.first)
            self.first = self.first or plan
            self.plans[key] = plan
        return plan


def compiled_plans(model: torch.nn.Module) -> int:
    """How many plans `generate` holds for `model` (decode steps, prompt buckets and beam
    search's cache reorder, over all its caches)."""
    return sum(len(p.plans) for p in _PLANS.get(model, {}).values())


def device_bytes(model: torch.nn.Module) -> int:
    """The GPU memory `generate`'s plans for `model` allocate (weights, caches, inputs,
    outputs and intermediates; a buffer several plans share counted once)."""
    return _device_bytes([plan.exe for p in _PLANS.get(model, {}).values()
                          for plan in p.plans.values()])


def text_config(model: torch.nn.Module):
    """The config of the model's text decoder (None: the model has no config)."""
    config = getattr(model, "config", None)
    return config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config


ATTENTION_KINDS = ("full_attention", "sliding_attention")  # the layer_types generate runs
# the layer_types of transformers' linear attention layers (LinearAttentionLayer: a
# convolution state and a recurrent one: Mamba's, Mamba2's, Qwen3-Next's gated delta rule)
STATE_KINDS = ("linear_attention", "conv")
BOTH = "hybrid"  # a layer of both, its attention full (Falcon-H1's)


def recurrent(config) -> bool:
    """Whether some of the model's layers keep recurrent states: its `config.layer_types`
    hold STATE_KINDS or BOTH (Mamba, Mamba2; the hybrids Jamba, Bamba, Qwen3-Next,
    Falcon-H1, whose other layers attend)."""
    return bool(set(getattr(config, "layer_types", None) or ()) & {*STATE_KINDS, BOTH})


def attention_windows(config) -> dict[str | None, int | None]:
    """The attention masks the model takes, each as its sliding window (None: none, every
    earlier position seen): {None: window} where one mask serves every layer (Llama: no
    window; Mistral: every layer slides), else one per kind of `config.layer_types`
    mixing full and sliding attention (Gemma 2 and 3, Qwen2 with max_window_layers), the
    model picking each layer's mask by its kind. A model with recurrent layers: {} where
    no layer attends, else one per attention kind, "full_attention" always (the key
    Falcon-H1 reads); its recurrent kinds' masks come beside them (CacheModule._masks)."""
    window = getattr(config, "sliding_window", None) or None
    kinds = getattr(config, "layer_types", None)
    if kinds is None:
        return {None: window}
    other = sorted(set(kinds) - {*ATTENTION_KINDS, *STATE_KINDS, BOTH})
    if other:
        raise ValueError(f"generate runs layers of {', '.join(ATTENTION_KINDS)}, recurrent "
                         f"layers ({', '.join(STATE_KINDS)}) and layers of both ({BOTH}); "
                         f"this model has {', '.join(other)} layers")
    windows = {kind: window if kind == "sliding_attention" else None
               for kind in kinds if kind in ATTENTION_KINDS}
    if recurrent(config):
        attends = windows or BOTH in kinds
        return {"full_attention": None, **windows} if attends else {}
    return windows if len(set(windows.values())) > 1 else {None: next(iter(windows.values()))}


@torch.no_grad()
def generate(model: torch.nn.Module, input_ids: torch.Tensor, max_new_tokens: int | None = None,
             do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, generator: torch.Generator | None = None,
             eos_token_id: int | list[int] | None = None, max_length: int | None = None,
             attention_mask: torch.Tensor | None = None, device=None,
             progress: float | None = 2.0, decoder_input_ids: torch.Tensor | None = None,
             *, repetition_penalty: float | None = None,
             no_repeat_ngram_size: int | None = None, min_length: int | None = None,
             min_new_tokens: int | None = None, logits_processor=None, stopping_criteria=None,
             stop_strings: str | list[str] | None = None, tokenizer=None, streamer=None,
             num_beams: int = 1, length_penalty: float = 1.0,
             early_stopping: bool | str = False, num_return_sequences: int = 1,
             **inputs: torch.Tensor) -> torch.Tensor:
    """Continue each row of `input_ids` ([B, L] token ids) with up to `max_new_tokens`
    tokens computed by kernelwright's kernels, as transformers' `model.generate` does;
    returns [B, L + new] ids.

    `attention_mask` ([B, L], 1 for a token, 0 for padding) batches prompts of different
    lengths left-padded, as a tokenizer with padding_side="left" gives them: each row
    continues as transformers' generate with that mask continues it (its position ids
    counting from its first token, its padding hidden from its attention).

    Greedy (`do_sample=False`) picks the most likely token; sampling draws from the
    softmax of logits / `temperature`, kept to the `top_k` most likely tokens and the
    smallest set whose probability reaches `top_p` (`filter_logits`), with `generator`
    (a CPU torch.Generator: the same seed, the same tokens). A row that produced
    `eos_token_id` (an id or a list; default the model's generation config's) goes on
    with the pad token (the config's, else the end token) until all rows ended.
    `max_length` bounds prompt + new tokens and is the KV cache's length; without it
    the cache holds prompt and new tokens rounded up to a power of two, at least
    MIN_CACHE. `min_length` (prompt and new tokens) and `min_new_tokens` keep the end
    token out until then.

    transformers' `model.generate` options of the same names: `repetition_penalty`,
    `no_repeat_ngram_size`, `min_length` and `min_new_tokens` become its logits
    processors, then the `logits_processor` list (transformers' LogitsProcessor, or any
    callable (ids [B, n], scores [B, vocab]) -> scores; one of a type of ours takes its
    place), in transformers' order, before temperature, top-k and top-p. A row also ends
    where a `stopping_criteria` (StoppingCriteria: per-row done flags from the ids so far
    and the step's processed scores) or one of `stop_strings` (read with `tokenizer`)
    ends it; it goes on with the pad token where there is an end token (else, as in
    transformers, with its own tokens). A `streamer` (transformers' protocol:
    TextStreamer prints tokens as they come) gets the prompt, each step's tokens and its
    end. The model's generation_config is read for its end, pad and decoder start ids
    only.

    `num_beams` > 1 is transformers' beam search (beams.py; not with sampling, images or a
    streamer), with its `length_penalty`, `early_stopping` (True, False or "never") and
    `num_return_sequences` (at most num_beams): returns each row's best
    num_return_sequences hypotheses ([B * num_return_sequences, L + new], best first,
    padded as transformers pads them). Its plans run B * num_beams rows, and one more
    plan per cache moves the cache's rows after their beams.

    Plans are compiled once per cache length, batch and prompt bucket and
    kept on the model (`compiled_plans`); after the model's weights change they are
    compiled again. `device` and `progress` are compile's.

    An encoder-decoder model (config.is_encoder_decoder: Whisper, BART, T5) goes to
    seq2seq.py: `input_ids` are its encoder's inputs (Whisper's input_features),
    `attention_mask` their mask, and the decoder continues `decoder_input_ids` (default
    its start token); the decoder ids are returned.

    Other keyword arguments are tensors the model's forward takes with the prompt alone
    (multimodal.py): a vision-language model's `pixel_values` (LLaVA), its `input_ids`
    holding the image placeholder tokens. They are inputs of the prompt's plan, compiled
    for their shapes; the decode steps run the language model alone."""
    if model.training:
        raise ValueError("generate needs the model in eval mode (model.eval())")
    sampling = Sampling(do_sample, temperature, top_k, top_p, generator)
    options = Options(repetition_penalty, no_repeat_ngram_size, min_length, min_new_tokens,
                      logits_processor, stopping_criteria, stop_strings, tokenizer, streamer)
    beams = Beams(num_beams, length_penalty, early_stopping, num_return_sequences)
    beams.check(sampling, options)
    inputs = prompt_inputs(model, inputs)
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        if inputs:
            raise TypeError(f"generate takes no inputs {sorted(inputs)} for encoder-decoder "
                            f"models")
        return generate_seq2seq(model, input_ids, max_new_tokens, sampling, options,
                                eos_token_id, max_length, attention_mask, decoder_input_ids,
                                device, progress, beams)
    if inputs and num_beams > 1:
        raise ValueError("beam search with image inputs is not supported: pass num_beams=1")
    if decoder_input_ids is not None:
        raise ValueError("decoder_input_ids is for encoder-decoder models")
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must be [batch, length] with length > 0, got "
                         f"{list(input_ids.shape)}")
    pads = _left_padding(attention_mask, input_ids.shape)
    vocab = model.get_input_embeddings().num_embeddings
    ids = input_ids.long()
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise ValueError(f"input_ids hold ids outside the vocabulary [0, {vocab})")
    new = _new_tokens(ids.shape[1], max_new_tokens, max_length)
    if new <= 0:
        return no_decoding(ids.repeat_interleave(num_return_sequences, 0), options)
    ids, pads = beams.expand(ids), beams.expand(pads)  # a row per beam
    batch, length = ids.shape
    config = text_config(model)
    states, attends = recurrent(config), bool(attention_windows(config))
    cache_len = cache_length(length + new, max_length, config,
                             ("max_position_embeddings", "n_positions")) if attends else 0
    eos = _eos_ids(model, eos_token_id)
    pad = _pad_id(model, eos)

    caches = _PLANS.setdefault(model, {})
    plans = caches.get((batch, cache_len))
    if plans is None or plans.stale():
        plans = caches[(batch, cache_len)] = _Plans(model, batch, cache_len)

    if states:  # left-padded to its bucket where padding keeps the states, else as it is
        # (attention layers: the mask hides the padding, their cache holding it and the rest)
        cap = cache_len - new if attends else None
        width = _bucket(length, cap) if plans.pads_keep_state() else length
        lead, last = width - length, width - 1
    else:  # right-padded: the causal mask hides the padding
        width = _bucket(length, cache_len)
        lead, last = 0, length - 1
    key = plans.key(width, inputs, fresh=True)
    count = placeholders(model, ids) if inputs else None
    check_placeholders(count, plans.placeholders.get(key), inputs)
    padded = torch.full((batch, width), _filler(ids, vocab), dtype=torch.long)
    padded[:, lead:lead + length] = ids

    def prefill():
        logits = plans.get(width, device, progress, inputs, fresh=True)(
            padded, torch.arange(width), torch.tensor([last]), pads + lead, *inputs.values())
        if inputs:  # the plan's own check passed: later prompts must hold as many
            plans.placeholders[key] = count
        return logits

    def step(fed, i):
        return plans.get(1, device, progress)(
            fed, torch.tensor([lead + length + i]), torch.zeros(1, dtype=torch.long),
            pads + lead)

    if num_beams > 1:
        return beam_search(ids, prefill, step,
                           lambda parents: reorder_cache(plans, parents, device, progress),
                           new, beams, options, eos, pad, pads)
    return decode(ids, prefill, step, new, sampling, options, eos, pad, pads)


generate.compiled_plans = compiled_plans  # kernelwright.generate.compiled_plans(model)
generate.device_bytes = device_bytes


def _filler(ids: torch.Tensor, vocab: int) -> int:
    """The id that pads a prompt to its bucket: the least one the prompt does not hold
    (never a placeholder the model fills with an image's features; any id serves the
    causal mask), 0 where it holds every id."""
    free = torch.ones(vocab, dtype=torch.bool)
    free[ids.flatten()] = False
    return int(free.nonzero()[0]) if bool(free.any()) else 0


def _left_padding(attention_mask: torch.Tensor | None, shape: torch.Size) -> torch.Tensor:
    """Each row's count of left padding ([B] int64) in `attention_mask` ([B, L] of 0 and
    1, each row its zeros then its ones); zeros without a mask."""
    if attention_mask is None:
        return torch.zeros(shape[0], dtype=torch.long)
    if tuple(attention_mask.shape) != tuple(shape):
        raise ValueError(f"attention_mask must have input_ids' shape {list(shape)}, got "
                         f"{list(attention_mask.shape)}")
    mask = attention_mask.detach().cpu()
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (a token)")
    mask = mask.long()
    empty = (mask.sum(1) == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"attention_mask rows {empty} are all padding: each row needs a token")
    if bool((mask[:, 1:] < mask[:, :-1]).any()):
        raise ValueError("attention_mask must be left padding (each row's zeros before its "
                         "ones: the tokenizer's padding_side='left', as transformers expects "
                         "for generation); right padding or gaps are not supported")
    return (mask == 0).sum(1)
