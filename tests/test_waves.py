"""Waves: the device's slots (tune/waves.py) and the large products' plans by them: tiles,
K chunks, a tail of rows, aligned copies (lower/linalg.product_plan, kernels.matmul_tiles)."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import Fn, check

import kernelwright
from kernelwright import kernels
from kernelwright.kernels import MATMUL_LARGE_TILES, MATMUL_PLAIN_TILES, cuts
from kernelwright.kernels import matmul as matmul_kernels
from kernelwright.lower.linalg import WavePlan, product_plan
from kernelwright.options import Waves
from kernelwright.runtime import runtime
from kernelwright.tune import cache as cache_module
from kernelwright.tune import waves as waves_module

H200 = Waves(264, 132)  # as measured there (2026-12-02e)


def staircase(slots: int, counts, small: int | None = None, seed: int = 0):
    """Times of a grid of `slots` slots: a wave 1.0 ms, +0.3 ms where each SM starts its
    second workgroup (`small`), a little noise."""
    rng = random.Random(seed)
    return [0.4 + 1.0 * ((c - 1) // slots) + (0.3 if small and (c - 1) % slots >= small else 0)
            + rng.uniform(-0.01, 0.01) for c in counts]


def test_a_clean_staircase_gives_its_step_and_an_unclear_one_nothing():
    counts = list(range(4, 641, 4))
    find = waves_module.staircase_first_step
    assert find(counts, staircase(264, counts, small=132)) == 264
    assert find(counts, staircase(132, counts)) == 132
    # a step between two counts is found at the coarse count, then exactly
    assert find(counts, staircase(130, counts)) == 128
    fine = list(range(128, 133))
    assert find(fine, staircase(130, fine), rise=None) == 130
    assert find(counts, [0.4 + 0.001 * c for c in counts]) is None  # no steps
    assert find(counts, staircase(400, counts)) is None  # one step only
    irregular = staircase(132, counts)
    irregular[counts.index(200)] += 2.0  # a rise at 196 and a fall after it
    assert find(counts, irregular) is None


def test_waves_choose_tiles_and_chunks_by_the_modelled_time():
    # 4096 x 4096 by 2560 (level1/011): 640 wide tiles are 2.42 waves; in two
    # chunks 1280 fill 4.85; the plain tiles 1280 in 9.7 waves of 132
    assert product_plan((4096, 4096), (4096, 2560), waves=H200) == WavePlan(chunks=2)
    # convolutions' windows keep split-K's rules, and so do products under 512 a
    # side on other tiles than the plain ones (64 x 64: slots unknown)
    assert product_plan((4096, 4096), (4096, 2560), window=True, waves=H200) == WavePlan()
    assert kernels.matmul_tiles(200, 2560, 8, waves=H200)[:2] == (64, 64)
    assert product_plan((8, 200, 4096), (8, 4096, 2560), waves=H200) == WavePlan()
    # narrow products on the plain tiles: 384 tiles are 2.9 rounds of 132, the last
    # one alone on its SMs (MATMUL_PLAIN_LONE); in 2 K chunks 768 fill 5.8 rounds
    # (B copied 52 wide, so that it loads 16 bytes at a time); 512 tiles fill 3.9
    assert product_plan((49152, 8192), (8192, 50), waves=H200) == WavePlan(2, align=True)
    assert product_plan((24576, 8192), (8192, 100), waves=H200) == WavePlan(chunks=2)
    assert product_plan((65536, 4096), (4096, 64), waves=H200) == WavePlan()
    # in one piece, B loaded by scalars costs nothing (N = 50, K a multiple of 4)
    assert product_plan((65536, 4096), (4096, 50), waves=H200) == WavePlan()
    assert kernels.matmul_tiles(4096, 2560, 2, waves=H200) == MATMUL_LARGE_TILES
    assert product_plan((4096, 4096), (4096, 4096), waves=H200) == WavePlan()  # 3.88 waves
    assert kernels.matmul_tiles(4096, 4096, 1, waves=H200) == MATMUL_LARGE_TILES
    # K = 768 cannot be split into chunks of 512: 384 wide tiles (1.45 waves) lose
    assert product_plan((8192, 768), (768, 768), waves=H200) == WavePlan()
    assert kernels.matmul_tiles(8192, 768, 1, waves=H200) == MATMUL_PLAIN_TILES
    # under a wave of wide tiles the fixed rules hold (split-K's small grids)
    assert kernels.matmul_tiles(512, 512, 16, waves=H200) == MATMUL_LARGE_TILES
    # unaligned operands never get the wide tiles
    assert kernels.matmul_tiles(3001, 2999, 1, False, False, False, H200) == MATMUL_PLAIN_TILES
    # 576 wide tiles are 2.2 waves: the top 2748 rows fill two, the last 256 rows
    # (2 x 47 plain tiles in 4 K chunks) most of one plain wave
    assert product_plan((3004, 4096), (4096, 3000), waves=H200) == WavePlan(tail=256)
    # the irregular shape: copied into the aligned one first
    assert product_plan((3001, 4093), (4093, 2999), waves=H200) == WavePlan(1, 256, True)
    # unknown waves: the fixed rules
    assert product_plan((4096, 4096), (4096, 2560), waves=None) == WavePlan()
    assert product_plan((3001, 4093), (4093, 2999), waves=None) == WavePlan()
    assert kernels.matmul_tiles(8192, 768, 1, waves=None) == MATMUL_LARGE_TILES


def test_every_chunk_count_keeps_its_modelled_tiles():
    """The chunks' product gets the tiles that wave_plan costed it with."""
    for facts in (H200, Waves(96, 48), Waves(160, 80)):
        for m, n, k in ((4096, 2560, 4096), (3004, 3000, 4096), (8192, 768, 3072),
                        (2048, 1024, 8192)):
            c = product_plan((m, k), (k, n), waves=facts).chunks
            wide = kernels.matmul_wide(m, n, k // c)
            tiles = kernels.matmul_tiles(m, n, c, wide=wide, waves=facts)
            costs = {t: kernels.matmul_wave_cost(t, m, n, 1, k, c, facts)
                     for t in (MATMUL_LARGE_TILES, MATMUL_PLAIN_TILES)}
            wide_tiles = c * (-(-m // 128)) * (-(-n // 128))
            if wide_tiles >= facts.wide:
                assert costs[tiles] == min(costs.values()), (facts, m, n, k, c)


def test_a_product_split_by_waves_matches_pytorch(monkeypatch):
    """Small slots make a 512 x 1024 x 512 product split by waves (split-K's small grids
    rule set aside), through the real kernels."""
    monkeypatch.setenv("KERNELWRIGHT_WAVES", "12,24")
    monkeypatch.setattr(cuts, "SPLIT_K_MAX_TILES", 0)
    a, b = torch.randn(512, 1024), torch.randn(1024, 512)
    compiled = check(Fn(torch.matmul), a, b, atol=1e-3)
    names = [k.name for k in compiled.plan.kernels]
    assert any("reduce" in n for n in names), names
    chunks = product_plan((512, 1024), (1024, 512), waves=Waves(12, 24)).chunks
    assert chunks == 2
    (matmul,) = [k for k in compiled.plan.kernels if "matmul" in k.name]
    assert matmul.grid[2] == chunks and matmul.knobs["BN"] == MATMUL_LARGE_TILES[1]


def test_a_narrow_product_in_chunks_over_an_aligned_copy_matches_pytorch(monkeypatch):
    """Slots of 10 and 5 make a 640 x 2048 x 50 product (level1/005's shape, small) take
    2 K chunks on the plain tiles (5 tiles: one round alone on its SMs; 10 tiles: two
    rounds of half the depth), over B copied 52 wide, the chunks summed by the slice
    back to 50 columns; through the real kernels."""
    monkeypatch.setenv("KERNELWRIGHT_WAVES", "10,5")
    monkeypatch.setattr(cuts, "SPLIT_K_MAX_TILES", 0)
    monkeypatch.setattr(matmul_kernels, "MATMUL_TALL_MIN_WORKGROUPS_PLAIN", 1)
    assert product_plan((640, 2048), (2048, 50), waves=Waves(10, 5)) == WavePlan(2, align=True)
    a, b = torch.randn(640, 2048), torch.randn(2048, 50)
    compiled = check(Fn(torch.matmul), a, b, atol=1e-3)
    launched = [(k.name, k.grid, k.knobs.get("BM"), k.knobs.get("BN"))
               for k in compiled.plan.kernels]
    assert [k[1:] for k in launched if "matmul" in k[0]] == [((1, 5, 2), 128, 64)], launched
    assert [k[0] for k in launched if "pad" in k[0]] == ["pad+materialize"], launched  # B's
    # the two chunks' sum is added by the kernel that slices the 52 columns back to 50
    # (ir.inline_sum): no reduce kernel
    assert [k[0] for k in launched] == ["pad+materialize", "matmul", "slice"], launched


def test_a_tail_of_rows_over_aligned_copies_matches_pytorch(monkeypatch):
    """Slots of 26 and 13 make a 644 x 2051 x 515 product (plus a bias and a ReLU) take
    both: A and B copied into 644 x 2052 and 2052 x 516 buffers (K not a multiple of 4:
    both operands would load scalars), the last 128 rows a product of their own on
    the plain tiles, each storing its rows of the result (with the epilogue) in place of
    their cat, sliced back; through the real kernels. (Split-K's small grids rule and the plain tiles' least grid set aside, as
    for the H200's 3001 x 4093 x 2999.)"""
    monkeypatch.setenv("KERNELWRIGHT_WAVES", "26,13")
    monkeypatch.setattr(cuts, "SPLIT_K_MAX_TILES", 0)
    monkeypatch.setattr(matmul_kernels, "MATMUL_TALL_MIN_WORKGROUPS_PLAIN", 1)
    assert product_plan((644, 2051), (2051, 515), waves=Waves(26, 13)) == WavePlan(1, 128, True)
    a, b, c = torch.randn(644, 2051), torch.randn(2051, 515), torch.randn(515)
    compiled = check(Fn(lambda a, b, c: torch.relu(a @ b + c)), a, b, c, atol=1e-3)
    launched = [(k.name, k.grid, k.knobs.get("BM"), k.knobs.get("BN"))
               for k in compiled.plan.kernels]
    # the top 516 rows on 5 x 5 wide tiles, the last 128 on 9 plain ones
    assert [k[1:] for k in launched if "matmul" in k[0]] == [
        ((5, 5, 1), 128, 128), ((9, 1, 1), 128, 64)], launched
    assert [k[0] for k in launched if "pad" in k[0]] == ["pad+materialize"] * 2, launched
    # the cat of both is stored in place by the two products, each with the epilogue
    # (schedule.placements): no kernel of its own
    assert not any("cat" in k[0] for k in launched), launched
    assert all(k[0].endswith("matmul+add+relu") for k in launched if "matmul" in k[0]), launched


def test_device_waves_reads_the_environment_the_cache_and_measures_once(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_WAVES", "off")
    assert waves_module.device_waves() is None
    monkeypatch.setenv("KERNELWRIGHT_WAVES", "264,132")
    assert waves_module.device_waves() == H200
    monkeypatch.setenv("KERNELWRIGHT_WAVES", "many")
    with pytest.raises(ValueError, match="KERNELWRIGHT_WAVES"):
        waves_module.device_waves()
    monkeypatch.delenv("KERNELWRIGHT_WAVES")
    assert waves_module.device_waves() is None  # the software driver: never measured

    # a (pretend) hardware device: measured once, stored, then read from the cache
    dev = runtime.default_device()
    fake = type("FakeDevice", (), {"description": "Fake GPU (Vulkan, DiscreteGPU)",
                                   "is_software": False, "has_timestamps": True,
                                   "device": dev.device})()
    monkeypatch.setenv("KERNELWRIGHT_TUNE_DB", str(tmp_path / "tune.sqlite"))
    monkeypatch.delenv("KERNELWRIGHT_TUNE", raising=False)
    monkeypatch.setattr(waves_module, "_MEMO", {})
    calls = []
    monkeypatch.setattr(waves_module, "measure_waves",
                        lambda d: calls.append(d) or Waves(10, 5))
    assert waves_module.device_waves(fake) == Waves(10, 5)
    assert waves_module.device_waves(fake) == Waves(10, 5)
    assert len(calls) == 1
    stored = cache_module.TuneCache(tmp_path / "tune.sqlite")
    assert stored.lookup_fact(fake.description, "waves") == {"wide": 10, "plain": 5}
    monkeypatch.setattr(waves_module, "_MEMO", {})  # a new process reads the cache
    assert waves_module.device_waves(fake) == Waves(10, 5)
    assert len(calls) == 1
    with pytest.raises(ValueError):
        Waves(0, 5)

    # a record that cannot be read is ignored
    stored.store_fact("Odd GPU (Vulkan, DiscreteGPU)", "waves", {"wide": "many"})
    odd = type(fake)()
    odd.description = "Odd GPU (Vulkan, DiscreteGPU)"
    assert waves_module.device_waves(odd) is None

    # a probe that fails leaves the fixed rules, and is not repeated
    other = type(fake)()
    other.description = "Other GPU (Vulkan, DiscreteGPU)"

    def broken(d):
        calls.append(d)
        raise RuntimeError("buffer too large")

    monkeypatch.setattr(waves_module, "measure_waves", broken)
    assert waves_module.device_waves(other) is None
    assert stored.lookup_fact(other.description, "waves") == {}
    monkeypatch.setattr(waves_module, "_MEMO", {})
    assert waves_module.device_waves(other) is None
    assert len(calls) == 2  # the measure above and this failed probe, not a third


def test_the_probe_times_fewer_workgroups_of_one_kernel(monkeypatch):
    """On the software driver the probe only has to run: the same pipeline dispatched
    over 4, 8 and 12 of its 12 tiles (each tile's K loop whole)."""
    monkeypatch.setattr(waves_module, "PROBE_K", 32)
    monkeypatch.setattr(waves_module, "PROBE_MAX_TILES", 12)
    dev = runtime.default_device()
    if not dev.has_timestamps:
        pytest.skip(f"{dev.description} has no timestamp queries")
    for tiles in (MATMUL_LARGE_TILES, MATMUL_PLAIN_TILES):
        time_tiles, most = waves_module.probe(dev, tiles)
        assert most == 12
        assert all(time_tiles(t) > 0 for t in (4, 8, 12))


def test_compile_plans_with_the_waves_of_its_device(monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_WAVES", "264,132")
    seen = []
    real = cuts.wave_plan
    monkeypatch.setattr(cuts, "wave_plan",
                        lambda *a: seen.append(a[-1]) or real(*a))
    monkeypatch.setattr(cuts, "SPLIT_K_MAX_TILES", 0)
    kernelwright.plan_module(Fn(torch.matmul), [torch.empty(512, 512), torch.empty(512, 512)])
    assert seen == [H200]


def test_deep_products_split_k_by_the_waves():
    """A weight gradient's product (K, the batch's positions, long against M and N) is
    cut into chunks by the waves' model (cuts.deep_plan): U-Net's 128 x 1152 outputs over
    K = 131072 took 8 chunks (144 workgroups of 128 x 64 on 264 slots) by the small
    grids' rule; by the waves, enough chunks to fill several waves, their partial sums
    within SPLIT_K_MAX_PARTIAL_BYTES. Without waves the small grids' rule stays."""
    waves = H200
    assert product_plan((1, 128, 131072), (1, 131072, 1152)).chunks == 8
    plan = product_plan((1, 128, 131072), (1, 131072, 1152), waves=waves)
    assert plan.chunks > 8 and not plan.tail and not plan.align
    assert 4 * plan.chunks * 128 * 1152 <= cuts.SPLIT_K_MAX_PARTIAL_BYTES
    assert 131072 % (plan.chunks * 16) == 0
    # not deep (K under 8 x N): the small grids' rule, as without waves
    assert product_plan((1, 256, 6272), (1, 6272, 2304), waves=waves) == \
        product_plan((1, 256, 6272), (1, 6272, 2304))
