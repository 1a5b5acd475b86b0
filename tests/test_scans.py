"""Scans (cumsum, cumprod, cummax/cummin, logcumsumexp) and the patterns built from them
(reversed, exclusive, masked) against PyTorch eager."""

import json

import pytest
import torch
from conftest import Fn, check

import kernelwright


@pytest.mark.slow
@pytest.mark.parametrize("shape,dim", [((5, 7), 1), ((5, 7), 0), ((2, 3, 4), 1), ((2, 3, 4), -1),
                                       ((2, 3, 4), 0), ((33,), 0), ((1, 1), 1)])
def test_cumsum_cumprod(shape, dim):
    x = torch.randn(*shape)
    check(Fn(lambda x: (torch.cumsum(x, dim), torch.cumprod(1 + 0.1 * x, dim))), x)


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("knobs", STAGED)
def test_staged_scans(knobs):
    """The scan template's STAGE 1 setting (the chunk staged in workgroup memory) on
    every scan op, rows of one and of several chunks, along the last dim and others."""

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

    compiled = kernelwright.compile(fn, [x, y, m], choose=staged)
    assert seen and all("tile[pad(c)]" in k.source
                        for k in compiled.plan.kernels if k.knobs.get("STAGE"))
    assert sum(k.knobs.get("STAGE") == 1 for k in compiled.plan.kernels) == len(seen)
    got = compiled(x, y, m, poison=True)
    for g, e in zip(got, fn(x, y, m)):
        torch.testing.assert_close(g, e, atol=2e-4, rtol=1e-4, equal_nan=True)


def test_staged_scan_refuses_more_workgroup_memory_than_portable():
    """A setting past 16 KiB of workgroup memory is refused (the arg scans' accumulator
    is 8 bytes); a compile given it keeps the defaults."""
    from kernelwright import kernels
    from kernelwright.ir.ir import CompileError

    x = torch.randn(2, 4096)
    requests = []
    kernelwright.compile(Fn(lambda x: torch.cummax(x, 1)[1]), [x],
                         choose=lambda r: requests.append(r))
    (request,) = [r for r in requests if r.kind == "scan"]
    with pytest.raises(CompileError, match="workgroup memory"):
        request.generate({"STAGE": 1, "WG": 256, "ITEMS": 8})
    assert request.generate({"STAGE": 1, "WG": 256, "ITEMS": 4}).workgroup_bytes == \
        kernels.scan.scan_workgroup_bytes({"WG": 256, "ITEMS": 4, "STAGE": 1}, 8)


def test_default_scan_settings_follow_the_row_length():
    """Rows of 4 or more items per invocation of 256 are held in registers in vec4
    groups with raked totals (STAGE 2, VEC 4, SUMS 1), up to 32 items and a chunk of
    at most the row; the arg scans' 8-byte totals take half as many items where the
    workgroup memory would not hold them; shorter rows are scanned by each invocation
    alone (STAGE 0). All match PyTorch with the defaults."""
    x, short = torch.rand(2, 9000) - 0.25, torch.rand(2, 600) - 0.25
    compiled = check(Fn(lambda x, s: (torch.cumsum(x, 1), torch.cummax(x, 1)[1],
                                      torch.cumsum(s, 1))), x, short, atol=2e-4)
    knobs = [k.knobs for k in compiled.plan.kernels if k.key.startswith("scan")]
    assert {(k["STAGE"], k["ITEMS"], k.get("VEC", 1), k.get("SUMS", 0)) for k in knobs} == {
        (2, 32, 4, 1), (2, 16, 4, 1), (0, 3, 1, 0)}, knobs


# The scan template's settings past STAGE 0 and 1's tree: the raked scan of the totals
# (SUMS 1) and the register-held rows of STAGE 2, in scalars and in VEC 4 groups; at WG
# 32 and 64 so that small rows take several chunks and a partial last one.
FEWER_BARRIERS = [{"STAGE": 1, "WG": 64, "ITEMS": 8, "SUMS": 1},
                  {"STAGE": 0, "WG": 32, "ITEMS": 4, "SUMS": 1},
                  {"STAGE": 2, "WG": 64, "ITEMS": 8},
                  {"STAGE": 2, "WG": 32, "ITEMS": 8, "SUMS": 1},
                  {"STAGE": 2, "WG": 32, "ITEMS": 8, "VEC": 4, "SUMS": 1},
                  {"STAGE": 2, "WG": 64, "ITEMS": 16, "VEC": 4},
                  {"STAGE": 2, "WG": 32, "ITEMS": 32, "VEC": 4, "SUMS": 1},
                  {"STAGE": 3, "WG": 64, "ITEMS": 8}, {"STAGE": 3, "WG": 32, "ITEMS": 3}]


def forced_scans(fn, inputs, knobs):
    """Compile fn with every scan kernel given `knobs`; returns it and the kernels."""

    seen = []

    def force(request):
        if request.kind != "scan":
            return None
        seen.append(request)
        return knobs

    compiled = kernelwright.compile(fn, inputs, choose=force)
    scans = [k for k in compiled.plan.kernels if k.key.startswith("scan")]
    assert seen and len(scans) == len(seen) and all(k.knobs == knobs for k in scans), \
        [k.knobs for k in scans]
    return compiled, scans


@pytest.mark.slow
@pytest.mark.parametrize("knobs", FEWER_BARRIERS, ids=lambda k: json.dumps(k, sort_keys=True))
def test_fewer_barrier_scans(knobs):
    """Every scan op under each setting, against PyTorch: rows of a multiple of the
    chunk (no bounds tests), of 4 with a partial last chunk (vec4 loads and stores),
    odd ones (scalar loads), a row sliced at an odd offset (scalar loads, vec4 stores),
    columns (B > 1), a NaN in a running max and min, ties, and a bool epilogue."""
    x = torch.rand(3, 1100) - 0.25
    odd = torch.randn(2, 1001) * 3
    odd[0, 17] = odd[1, 600] = float("nan")
    ties = torch.randint(-3, 4, (2, 515)).float()
    col = torch.randn(301, 5)
    full = torch.rand(2, 1024)
    fn = Fn(lambda x, odd, ties, col, full: (
        torch.cumsum(x, 1), torch.cumprod(1 + x / 1100, 1), torch.logcumsumexp(x * 5, 1),
        *torch.cummax(odd, 1), *torch.cummin(odd, 1), *torch.cummax(ties, 1),
        *torch.cummin(ties, 1), torch.logcumsumexp(ties, 1), torch.cumsum(x[:, 1:1001], 1),
        torch.cumsum(col, 0), *torch.cummax(col, 0), torch.logcumsumexp(col, 0),
        torch.cumsum(full, 1), torch.cumsum(x, 1) > 0.5, torch.cumsum(x > 0, 1)))
    inputs = [x, odd, ties, col, full]
    compiled, scans = forced_scans(fn, inputs, knobs)
    if knobs.get("SUMS"):
        assert all("groups[" in k.source for k in scans)
    if knobs.get("VEC") == 4:  # the contiguous f32 rows of a multiple of 4 read 16 bytes
        assert any("in0v4[o4 +" in k.source for k in scans)
        assert any("array<vec4<u32>>" in k.source for k in scans)  # the bool epilogue
    got = compiled(*inputs, poison=True)
    for i, (g, e) in enumerate(zip(got, fn(*inputs))):
        torch.testing.assert_close(g, e, atol=3e-4, rtol=1e-4, equal_nan=True,
                                   msg=lambda m, i=i: f"output {i}: {m}")


def test_register_scan_of_long_rows_in_one_pass():
    """STAGE 2 with VEC 4 and ITEMS 32 at WG 256 scans a row of 8192 in one chunk (that
    of the 16384 x 8192 benchmark); the arg scans' 8-byte totals do not fit it, and are
    refused; at ITEMS 16 they take two chunks."""
    from kernelwright.ir.ir import CompileError

    knobs = {"STAGE": 2, "WG": 256, "ITEMS": 32, "VEC": 4, "SUMS": 1}
    x = torch.randn(2, 8192)
    compiled, (scan,) = forced_scans(Fn(lambda x: torch.cumsum(x, -1)), [x], knobs)
    assert "base += 8192" in scan.source and "min(r0" not in scan.source  # no clamping
    torch.testing.assert_close(compiled(x, poison=True), torch.cumsum(x, -1),
                               atol=2e-3, rtol=1e-4)
    compiled, (scan,) = forced_scans(Fn(lambda x: torch.cummax(x, 1)[1]), [x],
                                     {**knobs, "ITEMS": 16})
    assert torch.equal(compiled(x, poison=True), torch.cummax(x, 1)[1])
    requests = []
    kernelwright.compile(Fn(lambda x: torch.cummax(x, 1)[1]), [x],
                         choose=lambda r: requests.append(r))
    (request,) = [r for r in requests if r.kind == "scan"]
    with pytest.raises(CompileError, match="workgroup memory"):
        request.generate(knobs)
    with pytest.raises(CompileError, match="VEC"):
        request.generate({"STAGE": 1, "VEC": 4})


def test_scan_space_of_long_rows():
    """The settings measured on rows of 8192 (tools/kernels.py --variants takes those of
    WG 256): each fits 16 KiB of f32 totals, and the default stays first."""
    from kernelwright import kernels

    space = kernels.scan_space(8192)
    assert len(space) <= 16 and len({json.dumps(k, sort_keys=True) for k in space}) == len(space)
    assert kernels.scan.scan_knobs(8192) in space
    assert {"WG": 256, "ITEMS": 32, "STAGE": 2, "VEC": 4, "SUMS": 1} in space
    assert all(kernels.scan.scan_workgroup_bytes(k) <= kernels.WORKGROUP_BYTES for k in space)


def test_column_scans_take_an_invocation_per_column():
    """A scan along a dim that is not the last, with columns of 16 or more consecutive
    elements and enough of them, takes one invocation per column (STAGE 3) by default,
    per 4 adjacent columns (VEC 4) where they are loaded 16 bytes at a time, and matches
    PyTorch on every op; a scan with fewer columns keeps the row kernels."""
    from kernelwright import kernels

    x = torch.rand(2, 9, 16384) - 0.25
    few = torch.rand(3, 40, 24) - 0.25
    compiled = check(Fn(lambda x, few: (torch.cumsum(x, 1), *torch.cummax(x, 1),
                                        torch.cumprod(1 + x / 9, 1),
                                        torch.cumsum(few, 1))), x, few, atol=2e-4)
    stages = sorted(k.knobs["STAGE"] for k in compiled.plan.kernels if k.key.startswith("scan"))
    assert stages == [0, 3, 3, 3, 3], stages
    assert kernels.scan.scan_knobs(9, 4, 16384, 2 * 16384, True) == {"WG": 256, "ITEMS": 8,
                                                                  "STAGE": 3, "VEC": 4}
    assert kernels.scan.scan_knobs(9, 4, 16384, 2 * 16384) == {"WG": 256, "ITEMS": 4, "STAGE": 3}
    assert kernels.scan.scan_knobs(3, 4, 16386, 2 * 16386, True) == {"WG": 256, "ITEMS": 3,
                                                                  "STAGE": 3}
    # 16-byte loads of x: four columns an invocation; cumprod's loader computes: one
    vec = sorted((k.knobs.get("VEC", 1), k.name) for k in compiled.plan.kernels
                 if k.key.startswith("scan") and k.knobs["STAGE"] == 3)
    assert [v for v, _ in vec] == [1, 4, 4, 4] and vec[0][1] != "scan", vec
    assert kernels.scan_space(9, 16384, 2 * 16384)[0]["STAGE"] == 3
    assert all(k["STAGE"] != 3 for k in kernels.scan_space(9, 8, 1 << 20))


@pytest.mark.slow
@pytest.mark.parametrize("knobs", [{"STAGE": 3, "WG": 64, "ITEMS": 4, "VEC": 4},
                                   {"STAGE": 3, "WG": 32, "ITEMS": 3, "VEC": 4}],
                         ids=lambda k: json.dumps(k, sort_keys=True))
def test_column_scans_of_four_columns_per_invocation(knobs):
    """STAGE 3 with VEC 4: 4 adjacent columns per invocation, every scan op; 16-byte
    loads from a plain buffer, scalar loads from a computed one and from a view at an
    offset no multiple of 4, 16-byte stores (a bool epilogue too)."""
    col = torch.randn(301, 8)
    col[17, 5] = float("nan")
    wide = torch.rand(3, 50, 12) - 0.25
    fn = Fn(lambda col, wide: (
        torch.cumsum(col, 0), *torch.cummax(col, 0), *torch.cummin(col, 0),
        torch.logcumsumexp(col, 0), torch.cumprod(1 + wide / 50, 1), torch.cumsum(wide * 2, 1),
        torch.cumsum(wide[:, :, 1:9], 1), torch.cumsum(wide, 1) > 0.5))
    compiled, scans = forced_scans(fn, [col, wide], knobs)
    assert any("in0v4[" in k.source or "in1v4[" in k.source for k in scans)
    assert any("array<vec4<u32>>" in k.source for k in scans)
    got = compiled(col, wide, poison=True)
    for i, (g, e) in enumerate(zip(got, fn(col, wide))):
        torch.testing.assert_close(g, e, atol=3e-4, rtol=1e-4, equal_nan=True,
                                   msg=lambda m, i=i: f"output {i}: {m}")
