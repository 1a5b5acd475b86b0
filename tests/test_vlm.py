"""kernelwright.generate with a LLaVA-style vision-language model (multimodal.py): the
images are inputs of the prompt's plan alone, the decode plan is the language model's,
and greedy tokens are eager transformers' generate's."""

import importlib

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="generate's tests need transformers (pip install -e '.[models]')")

import kernelwright  # noqa: E402
from kernelwright.generate import compiled_plans  # noqa: E402

generation = importlib.import_module("kernelwright.generate")  # the module, not the function

IMAGE = 120  # the image placeholder token
FEATURES = 16  # an image's features: (32 / 8)^2 patches, CLIP's class token dropped


def tiny_llava() -> torch.nn.Module:
    """A randomly initialised LLaVA: a two-layer CLIP vision tower on 32x32 images of 8x8
    patches, the projector, a two-layer Llama (weights large enough for varied tokens)."""
    torch.manual_seed(0)
    vision = transformers.CLIPVisionConfig(
        image_size=32, patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, projection_dim=32)
    text = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=256,
        initializer_range=0.2)
    config = transformers.LlavaConfig(vision_config=vision, text_config=text,
                                      image_token_index=IMAGE)
    return transformers.LlavaForConditionalGeneration(config).eval()


@pytest.fixture(scope="module")
def llava():
    return tiny_llava()


def prompt(before: int, after: int, images: int = 1, seed: int = 0) -> torch.Tensor:
    """Token ids: `before` text tokens, each image's FEATURES placeholders (as
    LlavaProcessor expands its image token), `after` text tokens."""
    gen = torch.Generator().manual_seed(seed)
    text = torch.randint(1, 100, (before + after,), generator=gen)
    return torch.cat([text[:before], torch.full((FEATURES * images,), IMAGE), text[before:]])


def pixels(n: int, seed: int, size: int = 32) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def transformers_greedy(model, ids, px, new, **kw):
    return model.generate(input_ids=ids, pixel_values=px, max_new_tokens=new, do_sample=False,
                          eos_token_id=None, pad_token_id=0, **kw)


def lm_bytes(model) -> int:
    """The bytes of the language model's weights (without the vision tower and projector)."""
    return sum(p.numel() * 4 for name, p in model.named_parameters()
               if not name.startswith(("model.vision_tower", "model.multi_modal_projector")))


def test_greedy_tokens_are_eager_transformers_and_decode_runs_the_language_model(llava):
    """One image: transformers' greedy tokens; the image changes them. Two plans: the
    prompt's, with the image an input, and the decode step's, holding the language
    model's weights alone (not the vision tower's)."""
    ids = prompt(3, 4)[None]
    px = pixels(1, 1)
    got = kernelwright.generate(llava, ids, pixel_values=px, max_new_tokens=10, eos_token_id=[])
    assert torch.equal(got, transformers_greedy(llava, ids, px, 10))
    assert not torch.equal(got, transformers_greedy(llava, ids, pixels(1, 2), 10))
    assert compiled_plans(llava) == 2
    plans = next(iter(generation._PLANS[llava].values())).plans
    decode = plans[1]
    prefill = next(p for key, p in plans.items() if key != 1)
    assert len(decode.plan.inputs) == 4 and len(prefill.plan.inputs) == 5  # + pixel_values
    held = sum(b.size for bid in decode.plan.constants for b in decode.exe.segments[bid]
               if bid not in {spec.buffer for _, spec in decode.plan.state})
    assert held < 1.1 * lm_bytes(llava) < held + sum(  # no vision weight in the decode plan
        p.numel() * 4 for p in llava.model.vision_tower.parameters())


def test_a_batch_of_two_images_with_left_padding(llava):
    """Two prompts of different lengths, an image each, left-padded with their mask:
    transformers' tokens with that mask, each row's those of its prompt alone."""
    rows = [prompt(2, 5, seed=3), prompt(1, 1, seed=4)]
    width = max(len(r) for r in rows)
    ids = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = r
        mask[i, width - len(r):] = 1
    px = pixels(2, 5)
    got = kernelwright.generate(llava, ids, pixel_values=px, attention_mask=mask,
                                max_new_tokens=8, eos_token_id=[])
    assert torch.equal(got, transformers_greedy(llava, ids, px, 8, attention_mask=mask))
    for i, r in enumerate(rows):
        alone = transformers_greedy(llava, r[None], px[i:i + 1], 8)
        assert torch.equal(got[i, width:], alone[0, len(r):]), i


def test_images_of_a_compiled_shape_compile_nothing_another_shape_a_prompt_plan():
    """Another image and prompt of the same shapes (and bucket) compile nothing; two
    images in a prompt (pixel_values of another shape) one more prompt plan, the decode
    step shared; a text prompt alone another."""
    model = tiny_llava()
    for seed in (1, 2):
        ids = prompt(2 + seed, 3, seed=seed)[None]
        px = pixels(1, seed)
        got = kernelwright.generate(model, ids, pixel_values=px, max_new_tokens=6,
                                    eos_token_id=[])
        assert torch.equal(got, transformers_greedy(model, ids, px, 6)), seed
        assert compiled_plans(model) == 2
    ids = prompt(2, 3, images=2)[None]  # 37 tokens: the 64-token bucket
    px = pixels(2, 7)
    got = kernelwright.generate(model, ids, pixel_values=px, max_new_tokens=6, eos_token_id=[])
    assert torch.equal(got, transformers_greedy(model, ids, px, 6))
    assert compiled_plans(model) == 3
    text = torch.randint(1, 100, (1, 5), generator=torch.Generator().manual_seed(8))
    got = kernelwright.generate(model, text, max_new_tokens=6, eos_token_id=[])
    assert torch.equal(got, model.generate(input_ids=text, max_new_tokens=6, do_sample=False,
                                           eos_token_id=None, pad_token_id=0))
    assert compiled_plans(model) == 4


def test_bad_prompt_inputs_are_refused(llava):
    ids = prompt(2, 2)[None]
    with pytest.raises(TypeError, match="pixel_value"):  # a misspelt keyword
        kernelwright.generate(llava, ids, pixel_value=pixels(1, 0), max_new_tokens=2)
    with pytest.raises(TypeError, match="position_ids"):  # one generate gives itself
        kernelwright.generate(llava, ids, position_ids=torch.arange(ids.shape[1]),
                              max_new_tokens=2)
    with pytest.raises(TypeError, match="tensors"):
        kernelwright.generate(llava, ids, pixel_values=pixels(1, 0).tolist(), max_new_tokens=2)
    # images of shapes no prompt ran with yet: the model's own check, computed by the
    # prompt plan (capture._lower_check), refuses them
    fewer = prompt(2, 2, images=2)[None]
    fewer[0, 3] = 5  # 31 image tokens for 32 features
    with pytest.raises(RuntimeError, match="(?s)check failed: .*modeling_llava"):
        kernelwright.generate(llava, fewer, pixel_values=pixels(2, 0), max_new_tokens=2)
    right = prompt(2, 2, images=2)[None]
    kernelwright.generate(llava, right, pixel_values=pixels(2, 0), max_new_tokens=2)
    kernelwright.generate(llava, ids, pixel_values=pixels(1, 0), max_new_tokens=2)
    wrong = ids.clone()
    wrong[0, 0] = IMAGE  # 17 image tokens, where the compiled plan's prompt had 16
    with pytest.raises(ValueError, match="17 image tokens .* have 16 features"):
        kernelwright.generate(llava, wrong, pixel_values=pixels(1, 0), max_new_tokens=2)
    whisper = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
        vocab_size=64, num_mel_bins=8, encoder_layers=1, decoder_layers=1, d_model=16,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
        decoder_ffn_dim=16, max_source_positions=4, max_target_positions=16, pad_token_id=0,
        decoder_start_token_id=1)).eval()
    with pytest.raises(TypeError, match="encoder-decoder"):
        kernelwright.generate(whisper, torch.zeros(1, 8, 8), max_new_tokens=2,
                              decoder_position_ids=torch.zeros(1, 1, dtype=torch.long))
