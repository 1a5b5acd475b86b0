"""What kernelwright.generate's two paths share: the decoder-only one (generate.py) and
the encoder-decoder one (seq2seq.py).

The GPU side: `_BufferCache`, the cache object a model's attention layers write their
new keys and values through into a module's buffers, at the cache slots a plan takes as
an input, and its recurrent layers (Mamba's) their convolution and SSM states;
`_ShapeProbe`, an eager run's record of each layer's key and value (or state) shapes;
`_bucket`, a prompt's length rounded up to the plan that runs it; `_PLANS`, the
compiled plans kept per model; `reorder_cache`, the plan that moves a cache's rows after
their beams (beam search). The host side: `Sampling` (greedy, or sampled after
`filter_logits`), `Options` (transformers' logits processors, stopping criteria and
streamer), the end and pad ids (`_eos_ids`, `_pad_id`) and `decode`, the loop that
chooses each token and feeds it back to the decode step.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .compiler import compile

MIN_PROMPT = 16  # the smallest prompt bucket
MIN_CACHE = 256  # the shortest KV cache made when max_length is not given

CACHE_BUFFERS = ("keys_", "values_", "conv_", "ssm_")  # the names of a cache's buffers

# model -> cache key -> the compiled plans of that cache (an object with `plans`: tokens
# per call -> CompiledModule), holding no reference to the model, so that they go with it
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fresh_conv(conv_states: torch.Tensor, kernel: int) -> torch.Tensor:
    """A prompt's convolution inputs [B, D, T] as transformers' LinearAttentionLayer returns
    them with no state before: left-padded with zeros to at least `kernel` positions."""
    short = kernel - conv_states.shape[-1]
    return torch.nn.functional.pad(conv_states, (short, 0)) if short > 0 else conv_states


class _States:
    """What a model's recurrent layers (transformers' linear attention layers: Mamba's and
    Mamba2's convolution and SSM states) ask of their cache beyond their states: no past
    recorded (no speculative rollback), no intermediate states kept, no token count."""

    def is_recording_past(self, layer_idx: int) -> bool:
        return False

    def get_recurrent_states_to_keep(self, layer_idx: int | None = None) -> int:
        return 0

    def increase_count(self, layer_idx: int, state_idx: int = 0) -> None:
        pass


class _BufferCache(_States):
    """The `cache` handed to the model: each attention layer's `update` writes its new
    keys and values at `positions` into the owner's buffers and returns the buffers'
    first `slots` positions (default all: the attention mask hides those not yet
    written). Each recurrent layer reads and writes its states in the owner's buffers
    `conv_{layer}_{state}` ([B, D, kernel]: the last inputs of its convolution) and
    `ssm_{layer}_{state}` (its SSM state: Mamba [B, D, N], Mamba2 [B, H, P, N]); `fresh`:
    the tokens start the sequence (a prompt), the states before them zeros, else they
    continue from the buffers' states (a decode step: transformers' one-token path,
    which updates the convolution's buffer in place)."""

    def __init__(self, owner: torch.nn.Module, positions: torch.Tensor,
                 slots: int | None = None, fresh: bool = False) -> None:
        self.owner = owner
        self.positions = positions
        self.slots = slots
        self.fresh = fresh

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        keys = getattr(self.owner, f"keys_{layer_idx}")
        values = getattr(self.owner, f"values_{layer_idx}")
        keys.index_copy_(2, self.positions, key_states.to(keys.dtype))
        values.index_copy_(2, self.positions, value_states.to(values.dtype))
        if self.slots is not None:
            return keys[:, :, :self.slots], values[:, :, :self.slots]
        return keys, values

    def has_previous_state(self, layer_idx: int | None = None,
                           state_idx: int | None = None) -> bool:
        return not self.fresh

    def get_conv_state(self, layer_idx: int, state_idx: int = 0) -> torch.Tensor | None:
        return None if self.fresh else getattr(self.owner, f"conv_{layer_idx}_{state_idx}")

    def update_conv_state(self, conv_states: torch.Tensor, layer_idx: int, state_idx: int = 0,
                          **kwargs) -> torch.Tensor:
        """The convolution's inputs [B, D, T] after those before them (zeros: `fresh`),
        the last `kernel` of them written into the buffer."""
        buffer = getattr(self.owner, f"conv_{layer_idx}_{state_idx}")
        kernel = buffer.shape[-1]
        full = (_fresh_conv(conv_states, kernel) if self.fresh
                else torch.cat([buffer.to(conv_states.dtype), conv_states], dim=-1))
        buffer.copy_(full[..., -kernel:].to(buffer.dtype))
        return full

    def get_recurrent_state(self, layer_idx: int, state_idx: int = 0) -> torch.Tensor | None:
        return None if self.fresh else getattr(self.owner, f"ssm_{layer_idx}_{state_idx}")

    def update_recurrent_state(self, recurrent_states, layer_idx: int, state_idx: int = 0,
                               **kwargs) -> torch.Tensor:
        """The SSM state after the tokens (the last of a list of them) into the buffer."""
        buffer = getattr(self.owner, f"ssm_{layer_idx}_{state_idx}")
        last = recurrent_states if isinstance(recurrent_states, torch.Tensor) \
            else recurrent_states[-1]
        buffer.copy_(last.to(buffer.dtype))
        return buffer


class _ShapeProbe(_States):
    """A cache that records the keys' and values' shapes of each attention layer and the
    states' of each recurrent layer (an eager run from no state)."""

    def __init__(self) -> None:
        self.shapes: dict[int, tuple[torch.Size, torch.Size, torch.dtype]] = {}
        # buffer name (conv_{layer}_{state}, ssm_{layer}_{state}) -> (shape, dtype)
        self.states: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.shapes[layer_idx] = (key_states.shape, value_states.shape, key_states.dtype)
        return key_states, value_states

    def has_previous_state(self, layer_idx=None, state_idx=None) -> bool:
        return False

    def get_conv_state(self, layer_idx, state_idx=0):
        return None

    def update_conv_state(self, conv_states, layer_idx, state_idx=0, conv_kernel_size=None,
                          **kwargs):
        # transformers' layer keeps `conv_kernel_size` inputs (its first call's count without)
        kernel = conv_kernel_size or conv_states.shape[-1]
        self.states[f"conv_{layer_idx}_{state_idx}"] = (
            (*conv_states.shape[:-1], kernel), conv_states.dtype)
        return _fresh_conv(conv_states, kernel)

    def get_recurrent_state(self, layer_idx, state_idx=0):
        return None

    def update_recurrent_state(self, recurrent_states, layer_idx, state_idx=0, **kwargs):
        last = recurrent_states if isinstance(recurrent_states, torch.Tensor) \
            else recurrent_states[-1]
        self.states[f"ssm_{layer_idx}_{state_idx}"] = (tuple(last.shape), last.dtype)
        return last


class _Reorder(torch.nn.Module):
    """The cache buffers (`keys_{i}`, `values_{i}`, a recurrent layer's `conv_*` and `ssm_*`
    states) of a plan's `state`, as buffers of the
    same names and shapes; forward(parents [batch]) makes each buffer's row r the row
    parents[r] was (through a copy: the rows move among themselves)."""

    def __init__(self, state) -> None:
        super().__init__()
        self.names = [name for name, _ in state if name.startswith(CACHE_BUFFERS)]
        for name, spec in state:
            if name in self.names:
                self.register_buffer(name, torch.zeros(spec.shape,
                                                       dtype=getattr(torch, spec.torch_dtype)))

    def forward(self, parents: torch.Tensor) -> None:
        for name in self.names:
            buffer = getattr(self, name)
            buffer.copy_(buffer.index_select(0, parents))


def reorder_cache(plans, parents: torch.Tensor, device, progress) -> None:
    """Make each row r of the cache that `plans` share (a `first` plan whose state it is,
    and `plans`: key -> plan) the row parents[r] was: a plan of its own (key "reorder"),
    compiled on first use, sharing the cache buffers with the others."""
    plan = plans.plans.get("reorder")
    if plan is None:
        plan = plans.plans["reorder"] = compile(
            _Reorder(plans.first.plan.state), [parents], device=device, progress=progress,
            share_state=plans.first)
    plan(parents)


def cache_length(need: int, max_length: int | None, config, fields: tuple[str, ...]) -> int:
    """A KV cache's length: `max_length`, else `need` rounded up to a power of two, at
    least MIN_CACHE; at most the model's positions, the first of `config`'s `fields` it
    sets (none: no bound), a ValueError naming it past them."""
    field = next((f for f in fields if getattr(config, f, None)), None)
    positions = getattr(config, field) if field else None
    if max_length is not None:
        length = max_length
    else:
        length = max(MIN_CACHE, 1 << (need - 1).bit_length())
        length = max(need, min(length, positions)) if positions else length
    if positions and length > positions:
        raise ValueError(f"{length} tokens exceed the model's {field}: {positions}")
    return length


def _bucket(n: int, cap: int | None) -> int:
    """`n` rounded up to a power of two, at least MIN_PROMPT, at most `cap` (None: none)."""
    n = max(MIN_PROMPT, 1 << (n - 1).bit_length())
    return n if cap is None else min(n, cap)


def _new_tokens(length: int, max_new_tokens: int | None, max_length: int | None) -> int:
    """How many tokens follow a prompt of `length`: `max_new_tokens`, at most up to
    `max_length` tokens in all."""
    if max_new_tokens is None and max_length is None:
        raise ValueError("give max_new_tokens or max_length")
    if max_length is not None and length >= max_length:
        raise ValueError(f"the prompt ({length} tokens) leaves no room in max_length "
                         f"{max_length}")
    new = max_new_tokens if max_new_tokens is not None else max_length - length
    return new if max_length is None else min(new, max_length - length)


def filter_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """`logits` [B, vocab] divided by `temperature`, with -inf for every token outside the
    `top_k` most likely and outside the smallest set of most likely tokens whose
    probability reaches `top_p` (at least one kept), in transformers' order
    (temperature, top-k, top-p)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    logits = logits.float() / temperature
    if top_k is not None and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = ordered.softmax(-1)
        # a token goes when the tokens more likely than it already reach top_p
        drop = probs.cumsum(-1) - probs >= top_p
        drop[:, 0] = False
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return logits


@dataclass
class Sampling:
    """How the next token is chosen: the argmax (transformers' greedy search), else drawn
    with `generator` from the softmax of `filter_logits`."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    generator: torch.Generator | None = None

    def choose(self, logits: torch.Tensor) -> torch.Tensor:
        """The next token of each row of `logits` [B, vocab]."""
        if not self.do_sample:
            return logits.argmax(-1)
        probs = filter_logits(logits, self.temperature, self.top_k, self.top_p).softmax(-1)
        return torch.multinomial(probs, 1, generator=self.generator)[:, 0]


@dataclass
class Options:
    """transformers' generation options beyond the choice of a token, under the names of
    its `model.generate`: the logits processors it builds from `repetition_penalty`,
    `no_repeat_ngram_size`, `min_length` and `min_new_tokens`, the caller's
    `logits_processor`, the caller's `stopping_criteria`, `stop_strings` (with the
    `tokenizer` that reads them) and a `streamer`."""

    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    min_length: int | None = None
    min_new_tokens: int | None = None
    logits_processor: list | None = None
    stopping_criteria: list | None = None
    stop_strings: str | list[str] | None = None
    tokenizer: object = None
    streamer: object = None

    def processors(self, length: int, eos: list[int], pads: torch.Tensor | None):
        """The logits processors for a prompt of `length` tokens (`pads`: each row's left
        padding, which repetition_penalty leaves out), in transformers' order
        (`_get_logits_processor`): repetition penalty, no repeated n-grams, min_length,
        min_new_tokens (these two only with an end token), then `logits_processor`, each
        one taking the place of ours of its type, the others after; None when there is
        none. Temperature, top-k and top-p come after them (Sampling.choose)."""
        from transformers.generation import logits_process as lp

        ours = []
        if self.repetition_penalty is not None and self.repetition_penalty != 1.0:
            ours.append(lp.RepetitionPenaltyLogitsProcessor(float(self.repetition_penalty),
                                                            prompt_ignore_length=pads))
        if self.no_repeat_ngram_size is not None and self.no_repeat_ngram_size > 0:
            ours.append(lp.NoRepeatNGramLogitsProcessor(self.no_repeat_ngram_size))
        if eos and self.min_length is not None and self.min_length > 0:
            ours.append(lp.MinLengthLogitsProcessor(self.min_length, eos))
        if eos and self.min_new_tokens is not None and self.min_new_tokens > 0:
            ours.append(lp.MinNewTokensLengthLogitsProcessor(length, self.min_new_tokens, eos))
        theirs = list(self.logits_processor or [])
        chosen = [next((t for t in theirs if type(t) is type(o)), o) for o in ours]
        chosen += [t for t in theirs if not any(t is c for c in chosen)]
        return lp.LogitsProcessorList(chosen) if chosen else None

    def criteria(self):
        """The stopping criteria besides the end token and the length: `stopping_criteria`
        and a StopStringCriteria of `stop_strings`; None when there is none."""
        from transformers.generation import stopping_criteria as sc

        criteria = list(self.stopping_criteria or [])
        if self.stop_strings is not None:
            if self.tokenizer is None:
                raise ValueError("stop_strings need the model's tokenizer: pass tokenizer=")
            criteria.append(sc.StopStringCriteria(self.tokenizer, self.stop_strings))
        return sc.StoppingCriteriaList(criteria) if criteria else None


def decode(ids: torch.Tensor, prefill: Callable[[], torch.Tensor],
           step: Callable[[torch.Tensor, int], torch.Tensor], new: int, sampling: Sampling,
           options: Options, eos: list[int], pad: int | None,
           pads: torch.Tensor | None = None) -> torch.Tensor:
    """`ids` [B, L] followed by up to `new` tokens, as transformers' sampling loop gives
    them. `prefill()` runs the prompt and returns its logits [B, vocab] (called once
    `options` are built, which may refuse them); `step(tokens [B, 1], i)` runs the i-th
    token after the prompt and returns the next logits. Each step the logits go through
    `options`' processors (given the ids so far; `pads`: each row's left padding) and
    `sampling` chooses a token per row. A row ends at an id of `eos` or where a stopping
    criterion says so (given the ids so far and the step's processed scores); with an end
    token an ended row goes on with `pad` (without one, as in transformers, with its own
    tokens). The loop ends when every row has ended. `options.streamer` gets the prompt,
    each step's tokens ([B]) and `end()`.
    """
    processors = options.processors(ids.shape[1], eos, pads)
    criteria = options.criteria()
    streamer = options.streamer
    if streamer is not None:
        streamer.put(ids.cpu())
    logits = prefill()
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    for i in range(new):
        scores = logits.float() if processors is None else processors(ids, logits.float())
        token = sampling.choose(scores)
        if eos:
            token = torch.where(done, torch.tensor(pad), token)
        ids = torch.cat([ids, token.unsqueeze(1)], dim=1)
        if streamer is not None:
            streamer.put(token)
        if eos:
            done |= torch.isin(token, torch.tensor(eos))
        if criteria is not None:
            done |= criteria(ids, scores)
        if i == new - 1 or bool(done.all()):
            break
        # an ended row's next token is its own business (rows never attend to each
        # other): an id of the vocabulary, whatever the pad id is
        fed = torch.where(done, 0, token) if eos else token
        logits = step(fed.unsqueeze(1), i)
    if streamer is not None:
        streamer.end()
    return ids


def no_decoding(ids: torch.Tensor, options: Options) -> torch.Tensor:
    """`ids` as they are, where no token follows: the streamer gets them and its end."""
    if options.streamer is not None:
        options.streamer.put(ids.cpu())
        options.streamer.end()
    return ids.clone()


def _generation_config(model):
    return getattr(model, "generation_config", None) or getattr(model, "config", None)


def _eos_ids(model, eos_token_id) -> list[int]:
    """The end-of-sequence ids: `eos_token_id`, else the model's generation config's."""
    if eos_token_id is None:
        eos_token_id = getattr(_generation_config(model), "eos_token_id", None)
    if eos_token_id is None:
        return []
    return [int(eos_token_id)] if isinstance(eos_token_id, int) else [int(e) for e in eos_token_id]


def _pad_id(model, eos: list[int]) -> int | None:
    """The id that follows an ended row's end token: the pad id, else the first end id."""
    pad = getattr(_generation_config(model), "pad_token_id", None)
    return int(pad) if pad is not None else (eos[0] if eos else None)
