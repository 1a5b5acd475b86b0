"""Memory-bound kernels: vec4 elementwise kernels, row kernels (a row's reductions and
the elementwise work over the same row in one kernel: schedule.fuse_rows,
kernels._rows) and reductions through the row template, against PyTorch eager."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check

from kernelwright.kernels import rows as row_kernels
from kernelwright.schedule import schedule


def _kinds(compiled) -> list[str]:
    return [k.key.split()[0] for k in compiled.plan.kernels]


# -- vec4 elementwise -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("shape", [(4, 33), (1001,), (2, 3, 5), (8,)])
def test_elementwise_vec4_only_on_multiples_of_4(shape):
    x = torch.randn(*shape)
    compiled = check(Fn(lambda x: F.gelu(x) * 2 + 1), x)
    (kernel,) = compiled.plan.kernels
    numel = x.numel()
    assert kernel.knobs["VEC"] == (4 if numel % 4 == 0 else 1), kernel.knobs
    assert ("array<vec4<f32>>" in kernel.source) == (numel % 4 == 0)


def test_elementwise_vec4_with_broadcasts_gathers_and_other_dtypes():
    # x and y read at the stored element (vec4 loads); the bias row and the transposed
    # z at other indices (scalar loads); bool and int outputs are stored 4 at a time too
    x, y, z = torch.randn(6, 20), torch.randn(6, 20), torch.randn(20, 6)
    b = torch.randn(20)
    compiled = check(Fn(lambda x, y, z, b: (x * y + b, x + z.t(), x > y, (x * 3).int(),
                                            torch.where(x > 0, y, b))), x, y, z, b)
    assert all(k.knobs.get("VEC") == 4 for k in compiled.plan.kernels), compiled.plan.summary()


def test_elementwise_vec4_reading_one_buffer_twice():
    # x read at its own element (a lane) and reversed (a scalar load of the same buffer)
    x = torch.randn(4, 12)
    check(Fn(lambda x: x * x.flip(1) + x), x)


# -- row kernels ------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("cols", [50, 64, 3, 700])
def test_softmax_log_softmax_one_kernel_each(cols):
    x = torch.randn(9, cols) * 4
    compiled = check(Fn(lambda x: torch.softmax(x, -1)), x)
    assert _kinds(compiled) == ["rows"], compiled.plan.summary()
    compiled = check(Fn(lambda x: torch.log_softmax(x, -1)), x)
    assert _kinds(compiled) == ["rows"], compiled.plan.summary()


@pytest.mark.slow
def test_softmax_3d_last_dim_and_other_dims():
    x = torch.randn(3, 7, 20)
    compiled = check(Fn(lambda x: torch.softmax(x, -1)), x)
    assert _kinds(compiled) == ["rows"], compiled.plan.summary()
    # over a leading dim the rows are not contiguous in the output: reductions as before
    for dim in (0, 1):
        compiled = check(Fn(lambda x, dim=dim: torch.softmax(x, dim)), x)
        assert "rows" not in _kinds(compiled), compiled.plan.summary()


@pytest.mark.slow
def test_rows_of_16384_fuse_into_one_kernel_each():
    """Rows up to schedule.ROW_FUSION_MAX (ROW_CACHE elements per invocation) are one
    row kernel; enough rows that the reductions are not split into pieces first."""
    x = torch.randn(512, 16384)
    compiled = check(Fn(lambda x: (torch.softmax(x, -1), F.layer_norm(x, (16384,)))), x)
    assert _kinds(compiled) == ["rows", "rows"], compiled.plan.summary()


def test_row_cache_counts_every_buffer_of_the_row():
    """A fused row kernel holds at most ROW_CACHE elements per invocation across all the
    buffers it reads at the row's elements: 128 of one buffer fit, 128 of each of two do
    not (a compile given such knobs keeps the defaults)."""
    from kernelwright import kernels
    from kernelwright.ir.ir import CompileError

    x, y = torch.randn(3, 8188), torch.randn(3, 8188)  # too short to split
    for fn, fits in ((lambda x, y: torch.softmax(x, -1) + y, False),
                     (lambda x, y: torch.softmax(x, -1), True)):
        requests = []
        check(Fn(fn), x, y, choose=lambda r, seen=requests: seen.append(r))
        (request,) = [r for r in requests if r.kind == "rows"]
        knobs = {"WG": 64, "TPR": 64, "VEC": 4, "ORDER": "row"}  # 32 steps of 4
        assert kernels.ROW_CACHE == 128
        if fits:
            request.generate(knobs)
        else:
            with pytest.raises(CompileError, match="on-chip row cache"):
                request.generate(knobs)


def test_rows_longer_than_the_limit_keep_separate_kernels():
    x = torch.randn(2, schedule.ROW_FUSION_MAX + 4)
    compiled = check(Fn(lambda x: F.layer_norm(x, x.shape[-1:])), x)
    assert "rows" not in _kinds(compiled), compiled.plan.summary()


@pytest.mark.slow
@pytest.mark.parametrize("cols", [37, 64])
def test_layer_norm_and_rms_norm_one_kernel(cols):
    x = torch.randn(2, 5, cols)
    ln = torch.nn.LayerNorm(cols)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    compiled = check(ln, x)
    assert _kinds(compiled) == ["rows"], compiled.plan.summary()
    w = torch.randn(cols)
    compiled = check(Fn(lambda x: F.rms_norm(x, (cols,), w, eps=1e-5)), x)
    assert _kinds(compiled) == ["rows"], compiled.plan.summary()
    compiled = check(Fn(lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w),
                     x)
    assert _kinds(compiled) == ["rows"], compiled.plan.summary()


@pytest.mark.parametrize("shape", [(1, 1, 64), (1, 48)])
def test_norm_of_a_single_row_is_one_kernel(shape):
    # a decoded token's norm: one row, whose row index has no digits (fuse_rows' trace of
    # the reads must not ask for a row digit of size 1); read by two products, so the
    # normalized row is stored (before: the statistic's kernel, then the multiply's)
    x, w = torch.randn(*shape), torch.randn(shape[-1])
    a, b = torch.randn(shape[-1], 8), torch.randn(shape[-1], 8)

    def f(x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        return y @ a, y @ b

    compiled = check(Fn(f), x)
    assert _kinds(compiled).count("rows") == 1 and len(_kinds(compiled)) == 3, \
        compiled.plan.summary()


@pytest.mark.slow
def test_row_statistic_also_returned_keeps_its_kernel():
    # the max is an output too: the row kernel would not store it, so no fusion of it
    x = torch.randn(6, 30)
    check(Fn(lambda x: (torch.softmax(x, -1), x.amax(-1))), x)

    def f(x):
        m = x.amax(-1, keepdim=True)
        return x - m, m

    compiled = check(Fn(f), x)
    assert "rows" not in _kinds(compiled), compiled.plan.summary()


@pytest.mark.slow
@pytest.mark.parametrize("cols", [37, 64])
def test_reduction_reading_a_reduction_of_its_rows_is_one_kernel(cols):
    """A reduction whose loader or epilogue reads another reduction of the same rows
    (logsumexp's sum reads the max, a variance's the mean) ends a row kernel of its
    own: the row is read once and the kernel stores one value per row."""
    x = torch.randn(6, 5, cols) * 3
    for f in (lambda x: torch.logsumexp(x, -1), lambda x: x.var(-1),
              lambda x: x.std(-1, keepdim=True) + 1):
        compiled = check(Fn(f), x)
        assert _kinds(compiled) == ["rows"], compiled.plan.summary()
    # over a leading dim the rows are strided: each reduction keeps its column kernel
    compiled = check(Fn(lambda x: x.var(0)), x)
    assert "rows" not in _kinds(compiled), compiled.plan.summary()
    # the max returned as well: it keeps its own kernel

    def lse_and_max(x):
        m = x.amax(-1, keepdim=True)
        return (x - m).exp().sum(-1, keepdim=True).log() + m, m
    compiled = check(Fn(lse_and_max), x)
    assert "rows" not in _kinds(compiled), compiled.plan.summary()


def test_row_kernel_takes_more_invocations_per_row_to_fit_its_buffers(monkeypatch):
    """A row kernel holds at most ROW_CACHE elements per invocation, of all the buffers
    it reads at the row's elements: its default TPR doubles until they fit, and rows of
    too many buffers keep a kernel per reduction (they failed to compile before)."""
    monkeypatch.setattr(row_kernels, "ROW_CACHE", 8)
    x, y = torch.randn(6, 1100), torch.randn(6, 1100)
    compiled = check(Fn(lambda x: torch.softmax(x, -1)), x)
    (kernel,) = compiled.plan.kernels
    assert kernel.knobs["TPR"] == 256, kernel.knobs  # 2 steps of 4 elements each
    compiled = check(Fn(lambda x, y: torch.softmax(x, -1) + y), x, y)  # 2 x 8 > 8
    assert "rows" not in _kinds(compiled), compiled.plan.summary()


@pytest.mark.slow
def test_row_kernel_with_argmax_ints_and_a_broadcast_weight():
    x = torch.randn(10, 24)
    w = torch.randn(24)
    check(Fn(lambda x: (x - x.mean(-1, keepdim=True)) * w
             + x.argmax(-1, keepdim=True).float()), x)
    i = torch.randint(-5, 5, (7, 16))
    check(Fn(lambda i: i - i.amax(-1, keepdim=True)), i)


def test_row_kernel_reading_a_transposed_input():
    # the rows of x.t() are strided in memory: read from memory in every pass, still right
    x = torch.randn(40, 6)
    compiled = check(Fn(lambda x: x.t() * torch.rsqrt((x.t() ** 2).mean(-1, keepdim=True))), x)
    assert _kinds(compiled) == ["rows"], compiled.plan.summary()
    assert "rows" in _kinds(check(Fn(lambda x: torch.softmax(x.t(), -1)), x))


def test_row_kernel_whose_row_index_is_mixed_up_is_not_fused():
    # the statistic is read at a row other than its own (a reshape regroups the rows)
    x = torch.randn(4, 6)

    def f(x):
        m = x.amax(-1, keepdim=True)  # [4, 1]
        return (x.reshape(6, 4) - m.reshape(1, 4)).reshape(4, 6)

    compiled = check(Fn(f), x)
    assert "rows" not in _kinds(compiled), compiled.plan.summary()


class Block(torch.nn.Module):
    def __init__(self, d=32, heads=2):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(),
                                      torch.nn.Linear(2 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (y.reshape(b, t, self.heads, -1).transpose(1, 2) for y in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return torch.log_softmax(x + self.ff(self.ln2(x)), -1)


@pytest.mark.slow
def test_small_model_with_fused_softmax_and_norms():
    torch.manual_seed(0)
    compiled = check(Block(), torch.randn(2, 9, 32))
    assert "rows" in _kinds(compiled), compiled.plan.summary()


# -- reductions through the row template ------------------------------------------------
@pytest.mark.slow
def test_column_reduction_knobs_and_row_order():
    """A reduction over dim 0 defaults to the knobs measured fastest on the H200 (VEC 4,
    "col" order, TPR >= 8); the "row" order of the search space stays correct."""
    x = torch.randn(300, 40)
    module = Fn(lambda x: (x.sum(0), x.amax(0), x.argmin(0)))
    compiled = check(module, x)
    assert all(k.knobs["ORDER"] == "col" and k.knobs["VEC"] == 4 and k.knobs["TPR"] >= 8
               for k in compiled.plan.kernels), compiled.plan.summary()

    def row_order(request):
        return {"WG": 64, "TPR": 8, "VEC": 1, "ORDER": "row"}

    compiled = check(module, x, choose=row_order)
    assert all(k.knobs["ORDER"] == "row" for k in compiled.plan.kernels), compiled.plan.summary()


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(1, 4096), (3000, 2), (65, 12), (5, 1001)])
def test_reductions_short_long_and_odd_rows(shape):
    x = torch.randn(*shape)
    check(Fn(lambda x: (x.sum(-1), x.amin(-1), x.argmax(-1), (x > 0).sum(-1))), x)
