"""The prompt-only inputs of kernelwright.generate: a vision-language model's images.

A LLaVA-style model (transformers' LlavaForConditionalGeneration: a vision tower, a
projector and a causal LM) takes `pixel_values` beside `input_ids` that hold image
placeholder tokens, as many per image as the image has features (LlavaProcessor
expands its image token so); its forward runs the vision tower and puts the projected
features in the placeholders' embeddings. Only the prompt needs them: transformers'
generate passes them on the first step alone. So in generate.py they are extra inputs
of the prompt plan (CacheModule's `extras`, passed to the model's forward by keyword,
the plan compiled for their shapes), and the decode plan is the text decode plan, the
language model alone.

What is checked here: each input is a tensor that the model's forward takes by that
name (not one generate gives it itself); the count of placeholders, which the model
checks itself (transformers' torch._check: the prompt plan computes it and a call whose
count does not fit its images raises, capture._lower_check). A prompt after the first
that ran a plan must hold as many placeholder tokens (`config.image_token_id`) as that
one, the features of images of the same shape: refused here before the call, with the
counts.

Not supported (refused by their models' errors, or giving other tokens): Qwen2-VL's
M-RoPE (3-D position ids from each image's grid, computed in its forward from the ids
and the cache position, where generate.py gives 1-D ones); PaliGemma's and Gemma 3's
attention both ways among an image's tokens (PaliGemma's over the whole prompt), where
generate.py's mask is causal; Idefics3 / SmolVLM, which select the real image tiles by
their values (`pixel_values[real_images_inds]`: a shape known only at run time).
"""

from __future__ import annotations

import inspect

import torch

# the model's forward arguments that CacheModule gives itself
OWN = ("input_ids", "attention_mask", "position_ids", "cache", "past_key_values", "use_cache",
       "logits_to_keep", "inputs_embeds")


def prompt_inputs(model: torch.nn.Module, inputs: dict) -> dict[str, torch.Tensor]:
    """`inputs` (generate's keyword arguments past its own) checked: each a tensor the
    model's forward takes by that name, other than those generate gives it (OWN)."""
    params = inspect.signature(model.forward).parameters
    unknown = sorted(n for n in inputs if n not in params or n in OWN)
    if unknown:
        raise TypeError(f"generate() got unexpected keyword arguments {unknown}: neither "
                        f"generate's nor inputs of {type(model).__name__}.forward that "
                        f"generate passes on (tensors other than {', '.join(OWN)})")
    bad = sorted(n for n, v in inputs.items() if not isinstance(v, torch.Tensor))
    if bad:
        raise TypeError(f"generate's inputs for the model's forward must be tensors: {bad}")
    return dict(inputs)


def placeholders(model: torch.nn.Module, ids: torch.Tensor) -> int | None:
    """How many image placeholder tokens (`config.image_token_id`) `ids` hold; None where
    the model's config names no such token."""
    token = getattr(getattr(model, "config", None), "image_token_id", None)
    return None if token is None else int((ids == int(token)).sum())


def check_placeholders(count: int | None, expected: int | None,
                       inputs: dict[str, torch.Tensor]) -> None:
    """A ValueError where a prompt's `count` of placeholders is not the `expected` one,
    that of the prompt the plan for images of these shapes ran (None: none ran yet; the
    plan's own check then judges it)."""
    if expected is not None and count != expected:
        raise ValueError(f"input_ids hold {count} image tokens where images of these "
                         f"shapes ({_shapes(inputs)}) have {expected} features")


def _shapes(inputs: dict[str, torch.Tensor]) -> str:
    return ", ".join(f"{n} {list(t.shape)}" for n, t in inputs.items())


def inputs_key(inputs: dict[str, torch.Tensor]) -> tuple:
    """What a prompt plan compiled for `inputs` is compiled for: their names, shapes and
    dtypes."""
    return tuple((n, tuple(t.shape), t.dtype) for n, t in inputs.items())
