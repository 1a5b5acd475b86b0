"""What kernelwright.generate's two paths share: the decoder-only one (generate.py) and
the encoder-decoder one (seq2seq.py).

The GPU side: `_BufferCache`, the cache object a model's attention layers write their
new keys and values through into a module's buffers, at the cache slots a plan takes as
an input; `_ShapeProbe`, an eager run's record of each layer's key and value shapes;
`_bucket`, a prompt's length rounded up to the plan that runs it; `_PLANS`, the
compiled plans kept per model. The host side: `Sampling` (greedy, or sampled after
`filter_logits`), the end and pad ids (`_eos_ids`, `_pad_id`) and `decode`, the loop
that chooses each token and feeds it back to the decode step.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch

MIN_PROMPT = 16  # the smallest prompt bucket
MIN_CACHE = 256  # the shortest KV cache made when max_length is not given

# model -> cache key -> the compiled plans of that cache (an object with `plans`: tokens
# per call -> CompiledModule), holding no reference to the model, so that they go with it
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _BufferCache:
    """The `cache` handed to the model: each attention layer's `update` writes its new
    keys and values at `positions` into the owner's buffers and returns the buffers'
    first `slots` positions (default all: the attention mask hides those not yet
    written)."""

    def __init__(self, owner: torch.nn.Module, positions: torch.Tensor,
                 slots: int | None = None) -> None:
        self.owner = owner
        self.positions = positions
        self.slots = slots

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        keys = getattr(self.owner, f"keys_{layer_idx}")
        values = getattr(self.owner, f"values_{layer_idx}")
        keys.index_copy_(2, self.positions, key_states.to(keys.dtype))
        values.index_copy_(2, self.positions, value_states.to(values.dtype))
        if self.slots is not None:
            return keys[:, :, :self.slots], values[:, :, :self.slots]
        return keys, values


class _ShapeProbe:
    """A cache that records the keys' and values' shapes of each layer (an eager run)."""

    def __init__(self) -> None:
        self.shapes: dict[int, tuple[torch.Size, torch.Size, torch.dtype]] = {}

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.shapes[layer_idx] = (key_states.shape, value_states.shape, key_states.dtype)
        return key_states, value_states


def _bucket(n: int, cap: int) -> int:
    """`n` rounded up to a power of two, at least MIN_PROMPT, at most `cap`."""
    return min(max(MIN_PROMPT, 1 << (n - 1).bit_length()), cap)


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


def decode(logits: torch.Tensor, step: Callable[[torch.Tensor, int], torch.Tensor],
           new: int, sampling: Sampling, eos: list[int], pad: int | None) -> list[torch.Tensor]:
    """Up to `new` tokens ([B, 1] each) from the prompt's `logits` [B, vocab]: each chosen
    by `sampling`, then fed to `step(tokens [B, 1], i)` (the i-th step after the prompt),
    which returns the next logits. A row that produced an id of `eos` goes on with `pad`;
    the loop ends when every row has ended."""
    out = []
    done = torch.zeros(logits.shape[0], dtype=torch.bool)
    for i in range(new):
        token = sampling.choose(logits)
        if eos:
            token = torch.where(done, torch.tensor(pad), token)
            done |= torch.isin(token, torch.tensor(eos))
        out.append(token.unsqueeze(1))
        if i == new - 1 or bool(done.all()):
            break
        # an ended row's next token is its own business (rows never attend to each
        # other): an id of the vocabulary, whatever the pad id is
        fed = torch.where(done, 0, token) if eos else token
        logits = step(fed.unsqueeze(1), i)
    return out


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
