"""Movement ops (views, permutes, slices, cat, pad) against PyTorch eager."""

import pytest
import torch
import torch.nn.functional as F
from conftest import Fn, check

import kernelwright


def test_reshape_permute_transpose():
    x = torch.randn(2, 3, 4, 5)
    check(Fn(lambda x: (x.reshape(6, 20), x.permute(3, 1, 0, 2).contiguous(), x.transpose(1, 3),
                        x.view(2, -1).t(), x.flatten(1), x.unsqueeze(2).squeeze(2) + 1)), x)


@pytest.mark.parametrize("case", [
    (lambda x: x.permute(0, 2, 3, 1).contiguous(), torch.randn(2, 17, 5, 37)),  # NCHW->NHWC
    (lambda x: x.t().contiguous() * 2.0 + 1.0, torch.randn(70, 45)),  # ops after it
    (lambda x: torch.relu(x.transpose(1, 2)).contiguous(), torch.randn(3, 33, 65)),
    (lambda x: x.permute(2, 0, 1).contiguous() > 0, torch.randn(20, 40, 18)),  # bool result
    (lambda x: x.permute(1, 0).to(torch.int32), torch.randint(-5, 5, (50, 31))),
])
def test_transposing_copies_go_through_the_tile(case):
    """An elementwise chain that reads its input transposed (a permute made contiguous)
    computes 32 x 32 tiles along the input's contiguous dim and stores them along the
    output's (kernels.TILE 1, kernels/transpose.wgsl): odd sizes, tails of tiles."""
    fn, x = case
    compiled = check(Fn(fn), x)
    (kernel,) = compiled.plan.kernels
    assert kernel.knobs["TILE"] == 1, kernel.knobs


@pytest.mark.slow
@pytest.mark.parametrize("ept,wg", [(1, 128), (2, 256), (1, 64)])
def test_transposing_tiles(ept, wg):
    """TILE 1 with EPT 1 and 2: tiles of 32 x 32 and 32 x 64 (the input's contiguous dim
    the longer one), by 32 x WG / 32 invocations (EPT 1, WG 128 the default), tails of
    tiles on both dims, other dims in between. The epilogue takes each element's index
    along every dim: a permute's read divides nothing."""

    knobs = {"WG": wg, "EPT": ept, "VEC": 1, "TILE": 1}
    for fn, x in ((lambda x: x.permute(0, 2, 3, 1).contiguous(), torch.randn(2, 70, 5, 45)),
                  (lambda x: torch.relu(x.transpose(1, 2)).contiguous(), torch.randn(3, 33, 100))):
        compiled = check(Fn(fn), x, choose=lambda r: knobs if r.kind == "elementwise" else None)
        (kernel,) = compiled.plan.kernels
        assert kernel.knobs == knobs and f"h < {32 * ept}" in kernel.source
        assert f"@workgroup_size(32, {wg // 32})" in kernel.source
        epilogue = kernel.source[kernel.source.index("fn epilogue"):].split("\n}\n")[0]
        assert " / " not in epilogue and " % " not in epilogue, epilogue
    default = check(Fn(lambda x: x.permute(0, 2, 3, 1).contiguous()), torch.randn(2, 70, 5, 45))
    assert default.plan.kernels[0].knobs == {"WG": 128, "EPT": 1, "VEC": 1, "TILE": 1}


def test_tile_setting_on_a_kernel_read_in_its_own_layout():
    """TILE 1 forced where nothing is read transposed (the search may try it): still
    correct; by default such a kernel is not tiled."""

    x, y = torch.randn(3, 20, 45), torch.randn(3, 20, 45)
    assert check(Fn(lambda x, y: x * y + 1.0), x, y).plan.kernels[0].knobs["TILE"] == 0
    # a broadcast along the rows reads one element per row: in order, not transposed
    broadcast = check(Fn(lambda b: b.unsqueeze(1).expand(40, 64) * 2.0), torch.randn(40))
    assert broadcast.plan.kernels[0].knobs["TILE"] == 0
    tiled = {"WG": 128, "EPT": 1, "VEC": 1, "TILE": 1}
    compiled = check(Fn(lambda x, y: x * y + 1.0), x, y,
                     choose=lambda r: tiled if r.kind == "elementwise" else None)
    assert compiled.plan.kernels[0].knobs == tiled


def test_expand_slice_select():
    x = torch.randn(3, 1, 7)
    check(Fn(lambda x: (x.expand(3, 4, 7) * 1, x[:, :, 1:6:2], x[1], x[..., -1], x[:, 0, 2:])), x)


def test_cat_stack_pad_split():
    a, b = torch.randn(2, 3, 5), torch.randn(2, 4, 5)
    check(Fn(lambda a, b: (torch.cat([a, b], 1), torch.cat([a, a * 2], -1), torch.stack([a, a], 0),
                           F.pad(a, (1, 2)), F.pad(a, (0, 0, 2, 1), value=-1.5),
                           torch.split(b, 3, 1)[1], b.chunk(2, 1)[0])), a, b)


def test_view_output_of_input_is_copied():
    x = torch.randn(4, 6)
    check(Fn(lambda x: (x, x.view(2, 12), x.t())), x)


def test_index_select_embedding_index_and_roll():
    x = torch.randn(5, 7)
    i = torch.tensor([4, 0, -1, 2])
    emb = torch.nn.Embedding(11, 6)
    tokens = torch.randint(0, 11, (3, 4))
    check(Fn(lambda x, i: (torch.index_select(x, 1, i.clamp(min=0)), x[:, i], x[i],
                           torch.roll(x, 2, 1), torch.roll(x, -1, 0))), x, i)
    check(emb, tokens)


def test_one_hot():
    t = torch.randint(0, 6, (4, 3))
    check(Fn(lambda t: F.one_hot(t, 6) * 2), t)


def test_advanced_indexing_several_index_tensors():
    x = torch.randn(5, 5, 6)
    i = torch.tensor([3, 0, -1])
    j = torch.tensor([[1], [4]])  # broadcasts with i to [2, 3]
    # adjacent index tensors replace their dims in place; separated ones go first
    check(Fn(lambda x, i, j: (x[i, :, j], x[:, j, i], x[i, j], x[i, j, i], x[:, :, i],
                              x[j, 2:4, j] * 2)), x, i, j)


def test_bool_masks():
    x = torch.randn(4, 5)
    check(Fn(lambda x: (torch.where(x > 0, x, x * 0.1), x.masked_fill(x < -0.5, 3.0),
                        torch.where(x > 0, x, 0.0))), x)

    class Positives(torch.nn.Module):
        def forward(self, x):
            return x[x > 0]

    message = r"(?s)aten.index.Tensor: indexing with a boolean mask.*torch.where.*\n  at .*" \
              r"test_movement.py.*return x\[x > 0\]"
    with pytest.raises(kernelwright.CompileError, match=message):
        kernelwright.compile(Positives(), [x])


def test_index_put_and_accumulate():
    def put(x, i, j, v):
        y = x.clone()
        y[i] = v  # rows
        y[:, j, 1] = -1.0  # a scalar into a sliced and indexed spot
        z = x.clone()
        z[i, j] = v[:, 0, 0]
        w = x.clone()
        w[x > 0.5] = 0.0  # a run-time mask with one value: torch.where
        return y, z, w

    x = torch.randn(5, 4, 3)
    i = torch.tensor([3, 0, -1])
    j = torch.tensor([2, -4, 1])
    check(Fn(put), x, i, j, torch.randn(3, 4, 3))
    dup = torch.tensor([1, 3, 1, 1, 0])  # duplicates are summed when accumulating
    check(Fn(lambda x, d, v: (x.index_put((d,), v, accumulate=True),
                              x.index_add(1, d[:4], v[:4].transpose(0, 1)))),
          torch.randn(4, 4), dup, torch.randn(5, 4))


def _searches(compiled) -> list[str]:
    """The plan's kernels that search written positions: an eq against an iota reduced."""
    return [k.name for k in compiled.plan.kernels
            if {"iota", "eq", "reduce"} <= set(k.name.split("+"))]


def test_host_value_computes_index_arithmetic_on_aranges_and_nothing_else():
    """GraphBuilder.host_value: aranges, literals, constants, views and the elementwise
    ops of ir.HOST_EW, with WGSL's f32 -> i32 truncation; None for a run-time input, a
    constant the graph updates, an op it does not evaluate, or a value over its limit."""
    import numpy as np

    from kernelwright.ir.ir import GraphBuilder

    b = GraphBuilder()
    f = b.iota((7,), 0, -3.0, 1.0, "f32")
    rows = b.cast(b.ew("mul", f, b.scalar(0.75)), "i32")  # trunc(0.75 (i - 3))
    grid = b.ew("add", b.ew("mul", b.reshape(rows, (7, 1)), b.scalar(5, "i32")),
                b.flip(b.iota((1, 5), 1), [1]))
    cut = b.pad(b.slice(grid, 0, 1, 7, 2), [(1, 0), (0, 0)], -1)
    tab = b.const(np.array([[2, -3, 4, 0, 1]], np.int32), "i32")
    picked = b.ew("where", b.ew("lt", tab, b.scalar(0, "i32"), dtype="bool"),
                  b.ew("add", tab, b.scalar(9, "i32")), cut)
    rows_np = np.trunc((np.arange(7, dtype=np.float32) - 3) * np.float32(0.75)).astype(np.int32)
    grid_np = rows_np[:, None] * 5 + np.arange(5)[::-1]
    cut_np = np.pad(grid_np[1:7:2], [(1, 0), (0, 0)], constant_values=-1)
    want = np.where(np.array([[2, -3, 4, 0, 1]]) < 0, [[2, 6, 4, 0, 1]], cut_np)
    np.testing.assert_array_equal(b.host_value(picked), want)
    np.testing.assert_array_equal(b.host_value(b.cat([rows, rows], 0)),
                                  np.concatenate([rows_np, rows_np]))
    x = b.input((5,), "i32", "x")
    assert b.host_value(b.ew("add", x, b.iota((5,), 0))) is None  # a run-time input
    weight = b.const(np.ones(5, np.float32), "f32", state=True)
    assert b.host_value(b.ew("mul", weight, weight)) is None  # a state the graph updates
    assert b.host_value(b.ew("exp", f)) is None  # not evaluated here
    assert b.host_value(f, limit=6) is None


@pytest.mark.parametrize("accumulate", [True, False])
def test_writes_at_positions_known_at_compile_time_are_planned(accumulate):
    """index_put / scatter_add at indices computed from aranges (a nearest upsampling's:
    floor(i * scale), with 1 or 2 writers per destination, and a reversed arange): the
    writers of each destination are listed on the host, read by a gather; no search."""
    def fn(x, v, s):
        rows = (torch.arange(7) * 0.5).long()  # 0 0 1 1 2 2 3: 2, 2, 2 and 1 writers
        cols = torch.arange(5).flip(0)
        a = x.index_put((rows[:, None], cols), v, accumulate=accumulate)
        b = x.index_put((torch.arange(6)[:, None], cols), s, accumulate=accumulate)
        c = x.scatter_add(0, rows[:, None].expand(7, 5), v) if accumulate else \
            x.scatter(0, rows[:4, None].expand(4, 5) * 0 + torch.arange(4)[:, None], v[:4])
        return a, b, c

    x = torch.randn(6, 5)
    compiled = check(Fn(fn), x, torch.randn(7, 5), torch.randn(6, 5))
    assert not _searches(compiled), _searches(compiled)


@pytest.mark.parametrize("columns", [16, 40])
def test_scatter_add_of_rows_at_run_time_positions_is_a_product(columns):
    """index_put(accumulate) / index_add of rows at run-time indices with duplicates and
    a negative index, and an embedding-like sum of many rows into few: a product of the
    transposed one-hot (computed in the matmul's loader) by the rows, no search."""
    def fn(x, i, v, t):
        a = x.index_put((i,), v, accumulate=True)
        b = x.index_add(0, i % 9, v * 2)  # (index_add takes no negative index)
        c = torch.zeros_like(x).index_put((t.flatten(),), v.repeat(4, 1), accumulate=True)
        return a, b, c

    x, v = torch.randn(9, columns), torch.randn(6, columns)
    i = torch.tensor([3, 0, 3, -1, 8, 3])
    t = torch.randint(0, 9, (4, 6))
    compiled = check(Fn(fn), x, i, v, t)
    assert not _searches(compiled), _searches(compiled)
    assert sum(k.key.startswith("matmul") and "eq" in k.name.split("+")
               for k in compiled.plan.kernels) == 3, [k.name for k in compiled.plan.kernels]


def test_scatter_and_scatter_add():
    x = torch.randn(4, 6)
    index = torch.tensor([[5, 0, 2], [1, 1, 3], [0, 4, 5]])  # smaller than x and src
    src = torch.randn(4, 5)
    uniq = torch.stack([torch.randperm(6)[:3] for _ in range(3)])  # scatter: no duplicates
    check(Fn(lambda x, i, u, s: (x.scatter(1, u, s), x.scatter(1, u, 2.5), x.scatter_add(1, i, s),
                                 x.scatter_add(0, i.clamp(max=3), s),
                                 torch.zeros(3, 6).scatter_(1, u, 1.0))), x, index, uniq, src)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_unpool(nd):
    class PoolUnpool(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = getattr(torch.nn, f"MaxPool{nd}d")(2, stride=2, return_indices=True)
            self.unpool = getattr(torch.nn, f"MaxUnpool{nd}d")(2, stride=2)

        def forward(self, x):
            y, idx = self.pool(x)
            return self.unpool(y, idx), self.unpool(y * 2, idx, output_size=x.shape)

    compiled = check(PoolUnpool(), torch.randn(2, 3, *[6 if nd < 3 else 4] * nd))
    # the pool's windows tile its input: each output element reads its own window's
    # index, no search over the plane's indices (a reduction)
    assert not any(k.key.startswith("reduce") for k in compiled.plan.kernels), \
        [k.key for k in compiled.plan.kernels]


@pytest.mark.parametrize("case", ["floor", "ceil", "overlapping", "other_indices", "size"])
def test_max_unpool_windows_and_scatter(case):
    """Unpooling after a pool whose windows tile a plane that they do not divide (floor:
    the last row and column are never written; ceil: the last windows are partial), and
    the cases that need the general scatter: overlapping windows, indices not a pool's,
    an output plane other than the pool's input."""
    pool = torch.nn.MaxPool2d(2, stride=2, return_indices=True, ceil_mode=case == "ceil")
    unpool = torch.nn.MaxUnpool2d(2, stride=2)
    if case == "overlapping":
        pool = torch.nn.MaxPool2d(3, stride=2, return_indices=True)
        unpool = torch.nn.MaxUnpool2d(3, stride=2)

    def fn(x, perm):
        y, idx = pool(x)
        if case == "other_indices":  # every window's index moved to another window's
            idx = idx.flatten(2)[:, :, perm].reshape(idx.shape)
        size = (x.shape[2] - 1, x.shape[3]) if case == "size" else x.shape[2:]
        return unpool(torch.relu(y), idx, output_size=size)

    x = torch.randn(2, 3, 7, 9)
    compiled = check(Fn(fn), x, torch.randperm(12 if case != "ceil" else 20))
    searched = any(k.key.startswith("reduce") for k in compiled.plan.kernels)
    assert searched == (case in ("overlapping", "other_indices", "size")), case


@pytest.mark.slow
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_and_put(include_self):
    x = torch.randn(4, 6)
    index = torch.tensor([[5, 0, 5], [1, 1, 3], [0, 4, 4]])  # duplicates in each row
    src = torch.randn(4, 5) + 2
    check(Fn(lambda x, i, s: tuple(x.scatter_reduce(1, i, s, r, include_self=include_self)
                                   for r in ("sum", "prod", "mean", "amax", "amin"))),
          x, index, src)
    counts = torch.tensor([[3, 0, 2], [1, 5, 1]])
    check(Fn(lambda c, i: c.scatter_reduce(1, i[:2, :3] % 3, c * 2, "mean",
                                           include_self=include_self)), counts, index)
    if include_self:
        flat = torch.tensor([7, -1, 0, 20])
        check(Fn(lambda x, f, s: (x.clone().put_(f, s[0, :4]),
                                  x.put(f[:3], s[1, :3] * 0 + 1, accumulate=True))),
              x, flat, src)


def test_data_dependent_shapes_raise():
    for f in (lambda x: torch.masked_select(x, x > 0), lambda x: torch.nonzero(x)):
        with pytest.raises(kernelwright.CompileError, match=r"known only at run time"):
            kernelwright.compile(Fn(f), [torch.randn(3, 4)])


def test_masked_scatter_fills_the_true_elements_in_order():
    """x.masked_scatter(mask, source): the k-th true element of the mask (broadcast to
    x's shape, row-major) takes source's k-th; the mask read at run time (a LLaVA's image
    placeholders, a row's mask along the hidden dim), source larger than needed."""
    x = torch.randn(2, 7, 5)
    ids = torch.tensor([[1, 3, 3, 2, 0, 3, 1], [3, 0, 0, 0, 3, 1, 1]])
    source = torch.randn(2, 4, 5)
    fn = Fn(lambda x, ids, s: x.masked_scatter((ids == 3).unsqueeze(-1), s))
    compiled = check(fn, x, ids, source)
    other = torch.tensor([[3, 3, 3, 3, 3, 3, 3], [0, 3, 0, 0, 0, 0, 0]])  # all 8 rows
    torch.testing.assert_close(compiled(x, other, source), fn(x, other, source))
    check(Fn(lambda x, m, s: x.masked_scatter(m, s)), torch.randint(0, 9, (3, 4)),
          torch.rand(3, 4) > 0.5, torch.randint(0, 9, (12,)))


def test_a_check_of_values_is_not_compiled():
    """torch._check of a tensor (transformers' count of image placeholders) traces to
    _is_all_true, a value on the host and an assertion: dropped (a plan runs no check),
    the rest of the graph compiled."""
    def fn(x):
        torch._check_tensor_all((x > -100).all())
        return x * 2

    x = torch.randn(4, 3)
    check(Fn(fn), x)
