"""float16 and bfloat16 stored as they are: inputs, weights and outputs of a half dtype
live in two-byte buffers (dtypes.PACKED), are computed in f32 and come back in their
dtype; each result matches PyTorch run in float32 on the same half values within the
harness's tolerance for these dtypes (check/tolerance.py: 1e-2)."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import kernelwright
from kernelwright import tune
from kernelwright.check.tolerance import Tolerance, outside
from kernelwright.dtypes import buffer_bytes
from kernelwright.generate import _PLANS
from kernelwright.ir.ir import GraphBuilder
from kernelwright.lower import attention as attention_ops
from kernelwright.runtime.runtime import default_device, open_device
from kernelwright.schedule.schedule import same_state_storage

HALVES = [torch.float16, torch.bfloat16]
STORED = {torch.float16: "f16", torch.bfloat16: "bf16"}


class Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def check_half(module: torch.nn.Module, *inputs: torch.Tensor):
    """Compile `module` (half weights, half inputs), run it on poisoned buffers and
    compare each output with the module run in float32 on the CPU from the same half
    values: same dtype as eager's, within the tolerance of that dtype. Returns the
    compiled module."""
    module = module.eval()
    with torch.no_grad():
        dtypes = [t.dtype for t in _leaves(module(*inputs))]
        reference = _float32_copy(module)
        want = _leaves(reference(*[t.float() if t.is_floating_point() else t for t in inputs]))
    compiled = kernelwright.compile(module, list(inputs))
    got = _leaves(compiled(*inputs, poison=True))
    assert len(got) == len(want)
    for g, w, dtype in zip(got, want, dtypes):
        assert g.dtype == dtype and g.shape == w.shape, (g.dtype, dtype, g.shape, w.shape)
        atol, rtol = Tolerance().for_dtype(dtype)
        bad = outside(g.float(), w.float(), atol, rtol)
        assert not bad.any(), (f"{int(bad.sum())} of {bad.numel()} elements off, largest "
                               f"error {(g.float() - w.float()).abs().max().item()}")
    return compiled


def _float32_copy(module: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(module).float()


def _leaves(out) -> list[torch.Tensor]:
    return torch.utils._pytree.tree_leaves(out)


def _buffers(compiled, kind: str):
    return [b for b in compiled.plan.buffers if b.kind == kind]


@pytest.mark.parametrize("dtype", HALVES)
def test_elementwise_is_one_kernel_and_stays_half(dtype):
    torch.manual_seed(0)
    x, y = torch.randn(4, 33).to(dtype), torch.randn(33).to(dtype)
    compiled = check_half(Fn(lambda a, b: torch.sigmoid(a) * b + torch.sin(a)), x, y)
    assert len(compiled.plan.kernels) == 1  # the chain computed in the narrowing copy
    inputs = _buffers(compiled, "input")
    assert [b.dtype for b in inputs] == [STORED[dtype]] * 2
    assert [b.nbytes for b in inputs] == [buffer_bytes(4 * 33, "f16"), 33 * 2 + 2]


@pytest.mark.parametrize("dtype", HALVES)
def test_odd_lengths(dtype):
    torch.manual_seed(1)
    for n in (1, 3, 7, 129):
        x = torch.randn(n).to(dtype)
        compiled = check_half(Fn(lambda a: a * 2.0 - 1.0), x)
        assert compiled.plan.buffers[compiled.plan.outputs[0].buffer].nbytes == \
            max(4, math.ceil(n * 2 / 4) * 4)


@pytest.mark.parametrize("dtype", HALVES)
def test_values_come_back_exactly(dtype):
    """Every half value read and stored again is the same bits (inf, NaN, subnormals)."""
    bits = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16)
    x = bits.view(dtype)
    got = kernelwright.compile(Fn(lambda a: a * 1.0), [x])(x)
    same = (got.view(torch.int16) == bits) | (torch.isnan(got) & torch.isnan(x))
    assert got.dtype == dtype and bool(same.all())


@pytest.mark.parametrize("dtype", HALVES)
def test_narrowing_rounds_to_nearest_even(dtype):
    """f32 values narrowed on the device as PyTorch narrows them: ties, overflow to
    infinity, subnormals, NaN."""
    torch.manual_seed(2)
    info = torch.finfo(dtype)
    tiny = info.tiny
    special = torch.tensor([0.0, -0.0, 1.0, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11,
                            1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 65504.0, 65519.0, 65520.0,
                            -65520.0, 1e5, info.max * 2, float("inf"), float("-inf"),
                            float("nan"), tiny, tiny / 3, tiny * 0.5, 2.0 ** -24, 2.0 ** -25,
                            1.5 * 2.0 ** -25, 2.0 ** -26, 3.0e38, -3.4e38, 1e-40])
    x = torch.cat([special, torch.randn(1001) * 100, torch.randn(500) * 1e-6])
    compiled = kernelwright.compile(Fn(lambda a: (a * 1.0).to(dtype)), [x])
    got, want = compiled(x), x.to(dtype)
    assert got.dtype == dtype
    same = (got.view(torch.int16) == want.view(torch.int16)) | (torch.isnan(got)
                                                                 & torch.isnan(want))
    assert bool(same.all()), (x[~same], got[~same], want[~same])


@pytest.mark.parametrize("dtype", HALVES)
def test_reductions(dtype):
    torch.manual_seed(3)
    x = torch.randn(5, 300).to(dtype)
    check_half(Fn(lambda a: (a.sum(1), a.mean(0), a.amax(1), (a * a).sum())), x)


@pytest.mark.parametrize("dtype", HALVES)
def test_softmax_and_layer_norm(dtype):
    torch.manual_seed(4)
    x = torch.randn(6, 40).to(dtype) * 4
    check_half(Fn(lambda a: torch.softmax(a, -1)), x)
    check_half(torch.nn.LayerNorm(40).to(dtype), x)


@pytest.mark.parametrize("dtype", HALVES)
def test_linear_and_matmul(dtype):
    torch.manual_seed(5)
    lin = torch.nn.Linear(37, 19).to(dtype)
    compiled = check_half(lin, torch.randn(5, 37).to(dtype))
    consts = {b.dtype: b for b in _buffers(compiled, "const")}
    weight = consts[STORED[dtype]]
    assert weight.nbytes in (buffer_bytes(37 * 19, "f16"), buffer_bytes(19, "f16"))
    assert sum(b.nbytes for b in _buffers(compiled, "const")) == \
        buffer_bytes(37 * 19, "f16") + buffer_bytes(19, "f16")
    a, b = torch.randn(2, 33, 20).to(dtype), torch.randn(2, 20, 18).to(dtype)
    check_half(Fn(torch.bmm), a, b)


@pytest.mark.parametrize("dtype", HALVES)
def test_conv_pool_and_scan(dtype):
    torch.manual_seed(6)
    x = torch.randn(1, 3, 9, 8).to(dtype)
    check_half(torch.nn.Conv2d(3, 5, 3, padding=1).to(dtype), x)
    check_half(torch.nn.Conv2d(3, 3, 3, groups=3).to(dtype), x)  # the direct kernel
    check_half(Fn(lambda a: (F.max_pool2d(a, 2), F.avg_pool2d(a, 3, 1, 1))), x)
    check_half(Fn(lambda a: torch.cumsum(a, -1)), x)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype", HALVES)
def test_sdpa(dtype, fused, monkeypatch):
    """Decomposed (small scores) and through the fused attention kernel."""
    monkeypatch.setattr(attention_ops, "FUSED", fused)
    torch.manual_seed(7)
    q, k, v = (torch.randn(1, 2, 11, 16).to(dtype) for _ in range(3))
    compiled = check_half(
        Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)), q, k, v)
    assert fused == any(k.name.startswith("attention") for k in compiled.plan.kernels)


class Block(torch.nn.Module):
    """A pre-norm transformer block: attention (SDPA) and an MLP, with residuals."""

    def __init__(self, dim: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.up, self.down = torch.nn.Linear(dim, 2 * dim), torch.nn.Linear(2 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


@pytest.mark.parametrize("dtype", HALVES)
def test_transformer_block(dtype):
    torch.manual_seed(8)
    block = Block().to(dtype)
    compiled = check_half(block, torch.randn(2, 9, 32).to(dtype))
    weights = sum(p.numel() for p in block.parameters())
    assert all(b.dtype == STORED[dtype] for b in _buffers(compiled, "const"))
    assert sum(b.nbytes for b in _buffers(compiled, "const")) <= 2 * weights + 4 * 12


@pytest.mark.parametrize("dtype", HALVES)
def test_saved_plan_keeps_half_constants(dtype, tmp_path: Path):
    torch.manual_seed(9)
    lin = torch.nn.Linear(7, 3).to(dtype).eval()
    x = torch.randn(2, 7).to(dtype)
    compiled = kernelwright.compile(lin, [x])
    compiled.plan.save(tmp_path / "plan")
    loaded = kernelwright.Plan.load(tmp_path / "plan")
    assert [b.dtype for b in loaded.buffers] == [b.dtype for b in compiled.plan.buffers]
    assert all(loaded.constants[k].tobytes() == v.tobytes()
               for k, v in compiled.plan.constants.items())
    out = kernelwright.CompiledModule(loaded)(x)
    assert out.dtype == dtype and torch.equal(out, compiled(x))


class Stateful(torch.nn.Module):
    """Half buffers changed in forward: a running sum and a cache [5, 3] (15 elements:
    its rows straddle the words of a packed buffer) whose row `pos` is written by
    index_copy."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(3, dtype=dtype))
        self.register_buffer("cache", torch.full((5, 3), 0.1, dtype=dtype))

    def forward(self, x, pos):
        self.total.add_(x)
        self.cache.index_copy_(0, pos, x.unsqueeze(0) * 3)
        return self.total * 2 + self.cache.sum(0)


@pytest.mark.parametrize("dtype", HALVES)
def test_half_state_is_stored_packed(dtype):
    """Half buffers a forward changes live in packed buffers (2 bytes an element) and
    match eager's, bit for bit, over several calls: the running sum rounded as eager
    rounds it, the index_copy writing only its row (the other halves of the words it
    shares with its neighbours keep their values)."""
    torch.manual_seed(3)
    eager = Stateful(dtype)
    xs = [torch.randn(3).to(dtype) for _ in range(4)]
    positions = [torch.tensor([p]) for p in (1, 4, 2, 1)]
    compiled = kernelwright.compile(Stateful(dtype), [xs[0], positions[0]])
    specs = dict(compiled.plan.state)
    for name in ("total", "cache"):
        buf = compiled.plan.buffers[specs[name].buffer]
        numel = math.prod(specs[name].shape)
        assert buf.dtype == STORED[dtype] and buf.nbytes == 2 * (numel + numel % 2)
    for x, pos in zip(xs, positions):
        with torch.no_grad():
            want = eager(x, pos)
        got = compiled(x, pos, poison=True)
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), want.float(), atol=1e-2, rtol=1e-2)
        state = compiled.state()
        for name in ("total", "cache"):
            assert state[name].dtype == dtype
            assert torch.equal(state[name], getattr(eager, name)), name
    assert not Stateful(dtype).total.any()  # the module's own buffers are left as they were


@pytest.mark.parametrize("dtype", HALVES)
def test_half_input_changed_in_place_is_packed(dtype):
    """A half input that forward changes in place is uploaded and written back packed
    (through the narrowing copy), and the caller's tensor gets eager's values."""

    def put(cache, x, pos):
        cache.index_copy_(0, pos, x)
        return cache.sum(0)

    torch.manual_seed(4)
    cache = torch.randn(7, 3).to(dtype)
    x, pos = torch.randn(1, 3).to(dtype), torch.tensor([5])
    compiled = kernelwright.compile(Fn(put), [cache.clone(), x, pos])
    assert compiled.plan.buffers[compiled.plan.inputs[0].buffer].dtype == STORED[dtype]
    (_, spec), = compiled.plan.writes
    assert compiled.plan.buffers[spec.buffer].dtype == STORED[dtype]
    mine, theirs = cache.clone(), cache.clone()
    got = compiled(mine, x, pos)
    want = put(theirs, x, pos)
    assert torch.equal(mine, theirs)
    torch.testing.assert_close(got.float(), want.float(), atol=1e-2, rtol=1e-2)


def test_guarded_half_state_is_held_in_f32():
    """A state whose update is not a packed value (a training step's guarded select) is
    held in f32 with its update, so that the copy after the call moves whole values."""
    b = GraphBuilder()
    state = b.const(torch.zeros(4).numpy(), "f32", "s", state=True)
    state.storage = "bf16"
    new = b.ew("add", state, b.scalar(1.0))
    b.graph.updates.append((state, new))
    same_state_storage(b.graph)
    assert state.stored == new.stored == "f32"


def _tiny_llama(dtype: torch.dtype, tie: bool = False) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=256,
        tie_word_embeddings=tie)
    return transformers.LlamaForCausalLM(config).eval().to(dtype)


def _constant_bytes(compiled: list) -> dict[str, int]:
    """The bytes of the constant buffers (weights; not state, the caches) that compiled
    modules hold on the device, by buffer dtype, a buffer several share counted once."""
    held = {}
    for c in compiled:
        state = {spec.buffer for _, spec in c.plan.state}
        for bid in set(c.plan.constants) - state:
            held[id(c.exe.segments[bid][0])] = c.plan.buffers[bid]
    out: dict[str, int] = {}
    for b in held.values():
        out[b.dtype] = out.get(b.dtype, 0) + b.nbytes
    return out


def _parameter_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())  # tied ones once


def test_bf16_tied_weights_are_held_once_in_bf16():
    """A bfloat16 model's weights take their bf16 bytes on the device, once: generate's
    plans of a Llama with tied embeddings (SmolLM2's) hold the table once, the layout the
    output projection reads, the embedding reading its rows through it, and share it with
    every weight between the prompt and decode plans (no f32 copy, no transposed one);
    the tokens are transformers' greedy ones."""
    model = _tiny_llama(torch.bfloat16, tie=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(2))
    got = kernelwright.generate(model, ids, max_new_tokens=6, eos_token_id=[])
    want = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    assert torch.equal(got, want)
    plans = [c for p in _PLANS[model].values() for c in p.plans.values()]
    rotary = model.model.rotary_emb.inv_freq  # a bf16 buffer of the model the plans read
    assert len(plans) == 2 and rotary.dtype == torch.bfloat16
    assert _constant_bytes(plans) == {"bf16": _parameter_bytes(model) + 2 * rotary.numel()}


def test_bf16_whisper_weights_are_held_once_in_bf16():
    """Whisper's prefill (encoder) and decode plans in bfloat16 hold its weights once in
    bf16 (the output projection tied to the token embedding; the cross-attention cache
    written without a constant mask), plus the zeros its merged key/value products'
    biases hold for the key projections, which have none (linalg._merged)."""
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
        vocab_size=160, num_mel_bins=80, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, d_model=64,
        encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=16,
        max_target_positions=64, decoder_start_token_id=150, pad_token_id=151,
        bos_token_id=151, eos_token_id=152, begin_suppress_tokens=None,
        suppress_tokens=None)).eval().to(torch.bfloat16)
    features = torch.randn(1, 80, 32, generator=torch.Generator().manual_seed(3))
    features = features.to(torch.bfloat16)
    prompt = torch.tensor([[150, 153]])
    got = kernelwright.generate(model, features, max_new_tokens=5, decoder_input_ids=prompt,
                                eos_token_id=[])
    want = model.generate(features, max_new_tokens=5, do_sample=False,
                          decoder_input_ids=prompt, eos_token_id=None,
                          return_dict_in_generate=True).sequences
    assert torch.equal(got, want)
    plans = [c for p in _PLANS[model].values() for c in p.plans.values()]
    keys = [m for name, m in model.named_modules() if name.endswith("k_proj")]
    assert len(plans) == 2 and all(m.bias is None for m in keys)
    zeros = sum(2 * m.out_features for m in keys)
    assert _constant_bytes(plans) == {"bf16": _parameter_bytes(model) + zeros}


def test_bf16_masked_lm_holds_its_tied_decoder_once():
    """BERT's masked-LM head (its decoder tied to the word embeddings) compiled in
    bfloat16: the weights' bf16 bytes once, the int64 buffers as i32, outputs within
    the bf16 tolerance."""
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64)).eval().to(torch.bfloat16)
    ids = torch.randint(0, 120, (2, 8), generator=torch.Generator().manual_seed(4))
    compiled = check_half(model, ids)
    assert _constant_bytes([compiled]) == {
        "bf16": _parameter_bytes(model), "i32": sum(4 * b.numel() for b in model.buffers())}


def test_generate_keeps_a_bf16_kv_cache_packed():
    """kernelwright.generate on a bfloat16 Llama gives transformers' eager bf16 greedy
    tokens with its KV cache in packed bf16 buffers (2 bytes an element, each buffer
    checked): the plans save at least 2 bytes per weight against the same model's float32
    plans (the cache's new values: the f32 plans copy them over the cache early and reuse
    their buffers, the packed ones keep them to the end: schedule.early_updates)."""
    model, reference = _tiny_llama(torch.bfloat16), _tiny_llama(torch.float32)
    ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(1))
    got = kernelwright.generate(model, ids, max_new_tokens=8, eos_token_id=[])
    want = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    assert torch.equal(got, want)
    kernelwright.generate(reference, ids, max_new_tokens=8, eos_token_id=[])
    cache = 0
    for plans in _PLANS[model].values():
        for compiled in plans.plans.values():
            for name, spec in compiled.plan.state:
                buf = compiled.plan.buffers[spec.buffer]
                assert buf.dtype == "bf16" and buf.nbytes == 2 * math.prod(spec.shape), name
                assert compiled.state()[name].dtype == torch.bfloat16
        cache += sum(math.prod(spec.shape) for _, spec in compiled.plan.state)
    weights = sum(p.numel() for p in model.parameters())
    saved = kernelwright.generate.device_bytes(reference) - \
        kernelwright.generate.device_bytes(model)
    assert cache > 0 and saved >= 2 * weights


def test_tuner_checks_half_kernels(tmp_path, monkeypatch):
    """The tuner's single-kernel runs bind packed buffers as the plan does: every setting
    of the narrowing copy runs and matches the default."""
    monkeypatch.setenv("KERNELWRIGHT_TUNE_DB", str(tmp_path / "tune.sqlite"))
    x = torch.randn(1001).to(torch.bfloat16)
    session = tune.TuningSession(tune.TuneSettings(reps=1, warmup=0))
    compiled = kernelwright.compile(Fn(lambda a: torch.exp(a) * 2), [x], choose=session.choose)
    (result,) = session.results
    assert len(result.candidates) > 1
    assert {c.status for c in result.candidates} <= {"default", "ok"}, result.candidates
    assert torch.equal(compiled(x), (torch.exp(x.float()) * 2).to(torch.bfloat16))


def test_a_half_tensor_over_one_binding_is_held_in_f32_and_chunked():
    """Packed buffers are not chunked: a half tensor that a kernel over more than one
    binding reads or writes is held in f32 instead (the chunked path), and the result is
    the same as PyTorch's; a smaller one stays packed."""
    limit = 1 << 16
    device = open_device(default_device().adapter, {"max-storage-buffer-binding-size": limit,
                                                    "max-buffer-size": 2 * limit})
    x = torch.randn(3 * limit // 2).to(torch.float16)
    compiled = kernelwright.compile(Fn(lambda a: a * 2), [x], device=device)
    assert any(k.name.endswith("]") for k in compiled.plan.kernels)  # chunked
    assert all(b.dtype == "f32" for b in compiled.plan.buffers)
    got = compiled(x)
    assert got.dtype == torch.float16 and torch.equal(got, x * 2)
    small = torch.randn(limit // 8).to(torch.float16)  # the f32 version would fit too
    compiled = kernelwright.compile(Fn(lambda a: a * 2), [small], device=device)
    assert compiled.plan.buffers[0].dtype == "f16"
    assert torch.equal(compiled(small), small * 2)


def _kernels(module: torch.nn.Module, *inputs: torch.Tensor):
    return kernelwright.plan_module(module.eval(), list(inputs)).kernels


ROW_CASES = {  # row lengths: a multiple of 4, even but not of 4
    "layer_norm": lambda n: torch.nn.LayerNorm(n),
    "rms_norm": lambda n: torch.nn.RMSNorm(n),
    "softmax": lambda n: Fn(lambda a: torch.softmax(a, -1)),
}


@pytest.mark.parametrize("n", [40, 6])
@pytest.mark.parametrize("case", sorted(ROW_CASES))
@pytest.mark.parametrize("dtype", HALVES)
def test_half_row_kernels_are_as_many_as_f32s(dtype, case, n):
    """A norm or softmax stored in a half type is one row kernel, as in f32: the row
    kernel stores its packed words itself (no narrowing copy after it), and its values
    are our f32 values rounded once."""
    torch.manual_seed(10)
    x = torch.randn(5, n) * 3
    f32 = _kernels(ROW_CASES[case](n), x)
    module = ROW_CASES[case](n).to(dtype)
    half = _kernels(module, x.to(dtype))
    assert len(half) == len(f32) == 1, ([k.name for k in half], [k.name for k in f32])
    compiled = check_half(module, x.to(dtype))
    exact = kernelwright.compile(copy.deepcopy(module).float().eval(), [x.to(dtype).float()])
    assert torch.equal(compiled(x.to(dtype)), exact(x.to(dtype).float()).to(dtype))


@pytest.mark.parametrize("dtype", HALVES)
def test_half_reduction_pairs_rows(dtype):
    """A reduction stored in a half type packs two rows' values a word (an odd count of
    rows: the last word half used), one kernel as in f32."""
    torch.manual_seed(11)
    x = torch.randn(7, 300).to(dtype)
    compiled = check_half(Fn(lambda a: (a.sum(1) + 1.0, torch.logsumexp(a, 1))), x)
    assert len(compiled.plan.kernels) == 2
    exact = (x.float().sum(1) + 1.0).to(dtype)
    assert torch.equal(compiled(x)[0], exact)


@pytest.mark.parametrize("n", [4096, 35])
@pytest.mark.parametrize("dtype", HALVES)
def test_half_elementwise_stores_words(dtype, n):
    """A plain elementwise kernel with a half output stores VEC 4 (two words a step)
    where the count is a multiple of 4, else a word a step; the values rounded once."""
    x = torch.randn(n).to(dtype)
    compiled = check_half(Fn(lambda a: torch.relu(a * 2.0 + 1.0)), x)
    (kernel,) = compiled.plan.kernels
    assert kernel.knobs["VEC"] == (4 if n % 4 == 0 else 2)
    assert torch.equal(compiled(x), torch.relu(x.float() * 2.0 + 1.0).to(dtype))
