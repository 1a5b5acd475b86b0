"""Every forward op family's gradient against torch.autograd: a tiny module holding the op
is compiled through torch.compile(backend="kernelwright") (AOTAutograd: kernelwright
compiles the forward and the backward graph), a scalar loss of its output is
differentiated, and the gradient of every parameter and of every input that requires
one is compared with eager autograd's from the same weights and values (rtol 1e-4, atol
1e-4 of the gradient's largest magnitude). An op's output that is not a loss is reduced
by a fixed random weighting, so that every output element has its own upstream
gradient. The slow tier runs the same cases through compile_training (torch's joint
export, the inputs made parameters)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kernelwright
from kernelwright.frontend.dynamo import kernelwright_backend


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Op(nn.Module):
    """fn(*inputs, *parameters): a function of the inputs and of parameters of the given
    shapes (random normal values, drawn at construction)."""

    def __init__(self, fn: Callable, *shapes: tuple[int, ...]) -> None:
        super().__init__()
        self.fn = fn
        self.weights = nn.ParameterList(nn.Parameter(torch.randn(s)) for s in shapes)

    def forward(self, *xs):
        return self.fn(*xs, *self.weights)


def _weighted(out) -> torch.Tensor:
    """A scalar of the float tensors of `out`: the output itself where it is a scalar
    (a loss), else its sum weighted by fixed random values."""
    tensors = [t for t in torch.utils._pytree.tree_leaves(out)
               if isinstance(t, torch.Tensor) and t.is_floating_point()]
    total = 0.0
    for i, t in enumerate(tensors):
        if t.dim() == 0:
            total = total + t
        else:
            g = torch.Generator().manual_seed(100 + i)
            total = total + (t * torch.randn(t.shape, generator=g)).sum()
    return total


def _close(got: torch.Tensor | None, want: torch.Tensor | None, what: str) -> None:
    assert (got is None) == (want is None), f"{what}: {got} for {want}"
    if want is None:
        return
    scale = max(float(want.abs().max()), 1e-6) if want.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * scale,
                               msg=lambda m: f"{what}: {m}")


def check_gradients(model: nn.Module, *inputs: torch.Tensor) -> None:
    """Compile `model` with the kernelwright backend, differentiate `_weighted` of its
    output and compare the output, every gradient (parameters, and the floating-point
    inputs, which are made to require one) and the buffers (batch norm's running
    statistics) with eager autograd's."""
    reference = copy.deepcopy(model)
    runs = []

    def backend(gm, example_inputs):
        runs.append(kernelwright_backend(gm, example_inputs))
        return runs[-1]

    def leaves(args):
        return [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    xs, refs = leaves(inputs), leaves(inputs)
    with torch._dynamo.config.patch(allow_rnn=True):  # dynamo traces recurrent layers
        out = torch.compile(model, backend=backend, fullgraph=True)(*xs)
    _weighted(out).backward()
    want = reference(*refs)
    _weighted(want).backward()
    assert runs and set(runs[0].graphs) == {"forward", "backward"}, "not compiled for training"
    for i, (g, e) in enumerate(zip(torch.utils._pytree.tree_leaves(out),
                                   torch.utils._pytree.tree_leaves(want))):
        if e.is_floating_point():
            _close(g.detach(), e.detach(), f"output {i}")
        else:
            assert torch.equal(g, e), f"output {i}"
    for i, (x, r) in enumerate(zip(xs, refs)):
        if r.is_floating_point():
            _close(x.grad, r.grad, f"input {i}'s gradient")
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        _close(p.grad, q.grad, f"{name}'s gradient")
    for (name, buf), ref in zip(model.named_buffers(), reference.buffers()):
        if ref.is_floating_point():
            _close(buf, ref, name)


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(shape)


def _index(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape)


def _seq(*modules: nn.Module) -> nn.Sequential:
    return nn.Sequential(*modules)


# Each case: (id, a function making (model, inputs) after torch.manual_seed(0)).
CASES: list = []


def case(name: str, *marks):
    """Register the decorated maker of (model, inputs) as the case `name`."""
    def register(make):
        CASES.append(pytest.param(make, id=name, marks=marks))
        return make
    return register


# --- matmul, linear, bmm
case("linear")(lambda: (nn.Linear(6, 5), [_randn(3, 6)]))
case("linear_3d_no_bias")(lambda: (nn.Linear(6, 4, bias=False), [_randn(2, 3, 6)]))
case("matmul_broadcast")(lambda: (Op(torch.matmul, (6, 4)), [_randn(2, 3, 6)]))
case("matmul_vector")(lambda: (Op(torch.matmul, (5,)), [_randn(3, 5)]))
case("bmm")(lambda: (Op(torch.bmm, (2, 4, 5)), [_randn(2, 3, 4)]))
case("addmm")(lambda: (Op(lambda x, b, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0), (5,),
                          (4, 5)), [_randn(3, 4)]))
case("baddbmm")(lambda: (Op(lambda x, b, w: torch.baddbmm(b, x, w), (2, 3, 5), (2, 4, 5)),
                         [_randn(2, 3, 4)]))
case("einsum")(lambda: (Op(lambda x, w: torch.einsum("bij,jk->bki", x, w), (4, 3)),
                        [_randn(2, 5, 4)]))

# --- convolution
case("conv1d")(lambda: (nn.Conv1d(3, 4, 3), [_randn(2, 3, 9)]))
case("conv2d")(lambda: (nn.Conv2d(3, 4, 3), [_randn(2, 3, 6, 6)]))
case("conv3d")(lambda: (nn.Conv3d(2, 3, 2), [_randn(2, 2, 4, 4, 3)]))
case("conv2d_grouped")(lambda: (nn.Conv2d(4, 6, 3, groups=2), [_randn(2, 4, 5, 5)]))
case("conv2d_depthwise")(lambda: (nn.Conv2d(4, 4, 3, padding=1, groups=4),
                                  [_randn(2, 4, 5, 5)]))
case("conv2d_strided")(lambda: (nn.Conv2d(3, 4, 3, stride=2), [_randn(2, 3, 7, 7)]))
case("conv2d_dilated")(lambda: (nn.Conv2d(3, 4, 3, dilation=2), [_randn(2, 3, 7, 7)]))
case("conv2d_padded")(lambda: (nn.Conv2d(3, 4, (3, 2), padding=(2, 1)), [_randn(2, 3, 5, 5)]))
case("conv2d_same")(lambda: (nn.Conv2d(3, 4, 4, padding="same"), [_randn(2, 3, 5, 5)]))
case("conv2d_reflect")(lambda: (nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"),
                                [_randn(2, 3, 5, 5)]))
case("conv1d_strided_padded")(lambda: (nn.Conv1d(3, 4, 4, stride=3, padding=2),
                                       [_randn(2, 3, 11)]))
case("conv3d_strided")(lambda: (nn.Conv3d(2, 3, 3, stride=2, padding=1),
                                [_randn(1, 2, 5, 4, 4)]))
case("conv_transpose1d")(lambda: (nn.ConvTranspose1d(3, 4, 3, stride=2), [_randn(2, 3, 5)]))
case("conv_transpose2d")(lambda: (nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                     output_padding=1, groups=2),
                                  [_randn(2, 4, 4, 4)]))
case("conv_transpose2d_dilated")(lambda: (nn.ConvTranspose2d(3, 2, 2, dilation=2),
                                          [_randn(2, 3, 4, 3)]))
case("conv_transpose3d")(lambda: (nn.ConvTranspose3d(2, 3, 2, stride=2),
                                  [_randn(1, 2, 3, 2, 3)]))

# --- pooling
case("max_pool2d_indices")(lambda: (nn.MaxPool2d(2, return_indices=True),
                                    [_randn(2, 3, 6, 6)]))
case("max_pool2d_overlapping")(lambda: (nn.MaxPool2d(3, stride=2, padding=1),
                                        [_randn(2, 3, 7, 7)]))
case("max_pool1d")(lambda: (nn.MaxPool1d(3, stride=2), [_randn(2, 3, 9)]))
case("max_pool3d")(lambda: (nn.MaxPool3d(2), [_randn(1, 2, 4, 4, 4)]))
case("avg_pool2d")(lambda: (nn.AvgPool2d(3, stride=2, padding=1), [_randn(2, 3, 7, 7)]))
case("avg_pool2d_exclude_pad")(lambda: (nn.AvgPool2d(3, stride=2, padding=1,
                                                     count_include_pad=False),
                                        [_randn(2, 3, 7, 7)]))
case("avg_pool1d")(lambda: (nn.AvgPool1d(2), [_randn(2, 3, 8)]))
case("avg_pool3d")(lambda: (nn.AvgPool3d(2, padding=1), [_randn(1, 2, 4, 3, 4)]))
case("adaptive_avg_pool2d")(lambda: (nn.AdaptiveAvgPool2d((3, 2)), [_randn(2, 3, 7, 5)]))
case("adaptive_avg_pool2d_global")(lambda: (nn.AdaptiveAvgPool2d(1), [_randn(2, 3, 4, 4)]))
case("adaptive_avg_pool1d")(lambda: (nn.AdaptiveAvgPool1d(3), [_randn(2, 3, 7)]))
case("adaptive_max_pool2d")(lambda: (nn.AdaptiveMaxPool2d((3, 2)), [_randn(2, 3, 7, 5)]))
case("adaptive_max_pool2d_even")(lambda: (nn.AdaptiveMaxPool2d((3, 2)), [_randn(2, 3, 6, 4)]))
case("adaptive_max_pool2d_global")(lambda: (nn.AdaptiveMaxPool2d(1), [_randn(2, 3, 3, 4)]))
case("adaptive_max_pool3d")(lambda: (nn.AdaptiveMaxPool3d((2, 1, 2)), [_randn(1, 2, 3, 2, 4)]))
case("adaptive_max_pool1d")(lambda: (nn.AdaptiveMaxPool1d(3), [_randn(2, 3, 7)]))

# --- normalisation
case("batch_norm2d_train")(lambda: (nn.BatchNorm2d(3).train(), [_randn(2, 3, 4, 4)]))
case("batch_norm1d_train")(lambda: (nn.BatchNorm1d(5).train(), [_randn(6, 5)]))
case("layer_norm")(lambda: (nn.LayerNorm(6), [_randn(2, 3, 6)]))
case("layer_norm_2d_no_affine")(lambda: (nn.LayerNorm((3, 4), elementwise_affine=False),
                                         [_randn(2, 3, 4)]))
case("group_norm")(lambda: (nn.GroupNorm(2, 4), [_randn(2, 4, 3, 3)]))
case("rms_norm")(lambda: (nn.RMSNorm(6), [_randn(2, 3, 6)]))
case("instance_norm")(lambda: (nn.InstanceNorm2d(3, affine=True), [_randn(2, 3, 4, 4)]))

# --- softmax
case("softmax")(lambda: (nn.Softmax(-1), [_randn(3, 7)]))
case("softmax_dim1")(lambda: (nn.Softmax(1), [_randn(2, 5, 3)]))
case("log_softmax")(lambda: (nn.LogSoftmax(-1), [_randn(3, 7)]))

# --- losses (the loss of a Linear's output, so that a parameter gets the gradient too)
_TARGET = {"class": lambda: _index(5, 6), "real": lambda: _randn(6, 5),
           "prob": lambda: torch.rand(6, 5)}


def _loss(fn: Callable, target: str, head: Callable = lambda y: y) -> Callable:
    def make():
        return (Op(lambda x, t, w: fn(head(x @ w), t), (4, 5)), [_randn(6, 4),
                                                                   _TARGET[target]()])
    return make


case("cross_entropy")(_loss(F.cross_entropy, "class"))
case("cross_entropy_smoothing_ignore")(_loss(
    lambda y, t: F.cross_entropy(y, torch.where(t == 2, -100, t), label_smoothing=0.1),
    "class"))
case("cross_entropy_sum_weight")(_loss(
    lambda y, t: F.cross_entropy(y, t, weight=torch.arange(1.0, 6.0), reduction="sum"),
    "class"))
case("cross_entropy_probabilities")(_loss(
    lambda y, t: F.cross_entropy(y, t.softmax(-1)), "prob"))
case("nll")(_loss(lambda y, t: F.nll_loss(y.log_softmax(-1), t), "class"))
case("mse")(_loss(F.mse_loss, "real"))
case("l1")(_loss(F.l1_loss, "real"))
case("smooth_l1")(_loss(lambda y, t: F.smooth_l1_loss(y, t, beta=0.5), "real"))
case("huber")(_loss(lambda y, t: F.huber_loss(y, t, delta=0.7), "real"))
case("bce")(_loss(F.binary_cross_entropy, "prob", torch.sigmoid))
case("bce_with_logits")(_loss(
    lambda y, t: F.binary_cross_entropy_with_logits(y, t, pos_weight=torch.full((5,), 2.0)),
    "prob"))
case("kl_div")(_loss(lambda y, t: F.kl_div(y.log_softmax(-1), t, reduction="batchmean"),
                     "prob"))
case("kl_div_log_target")(_loss(
    lambda y, t: F.kl_div(y.log_softmax(-1), t.log(), reduction="sum", log_target=True),
    "prob"))

# --- activations (after a Linear: the parameters' gradients pass through them)
for _name, _act in {
        "relu": nn.ReLU(), "gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"),
        "silu": nn.SiLU(), "sigmoid": nn.Sigmoid(), "tanh": nn.Tanh(),
        "leaky_relu": nn.LeakyReLU(0.1), "elu": nn.ELU(0.7), "softplus": nn.Softplus(2.0),
        "hardswish": nn.Hardswish(), "mish": nn.Mish(), "relu6": nn.ReLU6(),
        "hardtanh": nn.Hardtanh(-0.5, 0.8), "hardsigmoid": nn.Hardsigmoid(),
        "selu": nn.SELU(), "celu": nn.CELU(0.5), "softsign": nn.Softsign(),
        "logsigmoid": nn.LogSigmoid(), "prelu": nn.PReLU(5)}.items():
    case(f"act_{_name}")(lambda act=_act: (_seq(nn.Linear(4, 5), act), [_randn(6, 4)]))

# --- embedding: indices with repeats (the rows' gradients summed)
case("embedding")(lambda: (nn.Embedding(7, 4), [torch.tensor([[1, 3, 1], [6, 1, 3]])]))
case("embedding_padding_idx")(lambda: (nn.Embedding(7, 4, padding_idx=3),
                                       [torch.tensor([[1, 3, 1, 0], [3, 0, 0, 5]])]))


# --- attention
def _attention(**kw) -> Callable:
    def make():
        mask = kw.pop("mask", None)
        inputs = [_randn(2, 2, 4, 8), _randn(2, 2, 5, 8), _randn(2, 2, 5, 8)]
        if mask == "bool":
            inputs.append(torch.rand(4, 5) > 0.3)
            inputs[-1][:, 0] = True
        elif mask == "float":
            inputs.append(_randn(2, 1, 4, 5))
        return Op(lambda *a: F.scaled_dot_product_attention(*a, **kw)), inputs
    return make


case("sdpa")(_attention())
case("sdpa_causal")(_attention(is_causal=True))
case("sdpa_bool_mask")(_attention(mask="bool"))
case("sdpa_float_mask")(_attention(mask="float"))
case("sdpa_scale")(_attention(scale=0.2, is_causal=True))

# --- reductions
for _name, _fn in {
        "sum": lambda x: x.sum(1), "sum_all": lambda x: x.sum(),
        "mean": lambda x: x.mean((0, 2), keepdim=True),
        "amax": lambda x: x.amax(-1), "amin": lambda x: x.amin(1),
        "max_dim": lambda x: x.max(1).values, "var": lambda x: x.var(1),
        "var_biased": lambda x: x.var(-1, correction=0), "std": lambda x: x.std(-1),
        "norm": lambda x: x.norm(dim=-1), "norm_all": lambda x: torch.linalg.vector_norm(x),
        "logsumexp": lambda x: x.logsumexp(1), "prod": lambda x: x.prod(-1),
        "cumsum": lambda x: x.cumsum(1)}.items():
    case(f"reduce_{_name}")(lambda fn=_fn: (Op(lambda x, w: fn(x * w), (3, 4, 5)),
                                            [_randn(3, 4, 5)]))


# --- indexing and scatters
def _indexing(fn: Callable, *index: torch.Tensor, shape=(4, 5)) -> Callable:
    return lambda: (Op(lambda *a: fn(a[-1], *a[:-1]), shape), [*index])


case("index_select")(_indexing(lambda w, i: w.index_select(0, i), torch.tensor([2, 0, 2, 3])))
case("gather")(_indexing(lambda w, i: w.gather(1, i),
                         torch.tensor([[0, 4, 4], [1, 1, 2], [3, 0, 3], [2, 2, 2]])))
case("advanced_index")(_indexing(lambda w, i: w[i], torch.tensor([[3, 1], [1, 1]])))
case("advanced_index_two")(_indexing(lambda w, i, j: w[i, j], torch.tensor([0, 3, 3]),
                                     torch.tensor([4, 1, 1])))
case("advanced_index_dim1")(_indexing(lambda w, i: w[:, i], torch.tensor([4, 0, 4])))
case("select")(_indexing(lambda w: w[2].exp()))
case("masked_fill")(_indexing(lambda w, m: w.masked_fill(m, 0.5),
                              torch.tensor([True, False, False, True, False])))


def _scatter(fn: Callable, index: torch.Tensor, src: tuple[int, ...]) -> Callable:
    """fn(w, index, x): a write of the input x into the parameter w at `index`."""
    return lambda: (Op(lambda x, i, w: fn(w, i, x), (4, 5)), [_randn(*src), index])


case("index_add")(_scatter(lambda w, i, x: w.index_add(0, i, x), torch.tensor([1, 3, 1]),
                           (3, 5)))
case("scatter_add")(_scatter(lambda w, i, x: w.scatter_add(1, i, x),
                             torch.tensor([[0, 2, 0], [1, 1, 4]]), (2, 3)))
case("scatter")(_scatter(lambda w, i, x: w.scatter(1, i, x),
                         torch.tensor([[0, 2, 3], [1, 4, 0]]), (2, 3)))
case("index_put")(_scatter(lambda w, i, x: w.index_put((i,), x), torch.tensor([0, 2]),
                           (2, 5)))
case("index_put_accumulate")(_scatter(lambda w, i, x: w.index_put((i,), x, accumulate=True),
                                      torch.tensor([3, 0, 3]), (3, 5)))


# --- movement: cat, slice, pad, views, where, clamp
def _movement(fn: Callable, *shapes: tuple[int, ...]) -> Callable:
    return lambda: (Op(lambda x, *w: fn(x * w[0], *w[1:]), *shapes), [_randn(*shapes[0])])


for _name, _fn, _shapes in [
        ("cat", lambda x, y: torch.cat([x, y, x], 1), [(2, 3, 4), (2, 2, 4)]),
        ("stack", lambda x: torch.stack([x, x.flip(0)], -1), [(3, 4)]),
        ("slice", lambda x: x[:, 1:4:2, ::3], [(3, 5, 7)]),
        ("narrow_split", lambda x: x.split([1, 3], 1)[1] * x.chunk(2, 1)[0].sum(),
         [(3, 4, 2)]),
        ("pad_constant", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), [(2, 3, 4)]),
        ("pad_reflect", lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"), [(2, 3, 4)]),
        ("pad_replicate", lambda x: F.pad(x, (2, 1, 1, 2), mode="replicate"), [(2, 3, 4)]),
        ("pad_circular", lambda x: F.pad(x, (2, 1, 1, 2), mode="circular"), [(2, 3, 4)]),
        ("pad_reflect1d", lambda x: F.pad(x, (3, 2), mode="reflect"), [(2, 3, 5)]),
        ("pad_replicate1d", lambda x: F.pad(x, (3, 1), mode="replicate"), [(2, 3, 4)]),
        ("pad_replicate3d", lambda x: F.pad(x, (1, 0, 2, 1, 0, 1), mode="replicate"),
         [(1, 2, 1, 2, 3)]),
        ("pad_circular1d", lambda x: F.pad(x, (2, 3), mode="circular"), [(2, 3, 4)]),
        ("view_permute", lambda x: x.view(2, 3, 2, 2).permute(3, 0, 2, 1).reshape(4, 6),
         [(2, 3, 4)]),
        ("transpose_flatten", lambda x: x.transpose(0, 2).flatten(1), [(2, 3, 4)]),
        ("expand", lambda x: x.unsqueeze(1).expand(3, 4, 5), [(3, 5)]),
        ("broadcast_add", lambda x, y: x + y, [(3, 4), (4,)]),
        ("repeat", lambda x: x.repeat(2, 1, 3), [(3, 4)]),
        ("repeat_interleave", lambda x: x.repeat_interleave(2, dim=0), [(3, 4)]),
        ("flip_roll", lambda x: x.flip(1).roll(2, 0), [(4, 5)]),
        ("where", lambda x, y: torch.where(x > 0, x, y * 2), [(3, 4), (3, 4)]),
        ("clamp", lambda x: x.clamp(-0.5, 0.7), [(3, 4)]),
        ("clamp_min", lambda x: x.clamp(min=0.1), [(3, 4)]),
        ("tril", lambda x: x.tril(), [(4, 4)]),
        # not the unfold itself as the output: AOTAutograd copies the tangent of an
        # output into the traced output's overlapping strides, losing values (torch
        # 2.13, its aot_eager backend too)
        ("unfold", lambda x: x.unfold(1, 3, 2) * 2, [(2, 7)])]:
    case(_name)(_movement(_fn, *_shapes))

# --- resizing, recurrent layers and others
case("interpolate_nearest")(_movement(lambda x: F.interpolate(x, scale_factor=2), (1, 2, 3, 3)))
case("interpolate_bilinear")(_movement(
    lambda x: F.interpolate(x, size=(5, 4), mode="bilinear", align_corners=False),
    (1, 2, 3, 3)))
case("interpolate_bicubic", pytest.mark.slow)(_movement(
    lambda x: F.interpolate(x, size=(5, 4), mode="bicubic", align_corners=True), (1, 2, 3, 3)))
case("pixel_shuffle")(_movement(lambda x: F.pixel_shuffle(x, 2), (1, 8, 2, 3)))
case("normalize")(_movement(lambda x: F.normalize(x, dim=-1), (3, 4)))
case("cosine_similarity")(_movement(lambda x, y: F.cosine_similarity(x, y, dim=-1),
                                    (3, 4), (3, 4)))
case("lstm", pytest.mark.slow)(lambda: (nn.LSTM(3, 4, batch_first=True), [_randn(2, 3, 3)]))
case("gru", pytest.mark.slow)(lambda: (nn.GRU(3, 4), [_randn(3, 2, 3)]))
case("rnn_tanh", pytest.mark.slow)(lambda: (nn.RNN(3, 4), [_randn(3, 2, 3)]))
case("cross_entropy_2d")(lambda: (Op(lambda x, t, w: F.cross_entropy(
    torch.einsum("nchw,cd->ndhw", x, w), t, ignore_index=1), (3, 4)),
    [_randn(2, 3, 2, 2), _index(4, 2, 2, 2)]))
case("nll_ignore_sum")(_loss(
    lambda y, t: F.nll_loss(y.log_softmax(-1), t, ignore_index=0, reduction="sum"), "class"))

# --- elementwise arithmetic and math
for _name, _fn in {
        "mul_div": lambda x, w: x * w / (w.abs() + 1), "pow": lambda x, w: (x.abs() + 0.5) ** w,
        "exp_log": lambda x, w: (x * w).exp() + (x.abs() + 0.1).log(),
        "sqrt_rsqrt": lambda x, w: (x * w).abs().add(0.2).sqrt() * x.abs().add(1).rsqrt(),
        "sin_cos": lambda x, w: (x * w).sin() * x.cos(), "abs_sign": lambda x, w: (x * w).abs(),
        "minimum": lambda x, w: torch.minimum(x, w) + torch.maximum(x, w * 0.5),
        "erf": lambda x, w: torch.erf(x * w), "reciprocal": lambda x, w: 1 / (x.abs() + w.abs())
        }.items():
    case(f"math_{_name}")(lambda fn=_fn: (Op(fn, (3, 4)), [_randn(3, 4)]))


@pytest.mark.parametrize("make", CASES)
def test_gradients_match_autograd(make):
    torch.manual_seed(0)
    model, inputs = make()
    check_gradients(model, *inputs)


class WeightedLoss(nn.Module):
    """`_weighted` of model's output as a module for compile_training: the model's
    floating-point inputs are parameters (so that their gradients are the step's too),
    the others (indices, targets) its batch; the weights are buffers."""

    def __init__(self, model: nn.Module, inputs: list[torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self.kinds = [x.is_floating_point() for x in inputs]
        self.floats = nn.ParameterList(nn.Parameter(x.clone()) for x in inputs
                                       if x.is_floating_point())
        with torch.no_grad():
            out = copy.deepcopy(model)(*inputs)
        for i, t in enumerate(self._floats(out)):
            scale = torch.randn(t.shape, generator=torch.Generator().manual_seed(100 + i))
            self.register_buffer(f"scale{i}", torch.ones(()) if t.dim() == 0 else scale)

    @staticmethod
    def _floats(out) -> list[torch.Tensor]:
        return [t for t in torch.utils._pytree.tree_leaves(out)
                if isinstance(t, torch.Tensor) and t.is_floating_point()]

    def forward(self, *others):
        floats, rest = iter(self.floats), iter(others)
        out = self.model(*[next(floats) if f else next(rest) for f in self.kinds])
        return sum((t * getattr(self, f"scale{i}")).sum() for i, t in enumerate(self._floats(out)))


def _sgd_step(make):
    """One compile_training step of `make()`'s model under a weighted sum of its outputs,
    SGD with lr 0 and momentum 0.9 (the momentum buffer is then the gradient), beside
    autograd on a copy: (the step, the copy with its .grad, our loss, autograd's loss)."""
    torch.manual_seed(0)
    model, inputs = make()
    module = WeightedLoss(model, inputs)
    reference = copy.deepcopy(module)
    batch = tuple(x for x in inputs if not x.is_floating_point())
    step = kernelwright.compile_training(module, batch, None, optimizer=kernelwright.optim.SGD(
        lr=0.0, momentum=0.9))
    loss = step(*batch)
    want = reference(*batch)
    want.backward()
    return step, reference, loss, want


@pytest.mark.slow
@pytest.mark.parametrize("make", CASES)
def test_compile_training_gradients_match_autograd(make):
    """The same cases through compile_training (torch's joint export): SGD with lr 0 and
    momentum, whose buffer after the first step is the gradient; the running statistics
    it keeps against eager's."""
    step, reference, loss, want = _sgd_step(make)
    _close(torch.tensor(loss), want.detach(), "loss")
    state, grads = step.state_dict(), step.optimizer_state()
    for name, p in reference.named_parameters():
        _close(grads[name]["momentum_buffer"], p.grad, f"{name}'s gradient")
    for name, buf in reference.named_buffers():
        if buf.is_floating_point() and name in state:
            _close(state[name], buf, name)


@pytest.mark.parametrize("make", [
    pytest.param(_movement(lambda x: F.interpolate(x, scale_factor=2), (2, 3, 3, 4)),
                 id="nearest_x2"),
    pytest.param(_movement(lambda x: F.interpolate(x, size=(5, 7)), (2, 3, 3, 4)),
                 id="nearest_5x7"),
    pytest.param(lambda: (nn.Embedding(11, 32), [torch.tensor([[1, 3, 1, 10], [6, 1, 3, 1]])]),
                 id="embedding_rows")])
def test_training_step_writes_gradients_without_searching(make):
    """The gradients of a nearest upsampling (index_put with accumulate at indices the
    joint graph computes from aranges: planned on the host, a gather of each input
    element's writers) and of an embedding (a scatter-add of rows at the batch's tokens:
    a product of the transposed one-hot by the rows) in a training step: as autograd's,
    and no kernel searches the written positions (an eq against an iota, reduced)."""
    step, reference, _, _ = _sgd_step(make)
    grads = step.optimizer_state()
    for name, p in reference.named_parameters():
        _close(grads[name]["momentum_buffer"], p.grad, f"{name}'s gradient")
    names = [k.name for k in step.plan.kernels]
    assert not [n for n in names if {"iota", "eq", "reduce"} <= set(n.split("+"))], names
