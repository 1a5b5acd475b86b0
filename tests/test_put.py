"""Puts (GraphBuilder.put): index_copy and index_put on one dim at run-time positions,
a kernel over the new slices alone, written over the state it updates
(schedule.put_homes) or over a copy of the tensor made just before it; against eager."""

import sys
from pathlib import Path

import pytest
import torch
from conftest import Fn, check

import kernelwright
from kernelwright.ir.ir import GraphBuilder


class Cache(torch.nn.Module):
    """A KV cache buffer [B, H, L, D] written at run-time positions along L (index_copy_,
    or index_put_ through `cache[:, :, pos] = k`), its new slices a fused expression of
    the input (a RoPE-like rotation in the decode step), then read whole."""

    def __init__(self, batch: int = 2, length: int = 9, index_put: bool = False,
                 rotate: bool = True) -> None:
        super().__init__()
        self.index_put, self.rotate = index_put, rotate
        self.register_buffer("keys", torch.zeros(batch, 3, length, 4))

    def forward(self, k, pos):
        new = k * 2 + torch.sin(k).flip(-1) if self.rotate else k * 2  # (exact in half)
        if self.index_put:
            self.keys[:, :, pos] = new
        else:
            self.keys.index_copy_(2, pos, new)
        return self.keys.sum(-1) * 1.5


def _puts(compiled) -> list[str]:
    return [k.name for k in compiled.plan.kernels if k.name.endswith("put")]


@pytest.mark.parametrize("batch,steps,index_put", [(1, 1, False), (2, 1, False),
                                                   (2, 3, False), (1, 2, True)])
def test_a_state_written_at_run_time_positions_by_one_kernel_over_its_rows(
        batch, steps, index_put):
    """T = `steps` new slices per call, over several calls (the first and the last slot
    among them): one kernel writes them into the state's buffer (no copy of the cache,
    no search over its slots), and the state and output match eager's at every call."""
    length = 9
    eager, module = Cache(batch, length, index_put), Cache(batch, length, index_put)
    k0 = torch.randn(batch, 3, steps, 4)
    compiled = kernelwright.compile(module, [k0, torch.arange(steps)])
    kernels = [k.name for k in compiled.plan.kernels]
    (put,) = _puts(compiled)  # the new slices' expression computed in its loader
    assert "sin" in put.split("+"), compiled.plan.summary()
    assert len(kernels) == 2 and not compiled.plan.updates, compiled.plan.summary()
    assert "update" in compiled.plan.summary() and "by a kernel" in compiled.plan.summary()
    starts = [0, length - steps, 3, 1]  # the first slot, the last, then others
    for i, start in enumerate(starts):
        k = torch.randn(batch, 3, steps, 4, generator=torch.Generator().manual_seed(i))
        pos = torch.arange(start, start + steps)
        if steps > 1 and i == 3:
            pos = pos.flip(0)  # not in order
        torch.testing.assert_close(compiled(k, pos), eager(k, pos))
        torch.testing.assert_close(compiled.state()["keys"], eager.keys)
    assert not Cache(batch, length).keys.any()  # the module's own buffer is left as it was


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_state_is_put_a_word_at_a_time(dtype):
    """A half cache whose slices hold an even count of elements stays packed and is
    written in place, two elements a word (no f32 copy of it, no narrowing kernel), the
    words around the new slices kept: eager's state bit for bit over several calls."""
    eager, module = Cache(2, 7, rotate=False).to(dtype), Cache(2, 7, rotate=False).to(dtype)
    k0 = torch.randn(2, 3, 2, 4).to(dtype)
    compiled = kernelwright.compile(module, [k0, torch.arange(2)])
    spec = dict(compiled.plan.state)["keys"]
    assert compiled.plan.buffers[spec.buffer].dtype == {torch.float16: "f16",
                                                        torch.bfloat16: "bf16"}[dtype]
    # the put, and the sum that stores the half output itself (schedule.narrowing); only
    # the put writes the state
    kernels = compiled.plan.kernels
    assert len(kernels) == 2 and len(_puts(compiled)) == 1, compiled.plan.summary()
    assert [k.name for k in kernels if k.bindings[-1] == spec.buffer] == _puts(compiled)
    for i, start in enumerate([5, 0, 2]):
        k = torch.randn(2, 3, 2, 4, generator=torch.Generator().manual_seed(i)).to(dtype)
        pos = torch.tensor([start, start + 1])
        with torch.no_grad():
            want = eager(k, pos)
        torch.testing.assert_close(compiled(k, pos).float(), want.float(), atol=2e-2,
                                   rtol=2e-2)
        assert torch.equal(compiled.state()["keys"], eager.keys)


def test_a_sum_of_a_few_pieces_is_added_in_the_puts_loader():
    """New slices that are a sum of a few pieces (a split-K product's partial sums, as a
    decoded token's key projection at SmolLM2-135M's size) are added by the put's loader:
    no kernel of their own."""
    class Pieces(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(2, 6, 4))

        def forward(self, parts, pos):
            self.cache.index_copy_(1, pos, parts.sum(0))
            return self.cache * 2

    eager, module = Pieces(), Pieces()
    parts = torch.randn(4, 2, 1, 4)
    compiled = kernelwright.compile(module, [parts, torch.tensor([0])])
    assert [k.name for k in compiled.plan.kernels] == ["put", "mul"], \
        compiled.plan.summary()
    for step in range(2):
        parts, pos = torch.randn(4, 2, 1, 4), torch.tensor([3 * step + 1])
        torch.testing.assert_close(compiled(parts, pos), eager(parts, pos))


def test_duplicate_and_negative_positions():
    """Of several slices at one position the last one is written (PyTorch leaves it
    undefined; eager on the CPU writes them in order); a negative position counts from
    the end (index_put's rule)."""
    def put(x, pos, v):
        return x.index_put((pos,), v), x.index_copy(1, pos.abs(), v.t() * 2)

    x, v = torch.randn(5, 5), torch.randn(4, 5)
    pos = torch.tensor([3, -1, 3, 0])
    compiled = check(Fn(put), x, pos, v)
    want = x.clone()
    for row, p in zip(v, pos.tolist()):
        want[p] = row
    torch.testing.assert_close(compiled(x, pos, v)[0], want)


def test_a_put_into_a_tensor_read_again_writes_a_copy():
    """A put into an input, or into a buffer also read as it was before the write, has a
    buffer of its own: a copy of the tensor, then the put's kernel over it (the tensor
    itself is left for its other readers)."""
    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.arange(12.0).reshape(4, 3))

        def forward(self, x, pos, v):
            old = self.buf * 1.0
            self.buf.index_copy_(0, pos, v)
            y = x.index_copy(1, pos, v.t())
            return y + 1, old.sum(0), self.buf * 2

    eager, module = Both(), Both()
    x, pos, v = torch.randn(3, 4), torch.tensor([2]), torch.randn(1, 3)
    compiled = kernelwright.compile(module, [x, pos, v])
    assert sum(k.name == "materialize" for k in compiled.plan.kernels) >= 1, \
        compiled.plan.summary()
    for step in range(3):
        pos, v = torch.tensor([step + 1]), torch.randn(1, 3)
        for got, want in zip(compiled(x, pos, v), eager(x, pos, v)):
            torch.testing.assert_close(got, want)
        torch.testing.assert_close(compiled.state()["buf"], eager.buf)


def test_an_input_cache_passed_in_is_written_back():
    """An input changed by index_copy_ (a cache passed in): the put writes a copy of it,
    which the call writes back into the caller's tensor."""
    def step(cache, pos, k):
        cache.index_copy_(1, pos, k)
        return cache.sum(1)

    cache = torch.randn(2, 6, 3)
    compiled = kernelwright.compile(Fn(step), [cache.clone(), torch.tensor([0]),
                                               torch.randn(2, 1, 3)])
    mine, theirs = cache.clone(), cache.clone()
    for i in range(3):
        pos, k = torch.tensor([5 - i]), torch.randn(2, 1, 3)
        torch.testing.assert_close(compiled(mine, pos, k), step(theirs, pos, k))
        torch.testing.assert_close(mine, theirs)


def test_the_decode_step_of_a_small_llama_writes_its_cache_in_place():
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from generate_bench import make_model

    from kernelwright.generate import CacheModule

    model = make_model(True, torch.float32)
    plan = kernelwright.plan_module(CacheModule(model, 1, 544), CacheModule.example(1, 1))
    names = [k.name for k in plan.kernels]  # (their count: test_generate's tiny benchmark)
    # each layer's keys and values stored by its attention (test_decoded_keys_and_values_*)
    assert sum("put" in n.split("+") for n in names) == 2 and not plan.updates, plan.summary()
    assert all("attention" in n.split("+") for n in names if "put" in n.split("+"))
    assert not any({"iota", "eq", "reduce"} <= set(n.split("+")) for n in names)


class Decode(torch.nn.Module):
    """A decoding step's attention over a KV cache ([1, H, L, E] buffers of `dtype`): the
    new keys (rotated: a RoPE-like expression) and values (scaled) written at run-time
    slots, then the queries attend to the cache, read as f32, under a mask (a half
    cache's output then shows the values the attention read, not the rounding of its
    own output); `also` returns the key cache's sum too (a second reader of the cache)."""

    def __init__(self, length: int, heads: int = 2, also: bool = False, e: int = 8,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.also = also
        self.register_buffer("keys", torch.zeros(1, heads, length, e, dtype=dtype))
        self.register_buffer("values", torch.zeros(1, heads, length, e, dtype=dtype))

    def forward(self, q, k, v, pos, mask):
        h = k.shape[-1] // 2
        self.keys.index_copy_(2, pos, k * 0.5 + torch.cat([-k[..., h:], k[..., :h]], -1))
        self.values.index_copy_(2, pos, v * 1.5)
        out = torch.nn.functional.scaled_dot_product_attention(
            q.float(), self.keys.float(), self.values.float(), attn_mask=mask)
        return (out, self.keys.sum(2)) if self.also else out


def _decode_steps(module, eager, tokens: int, steps: int, start: int = 0) -> None:
    """`steps` calls with `tokens` new slots each, against eager: outputs, and caches (a
    half one bit for bit: its new elements rounded once, as eager rounds them)."""
    _, heads, length, e = eager.keys.shape
    for i in range(steps):
        g = torch.Generator().manual_seed(i)
        q, k, v = (torch.randn(1, heads, tokens, e, generator=g).to(eager.keys.dtype)
                   for _ in range(3))
        pos = torch.arange(start + i * tokens, start + (i + 1) * tokens)
        mask = torch.where(torch.arange(length) <= pos[-1], 0.0, float("-inf"))
        mask = mask.expand(1, 1, tokens, length)
        got, want = module(q, k, v, pos, mask), eager(q, k, v, pos, mask)
        for a, b in zip(got if eager.also else [got], want if eager.also else [want]):
            torch.testing.assert_close(a, b)
        for name in ("keys", "values"):
            mine, theirs = module.state()[name], getattr(eager, name)
            if theirs.dtype == torch.float32:
                torch.testing.assert_close(mine, theirs)
            else:
                assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), name


def _compiled(length: int, tokens: int, also: bool = False, e: int = 8,
              dtype: torch.dtype = torch.float32):
    heads = 2
    x = torch.zeros(1, heads, tokens, e, dtype=dtype)
    module = kernelwright.compile(Decode(length, heads, also, e, dtype),
                                  [x, x, x, torch.arange(tokens), torch.zeros(1, 1, tokens,
                                                                             length)])
    return module, Decode(length, heads, also, e, dtype)


@pytest.mark.parametrize("length", [40, 2048])
def test_decoded_keys_and_values_are_stored_by_the_attention_that_reads_them(length):
    """One new slot's keys and values (a put of one slice into a state nothing else
    reads) are written by the attention kernel itself (schedule.joining_puts): no put
    kernel, the cache updated where the attention runs, its new slot read as computed.
    With a long cache over few heads (2048 slots) the keys are split over spans: every
    new element is stored once, by one invocation of all the spans'. Over several
    steps, the first and the last slot among them, against eager."""
    module, eager = _compiled(length, 1)
    names = [k.name for k in module.plan.kernels]
    assert not any(n.endswith("put") for n in names) and not module.plan.updates, \
        module.plan.summary()
    assert sum("put" in n.split("+") and "attention" in n.split("+") for n in names) == 1
    assert len(names) == (1 if length == 40 else 2), module.plan.summary()  # (2: split)
    _decode_steps(module, eager, 1, 3)
    _decode_steps(module, eager, 1, 2, start=length - 2)


@pytest.mark.parametrize("tokens,also", [(2, False), (1, True)])
def test_a_put_of_several_slices_or_into_a_cache_read_elsewhere_keeps_its_kernel(tokens,
                                                                                 also):
    """Puts the attention does not store: two new slots (a put of several slices), or a
    key cache also read by another kernel (its sum); each stays a put kernel, in place,
    and matches eager."""
    module, eager = _compiled(40, tokens, also)
    puts = _puts(module)
    assert len(puts) == (1 if also else 2), module.plan.summary()
    _decode_steps(module, eager, tokens, 3)


@pytest.mark.parametrize("dtype,length", [(torch.bfloat16, 40), (torch.float16, 40),
                                          (torch.bfloat16, 2048)])
def test_a_half_cache_is_stored_by_the_attention_a_word_at_a_time(dtype, length):
    """Packed half caches (two elements a u32 word) whose slots fill whole words (E even)
    are stored by the attention too: each invocation stores whole words of the new slot,
    rounded to nearest even as a put kernel rounds them, and the attention reads the new
    slot's elements rounded so, as a later step reads them back from the cache (the
    output, computed in f32, matches eager's from its half caches). The caches stay
    packed (no f32 copy, no narrowing kernel), eager's bit for bit; split over spans at
    2048 slots."""
    module, eager = _compiled(length, 1, dtype=dtype)
    plan = module.plan
    names = [k.name for k in plan.kernels]
    assert not any(n.endswith("put") for n in names) and not plan.updates, plan.summary()
    assert sum("put" in n.split("+") and "attention" in n.split("+") for n in names) == 1
    assert len(names) == (1 if length == 40 else 2), plan.summary()
    half = {torch.bfloat16: "bf16", torch.float16: "f16"}[dtype]
    assert all(plan.buffers[t.buffer].dtype == half for _, t in plan.state), plan.summary()
    _decode_steps(module, eager, 1, 3)
    _decode_steps(module, eager, 1, 2, start=length - 2)


def test_a_half_cache_of_slots_of_an_odd_size_keeps_its_kernels():
    """A half cache whose slots hold an odd count of elements (E = 7: a slot starts
    inside a word) is not stored by the attention (dtypes.fills_words): its update
    stays a kernel of its own, and matches eager's."""
    module, eager = _compiled(40, 1, e=7, dtype=torch.bfloat16)
    names = [k.name for k in module.plan.kernels]
    assert not any("put" in n.split("+") and "attention" in n.split("+") for n in names)
    assert len(names) > 1, module.plan.summary()
    _decode_steps(module, eager, 1, 3)
    _decode_steps(module, eager, 1, 2, start=38)


class _DeepIndex(torch.nn.Module):
    """index_put at an index of 5000 ops on an arange (an unrolled recurrence's depth)."""

    def forward(self, x, y):
        idx = torch.arange(4)
        for _ in range(2500):
            idx = idx * 2 - idx
        return x.index_put((idx,), y)


def test_host_values_of_deep_graphs():
    """GraphBuilder.host_value walks its graph without recursion: a chain of 5000 ops (past
    Python's recursion limit) is computed on the host, and an index_put at such an index
    compiles and matches eager."""
    b = GraphBuilder()
    v = b.iota((4,), 0)
    for _ in range(5000):
        v = b.ew("add", v, b.scalar(1, "i32"))
    assert b.host_value(v).tolist() == [5000, 5001, 5002, 5003]
    assert b.host_value(b.ew("exp", b.ew("cast", v, dtype="f32"))) is None  # exp: not on host
    x, y = torch.zeros(6), torch.randn(4)
    compiled = kernelwright.compile(_DeepIndex(), [x, y], progress=None)
    torch.testing.assert_close(compiled(x, y), _DeepIndex()(x, y))
