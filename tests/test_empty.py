"""Empty intermediate tensors (a dimension of size 0) computed as PyTorch computes them,
without kernels: GraphBuilder makes them empty values (ir.py), which ops propagate by
shape; cat drops them, reductions over a zero-size dim give their identity, a product
with K = 0 zeros, and an empty output comes back as an empty tensor of its dtype."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check

import kernelwright
from kernelwright.ir.ir import CompileError, GraphBuilder


def test_builder_makes_empty_values_without_nodes():
    b = GraphBuilder()
    x = b.input((3, 8), "f32", "x")
    tail = b.slice(x, 1, 8, 8)
    assert tail.kind == "empty" and tail.shape == (3, 0) and tail.node is None
    # elementwise, movement and broadcasting against an empty dim give empty values
    y = b.ew("add", b.permute(b.ew("exp", tail), [1, 0]), b.input((1, 3), "f32", "r"))
    assert y.kind == "empty" and y.shape == (0, 3)
    assert b.expand(b.input((3, 1), "f32", "c"), (3, 0)).kind == "empty"
    assert b.iota((0, 4), 0).kind == "empty"
    # cat drops empty inputs (a legacy 1-d [0] one of any shape) but promotes their dtype
    joined = b.cat([b.input((3, 2), "i32", "i"), b.slice(x, 1, 8, 8), b.empty((0,), "f32")], 1)
    assert joined.dtype == "f32" and joined.shape == (3, 2)
    assert joined.node.op == "ew" and joined.node.attrs["fn"] == "cast"
    assert b.cat([tail, tail], 0).kind == "empty"
    # the few primitives that compute something from empty inputs: no node reads them
    s = b.reduce(tail, "sum", [1])
    p = b.reduce(tail, "prod", [1], keepdim=True)
    z = b.matmul(tail, b.slice(b.input((8, 5), "f32", "w"), 0, 8, 8))
    padded = b.pad(tail, [(0, 0), (1, 2)], 2.5)
    for v, shape, fill in ((s, (3,), 0.0), (p, (3, 1), 1.0), (z, (3, 5), 0.0),
                           (padded, (3, 3), 2.5)):
        assert v.shape == shape
        assert b.host_value(v).tolist() == torch.full(shape, fill).tolist()
    assert all(v.kind != "empty" for n in b.graph.nodes for v in n.inputs)
    assert not any(n.op in ("reduce", "matmul", "pad") for n in b.graph.nodes)
    assert b.const(torch.zeros(0, 4).numpy(), "f32").kind == "empty"


def test_builder_refuses_what_cannot_take_an_empty_value():
    b = GraphBuilder()
    tail = b.slice(b.input((3, 8), "f32", "x"), 1, 8, 8)
    with pytest.raises(CompileError, match=r"zero-size dimension of \[3, 0\]"):
        b.reduce(tail, "max", [1])
    assert b.host_value(b.reduce(tail, "max", [1], identity=0)).tolist() == [0.0] * 3  # any's
    with pytest.raises(CompileError, match=r"gather of the empty tensor \[3, 0\]"):
        b.gather(tail, 1, b.input((3, 2), "i32", "i"))


class Rotary(torch.nn.Module):
    """Partial rotary embedding's split (Phi-3, GPT-NeoX): the rotated part and the
    pass-through part, empty where all of the head is rotated."""

    def __init__(self, rotary_dim: int):
        super().__init__()
        self.rotary_dim = rotary_dim

    def forward(self, q, cos, sin):
        rot, rest = q[..., :self.rotary_dim], q[..., self.rotary_dim:]
        half = rot.shape[-1] // 2
        turned = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
        return torch.cat([rot * cos + turned * sin, rest], dim=-1)


@pytest.mark.parametrize("rotary_dim", [16, 8])
def test_empty_slice_and_cat_as_rotary_embeddings_split(rotary_dim):
    q = torch.randn(1, 4, 6, 16)
    cos, sin = torch.randn(6, rotary_dim), torch.randn(6, rotary_dim)
    check(Rotary(rotary_dim), q, cos, sin)


class Legacy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("none", torch.zeros(0))  # a 1-d [0] weight: an empty constant

    def forward(self, x):
        return torch.cat([x, self.none]), torch.cat([self.none, x[:0]])


def test_cat_with_the_legacy_empty_tensor_promotes_its_dtype():
    check(Legacy(), torch.arange(6).reshape(2, 3))


def test_elementwise_and_empty_outputs_of_their_dtypes():
    compiled = check(Fn(lambda x: ((x[:, 8:] * 2).relu(), x[:, 8:] > 0, x.sum(1),
                                   x[:, 8:].to(torch.float16), x.long()[1:1])),
                     torch.randn(3, 8))
    assert "output empty: float32[3, 0]" in compiled.plan.summary()
    check(Fn(lambda x: (x[:, 8:] + 1, x[:0].T)), torch.randn(3, 8))  # no kernel at all


def test_plan_with_an_empty_output_saves_and_loads(tmp_path):
    x = torch.randn(3, 8)
    compiled = kernelwright.compile(Fn(lambda x: (x[:, 8:], x + 1)), [x])
    compiled.plan.save(tmp_path / "plan")
    loaded = kernelwright.CompiledModule(kernelwright.Plan.load(tmp_path / "plan"))
    empty, full = loaded(x)
    assert empty.shape == (3, 0) and empty.dtype == torch.float32
    torch.testing.assert_close(full, x + 1)


def test_reductions_over_an_empty_dim():
    x = torch.randn(3, 8)
    check(Fn(lambda x: (x[:, 8:].sum(1), x[:, 8:].mean(1), x[:, 8:].prod(1, keepdim=True),
                        x[:, 8:].long().sum(1), x[:, 8:].sum(), x[:0].sum(0),
                        x[:0].amax(1), x[:, 8:].logsumexp(1), x[:, 8:].var(1),
                        (x[:, 8:] > 0).any(1), (x[:, 8:] > 0).all(1))), x, equal_nan=True)


def test_ops_whose_results_are_empty_are_not_lowered():
    """A softmax over an empty dim (its row max has no identity), a top-0, a cumsum."""
    check(Fn(lambda x: (x[:, 8:].softmax(1), x[:, 8:].log_softmax(1), torch.topk(x, 0, 1),
                        x[:, 8:].cumsum(1))), torch.randn(3, 8))


class EmptyK(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(5, 8))
        self.b = torch.nn.Parameter(torch.randn(5))

    def forward(self, x, y):
        return (x[:, 8:] @ y[8:], F.linear(x[:, 8:], self.w[:, 8:], self.b),
                torch.bmm(x[None, :, :0], y[None, :0].expand(1, 0, 5)),
                F.pad(x[:, 8:], (2, 1), value=3.0))


def test_matmul_with_k_zero_gives_zeros_and_pad_its_fill():
    check(EmptyK(), torch.randn(3, 8), torch.randn(8, 5))


class Attend(torch.nn.Module):
    def forward(self, q, k):
        return F.scaled_dot_product_attention(q, k[:, :, :0], k[:, :, :0])


def test_an_op_that_cannot_take_an_empty_tensor_names_op_and_line():
    with pytest.raises(CompileError) as err:
        kernelwright.compile(Attend(), [torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)])
    msg = str(err.value)
    assert "attention" in msg and "empty tensor" in msg
    assert "scaled_dot_product_attention(q, k[:, :, :0]" in msg


class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_an_empty_input_is_a_clear_compile_error():
    with pytest.raises(CompileError, match=r"input 'x' has shape \[0, 8\]"):
        kernelwright.compile(Twice(), [torch.randn(0, 8)])


def test_phi3_generates_as_transformers():
    """Phi-3's rotary embedding covers the whole head: its pass-through part is empty."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.Phi3Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=0)
    model = transformers.Phi3ForCausalLM(config).eval()
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1))
    got = kernelwright.generate(model, ids, max_new_tokens=8)
    want = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(got, want)
