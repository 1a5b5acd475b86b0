"""Scans (cumsum, cumprod, cummax/cummin, logcumsumexp) and the patterns built from them
(reversed, exclusive, masked) against PyTorch eager."""

import pytest
import torch
from conftest import Fn, check

import kernelwright


@pytest.mark.parametrize("shape,dim", [((5, 7), 1), ((5, 7), 0), ((2, 3, 4), 1), ((2, 3, 4), -1),
                                       ((2, 3, 4), 0), ((33,), 0), ((1, 1), 1)])
def test_cumsum_cumprod(shape, dim):
    x = torch.randn(*shape)
    check(Fn(lambda x: (torch.cumsum(x, dim), torch.cumprod(1 + 0.1 * x, dim))), x)


@pytest.mark.parametrize("n", [300, 1000, 5000])
def test_cumsum_long_rows(n):
    """Rows of several invocations' items and of several chunks (5000 > 256 * 8): the
    running total carries across chunks."""
    x = torch.rand(3, n) - 0.25
    check(Fn(lambda x: (torch.cumsum(x, 1), torch.cumprod(1 + x / n, 1))), x, atol=2e-4)


def test_cumsum_long_column():
    x = torch.rand(700, 3)
    check(Fn(lambda x: torch.cumsum(x, 0)), x, atol=2e-4)


def test_cumsum_int_and_bool():
    x = torch.randn(4, 9)
    i = torch.randint(-3, 4, (4, 9))
    check(Fn(lambda x, i: (torch.cumsum(x > 0, 1), torch.cumsum(i, 0), torch.cumprod(i, 1),
                           torch.cumsum(i, 1, dtype=torch.float32))), x, i)


def test_reversed_cumsum():
    x = torch.randn(4, 6, 5)
    check(Fn(lambda x: (torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1]),
                        torch.flip(x, [0, 2]), x.flip(-1).cumprod(-1).flip(-1))), x)


def test_exclusive_cumsum():
    x = torch.randn(3, 10)
    check(Fn(lambda x: (torch.cumsum(x, 1) - x,
                        torch.nn.functional.pad(torch.cumsum(x, 1)[:, :-1], (1, 0)))), x)


def test_masked_cumsum():
    x, m = torch.randn(4, 12), torch.rand(4, 12) > 0.4
    check(Fn(lambda x, m: (torch.cumsum(x * m, 1), torch.cumsum(x.masked_fill(~m, 0), 1))),
          x, m)


def test_cummax_cummin():
    x = torch.randint(-3, 4, (3, 40)).float()  # many ties: indices go to the later element
    check(Fn(lambda x: (*torch.cummax(x, 1), *torch.cummin(x, 0))), x)


def test_cummax_nan():
    """A NaN, once seen, stays the running max and min (its index too), as in PyTorch."""
    x = torch.randn(2, 9)
    x[0, 3] = x[0, 6] = x[1, 8] = float("nan")
    fn = Fn(lambda x: (*torch.cummax(x, 1), *torch.cummin(x, 1)))
    got = kernelwright.compile(fn, [x])(x, poison=True)
    for g, e in zip(got, fn(x)):
        torch.testing.assert_close(g, e, equal_nan=True)


def test_cummax_int():
    i = torch.randint(-3, 4, (5, 6))
    check(Fn(lambda i: (*torch.cummax(i, 1), *torch.cummin(i, 1))), i)


def test_logcumsumexp():
    x = torch.randn(3, 50) * 5
    x[0, :3] = float("-inf")
    check(Fn(lambda x: (torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0))), x)


def test_cumsum_fused_epilogue():
    """Elementwise work after the scan fuses into its epilogue, before it into its loader."""
    x = torch.randn(6, 20)
    compiled = check(Fn(lambda x: torch.cumsum(x.exp() * 0.5, 1).sqrt() + 1), x)
    assert len(compiled.plan.kernels) == 1


def test_arange_cumsum():
    x = torch.randn(3, 8)
    check(Fn(lambda x: x * torch.cumsum(torch.arange(8), 0)), x)


def test_cumsum_rows_past_grid_limit():
    """More rows than one grid dimension holds (65535): the grid folds into 2-D."""
    x = torch.randn(2, 65600)
    check(Fn(lambda x: torch.cumsum(x, 0)), x)


def test_prod_argmax_int_bool():
    """The reductions next to the scans, on int64 and bool tensors (int64 results)."""
    i = torch.randint(-3, 4, (4, 6))
    m = torch.rand(4, 6) > 0.5
    check(Fn(lambda i, m: (i.prod(1), i.argmax(1), i.argmin(0), m.sum(1), m.long().prod(0),
                           (i * m).cumsum(1).argmax(1))), i, m)


STAGED = [{"STAGE": 1}, {"STAGE": 1, "WG": 64, "ITEMS": 8}, {"STAGE": 1, "WG": 128, "ITEMS": 1}]


@pytest.mark.parametrize("knobs", STAGED)
def test_staged_scans(knobs):
    """The scan template's STAGE 1 setting (the chunk staged in workgroup memory) on
    every scan op, rows of one and of several chunks, along the last dim and others."""
    from kernelwright import tune

    x = torch.rand(3, 1100) - 0.25
    y = torch.randn(4, 6, 5)
    y[0, 2, 1] = float("nan")
    m = torch.rand(3, 1100) > 0.4
    fn = Fn(lambda x, y, m: (torch.cumsum(x, 1), torch.cumprod(1 + x / 1100, 1),
                             *torch.cummax(y, 1), *torch.cummin(y, -1),
                             torch.logcumsumexp(x * 5, 1), torch.cumsum(x * m, 1),
                             torch.cumsum(m, 1), torch.flip(torch.cumsum(torch.flip(x, [1]), 1),
                                                            [1])))
    seen = []

    def staged(request):
        if request.kind != "scan":
            return None
        seen.append(request)
        return knobs

    with tune.choosing(staged):
        compiled = kernelwright.compile(fn, [x, y, m])
    assert seen and all("tile[pad(c)]" in k.source
                        for k in compiled.plan.kernels if k.knobs.get("STAGE"))
    assert sum(k.knobs.get("STAGE") == 1 for k in compiled.plan.kernels) == len(seen)
    got = compiled(x, y, m, poison=True)
    for g, e in zip(got, fn(x, y, m)):
        torch.testing.assert_close(g, e, atol=2e-4, rtol=1e-4, equal_nan=True)


def test_staged_scan_refuses_more_workgroup_memory_than_portable():
    """A setting past 16 KiB of workgroup memory is refused (the arg scans' accumulator
    is 8 bytes); a compile given it keeps the defaults."""
    from kernelwright import templates, tune
    from kernelwright.ir import CompileError

    x = torch.randn(2, 4096)
    requests = []
    with tune.choosing(lambda r: requests.append(r)):
        kernelwright.compile(Fn(lambda x: torch.cummax(x, 1)[1]), [x])
    (request,) = [r for r in requests if r.kind == "scan"]
    with pytest.raises(CompileError, match="workgroup memory"):
        request.generate({"STAGE": 1, "WG": 256, "ITEMS": 8})
    assert request.generate({"STAGE": 1, "WG": 256, "ITEMS": 4}).workgroup_bytes == \
        templates.scan_workgroup_bytes({"WG": 256, "ITEMS": 4, "STAGE": 1}, 8)


def test_default_scan_settings_follow_the_row_length():
    """Rows of 4 or more items per invocation are staged (STAGE 1, up to 8 items); the
    arg scans' 8-byte accumulators take half as many items, to stay within 16 KiB of
    workgroup memory; shorter rows are scanned in registers (STAGE 0). All match
    PyTorch with the defaults."""
    x, short = torch.rand(2, 5000) - 0.25, torch.rand(2, 600) - 0.25
    compiled = check(Fn(lambda x, s: (torch.cumsum(x, 1), torch.cummax(x, 1)[1],
                                      torch.cumsum(s, 1))), x, short, atol=2e-4)
    knobs = [k.knobs for k in compiled.plan.kernels if k.key.startswith("scan")]
    assert {(k["STAGE"], k["ITEMS"]) for k in knobs} == {(1, 8), (1, 4), (0, 3)}, knobs
