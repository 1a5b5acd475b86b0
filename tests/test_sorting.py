"""sort, argsort, msort, topk and kthvalue (the `sort` primitive, kernels/sort.wgsl)
against PyTorch eager: values exactly, indices exactly where the order is defined (a
stable sort; a top-k of distinct values)."""

import pytest
import torch
from conftest import Fn, check

import kernelwright
from kernelwright.kernels import SORT_LIMIT, sort_space
from kernelwright.runtime.runtime import default_device, open_device


def exact(module, *inputs, choose=None):
    return check(module, *inputs, atol=0, rtol=0, equal_nan=True, choose=choose)


def tied(*shape):
    """Values with many ties (a few distinct integers, as floats)."""
    return torch.randint(-3, 4, shape).float()


@pytest.mark.parametrize("shape", [(7,), (4, 6), (2, 3, 5)])
def test_sort_every_dim(shape):
    x = tied(*shape)
    dims = range(-len(shape), len(shape)) if len(shape) < 3 else range(len(shape))
    exact(Fn(lambda x: [torch.sort(x, dim=d, descending=desc, stable=True)
                        for d in dims for desc in (False, True)]), x)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 1000])
def test_row_lengths(n):
    x = tied(3, n)
    exact(Fn(lambda x: (torch.sort(x, dim=1, stable=True),
                        torch.sort(x, dim=1, descending=True, stable=True),
                        torch.argsort(x, dim=1, stable=True))), x)


def test_every_setting():
    """Each workgroup size of the tuner's space sorts alike (fewer invocations than
    pairs: each takes several compare-exchanges of a step)."""
    x = tied(3, 300)
    space = sort_space(300)
    assert len(space) == 4
    for knobs in space:
        compiled = exact(Fn(lambda x: torch.sort(x, dim=1, descending=True, stable=True)), x,
                         choose=lambda request, k=knobs: k if request.kind == "sort" else None)
        assert [k.knobs for k in compiled.plan.kernels if k.name == "sort"] == [knobs]


def test_nan_inf_and_signed_zero():
    """NaN is the largest value (last ascending, first descending), ties of NaN, of
    +-inf and of -0 with +0 keep their order."""
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, nan, -inf, 0.0, inf, -0.0, nan, -1.0, inf, -inf, 0.0],
                      [nan, nan, nan, 2.0, -0.0, 0.0, -0.0, -inf, inf, 3.0, -2.0]])
    exact(Fn(lambda x: (torch.sort(x, dim=1, stable=True),
                        torch.sort(x, dim=1, descending=True, stable=True),
                        torch.sort(x, dim=0, stable=True), torch.msort(x))), x)


def test_int_bool_and_default_sort():
    i = torch.randint(-5, 6, (4, 9))
    x = torch.randperm(36).float().reshape(4, 9)  # distinct: sort.default's order is defined
    exact(Fn(lambda i, x: (torch.sort(i, dim=1, stable=True), torch.sort(i > 0, dim=1, stable=True),
                           torch.sort(i, dim=0, descending=True, stable=True),
                           torch.sort(x), torch.sort(x, 0, True), torch.argsort(x, 1, True))),
          i, x)


@pytest.mark.parametrize("k", [1, 5, 12])
def test_topk(k):
    x = torch.randperm(3 * 12 * 4).float().reshape(3, 12, 4) - 50
    i = torch.randperm(36).reshape(3, 12)
    exact(Fn(lambda x, i: (torch.topk(x, k, dim=1), torch.topk(x, k, dim=1, largest=False),
                           torch.topk(i, k), torch.topk(i, k, largest=False),
                           torch.kthvalue(x, k, 1), torch.kthvalue(i, k, 1, keepdim=True))),
          x, i)


def test_sorted_indices_downstream():
    """Indices used by gathers after the sort, and values fed into arithmetic."""
    x, y = tied(4, 10), torch.randn(4, 10)
    exact(Fn(lambda x, y: (torch.gather(y, 1, torch.sort(x, dim=1, stable=True)[1]),
                           torch.take_along_dim(y, torch.topk(y, 3, dim=1)[1], 1),
                           torch.sort(x * 2 + y, dim=0, stable=True)[0] - 1,
                           torch.argsort(x, dim=1, stable=True) * 3 + 1)), x, y)


def test_topk_long_rows():
    """Rows longer than one workgroup sorts: the first k of chunks, then of the
    candidates (ties keep their order, as a stable sort's first k)."""
    n = 5000
    x = torch.randperm(2 * n).float().reshape(2, n)
    t = tied(2, n)
    exact(Fn(lambda x: (torch.topk(x, 4), torch.topk(x, 3, largest=False))), x)
    module = Fn(lambda t: (torch.topk(t, 6), torch.topk(t, 5, largest=False)))
    compiled = kernelwright.compile(module, [t])
    (v1, i1), (v2, i2) = compiled(t)
    down, up = torch.sort(t, descending=True, stable=True), torch.sort(t, stable=True)
    assert torch.equal(v1, down[0][:, :6]) and torch.equal(i1, down[1][:, :6])
    assert torch.equal(v2, up[0][:, :5]) and torch.equal(i2, up[1][:, :5])


@pytest.mark.parametrize("n", [3000, 4096, 5000, 20000])
def test_long_rows(n):
    """Rows longer than one workgroup sorts (SORT_LIMIT): chunks sorted in workgroup
    memory, merged by passes over the row (one stage for 3000 and 4096, four for 20000,
    with half-cleaners between chunks); ties (few distinct values), NaN and infinities
    keep the stable order, in both directions."""
    x = tied(2, n)
    x[0, ::97] = float("nan")
    x[1, 5::131] = float("-inf")
    x[1, 7::151] = float("inf")
    module = Fn(lambda x: (torch.sort(x, dim=1, stable=True),
                           torch.sort(x, dim=-1, descending=True, stable=True),
                           torch.argsort(x, dim=1, stable=True)))
    compiled = exact(module, x)
    passes = [k for k in compiled.plan.kernels if k.name == "sort"]
    stages = (n - 1).bit_length() - SORT_LIMIT.bit_length() + 1
    # each of the three sorts: its chunks, then per stage a mirror pass, a half-cleaner per
    # distance between chunks and a merge of each chunk
    assert len(passes) == 3 * (1 + sum(2 + s for s in range(stages)))


def test_long_rows_every_setting():
    """Each setting of the tuner's space for the passes of a long sort (the chunks' sorts
    and merges, the global merge passes) sorts alike."""
    x = tied(2, 5000)
    spaces = {}

    def pick(request, at):
        if request.kind != "sort":
            return None
        spaces[request.key] = request.space
        return request.space[at % len(request.space)]
    for at in range(4):
        exact(Fn(lambda x: torch.sort(x, dim=1, stable=True)), x,
              choose=lambda request, at=at: pick(request, at))
    assert len(spaces) >= 3 and all(len(s) >= 3 for s in spaces.values())


def test_long_rows_distinct_topk_and_kthvalue():
    """A default (unstable) sort, a top-k too large for the chunked top-k and kthvalue of
    long rows of distinct values (their order is defined), of floats and of integers."""
    n = 20000
    x = torch.randperm(2 * n).float().reshape(2, n) - n
    i = torch.randperm(2 * n).reshape(2, n)
    exact(Fn(lambda x, i: (torch.sort(x), torch.topk(x, 3000), torch.topk(i, 3000, largest=False),
                           torch.kthvalue(x, 7001, 1), torch.kthvalue(i, 12345, 1, keepdim=True),
                           torch.argsort(i, descending=True))), x, i)


def test_long_rows_other_dims_and_dtypes():
    """A long sort along dim 0 (the lowering's permute) of floats, integers and bools, and
    of a float16 input (its values come back as float16)."""
    x = tied(3000, 3)
    i = torch.randint(-4, 5, (3000, 2))
    h = torch.randn(2, 2, 2500).half()
    exact(Fn(lambda x, i, h: (torch.sort(x, dim=0, stable=True),
                              torch.sort(x, dim=0, descending=True, stable=True),
                              torch.sort(i, dim=0, stable=True),
                              torch.sort(i > 0, dim=0, descending=True, stable=True),
                              torch.sort(h, dim=-1, stable=True))), x, i, h)

class MoE(torch.nn.Module):
    """A mixture-of-experts layer: each token's two best of four experts (by a router),
    their outputs weighted by the softmax of the two router logits."""

    def __init__(self, d: int = 8, experts: int = 4, top: int = 2):
        super().__init__()
        self.router = torch.nn.Linear(d, experts)
        self.experts = torch.nn.ModuleList(torch.nn.Sequential(
            torch.nn.Linear(d, 16), torch.nn.GELU(), torch.nn.Linear(16, d))
            for _ in range(experts))
        self.top = top

    def forward(self, x):
        logits, chosen = torch.topk(self.router(x), self.top, dim=-1)
        weights = torch.softmax(logits, dim=-1)
        outs = torch.stack([e(x) for e in self.experts], dim=1)  # [T, E, d]
        picked = torch.gather(outs, 1, chosen[..., None].expand(-1, -1, x.shape[-1]))
        return (weights[..., None] * picked).sum(1), chosen


def test_mixture_of_experts():
    torch.manual_seed(0)
    check(MoE(), torch.randn(10, 8))


def test_half_input():
    """A float16 input is read from its packed buffer; the values come back as float16."""
    x = torch.randn(3, 50).half()
    x[0, :10] = 1.0
    x[1, 3] = float("nan")
    exact(Fn(lambda x: (torch.sort(x, dim=1, stable=True),
                        torch.topk(x, 3, dim=0, largest=False))), x)


def test_long_rows_chunked_over_bindings():
    """Long rows whose pairs (32 KiB a row) take more than one binding of a device whose
    bindings hold 64 KiB: each pass is rebuilt per chunk of whole rows (chunks.py)."""
    device = open_device(default_device().adapter, {"max-storage-buffer-binding-size": 1 << 16,
                                                    "max-buffer-size": 1 << 17})
    x = tied(6, 3000)
    module = Fn(lambda x: torch.sort(x, dim=1, descending=True, stable=True)).eval()
    compiled = kernelwright.compile(module, [x], device=device)
    assert any("[chunk" in k.name for k in compiled.plan.kernels), compiled.plan.summary()
    values, idx = compiled(x, poison=True)
    want = torch.sort(x, dim=1, descending=True, stable=True)
    assert torch.equal(values, want[0]) and torch.equal(idx, want[1])
