"""The fp32 matmul: the tile and wave cost model, knobs, space and generator
(kernels/matmul.wgsl)."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from functools import lru_cache

from ..ir.ir import MOVEMENT_OPS, CompileError, Value, where_band
from ..options import CompileOptions, Waves
from .common import (
    MAX_GRID,
    MAX_WG,
    contiguous_dim,
    loader,
    merge_knobs,
    plain_strides,
    pow2_ceil,
    require,
    snippet,
)

MATMUL_BK = 16  # the K depth of one staged tile in the default knobs
# The most workgroup memory a matmul setting may declare: twice WebGPU's default. The
# runtime asks the adapter for its limit (32 KiB and more on desktop Vulkan drivers,
# 48 KiB on NVIDIA's) and refuses a kernel that needs more than the device has, so
# such settings fall back to the defaults there (the tuner discards them).
MATMUL_WORKGROUP_BYTES = 32768
# vec4s of padding per k in the staged tile of an operand read along K and staged along
# its rows (ROWS), with one staged buffer (DB 1: its stores are not overlapped with any
# multiply): its invocations store the 4 k values of a row at once, and without padding
# the rows a warp stores at k offsets 0, 4, 8, 12 share banks (4-way conflicts on 64 x
# 64 tiles of BK 16, 2-way with padding; none on BK 8). See _Operand.kstride. Measured on
# the H200 (2026-12-05, profile_pad_db1_h200_2026-12-05.json, whole problems, 0 against
# 1): Swin's LayerNorm-in-the-loader product 0.495 -> 0.460 ms (4.296 -> 4.259 ms in all),
# EfficientNet's 16 such products 1.634 -> 1.588 (5.629 -> 5.587), ViT unchanged. With
# two staged buffers it lost (profile_pad_h200_2026-12-05.json, ab_pad_kernels_*): GEMM
# 4096^3 3.045 -> 3.093 ms, the linear 1.599 -> 1.636, LayerNorm + linear 0.735 -> 0.750
MATMUL_PAD = 1
_LANES = "xyzw"


# workgroups that 128 x 64 tiles (under 512 rows) and 32 x 128 tiles must still make: a
# convolution's implicit GEMM (an operand reads windows, `reads_window`), other products
MATMUL_TALL_MIN_WORKGROUPS = 256
MATMUL_TALL_MIN_WORKGROUPS_PLAIN = 64
# GROUP: the order in which the workgroups take their tiles. 0: row by row (the grid's
# x over N fastest). G > 0: bands of G tile rows, each walked column by column, so that
# the workgroups running at once share more rows of A and columns of B in L2. Measured on
# the H200 (2026-12-02b, bench/results/profile_gemm_h200_2026-12-02b.json), whole
# problems, G 8 and 16 against 0: GEMM 4096^3 3.370 and 3.366 against 3.363 ms, the
# 4096^3 linear + GELU 3.488 against 3.508, 3001 x 4093 x 2999 2.048 against 2.076, the
# SwiGLU FFN 3.614 against 3.640 (0.6-1.4%): in the search space (G 8 on the default
# tiles of large products), not the default, which would change nearly every plan of
# the suite for about 1%
MATMUL_GROUP = 0
# Large products without a prologue (matmul_wide): 128 x 128 tiles of 8 x 16 blocks (128
# invocations holding 128 accumulators), staged 8 deep along the rows (ROWS 1), as
# cuBLAS's own fp32 kernels are (bench/reference_kernels.py: tiles of 256 x 128 x 8 and
# 128 x 128 x 8 whose invocations hold 128 accumulators, 254-255 registers). NVIDIA's
# driver compiles them to about 190 registers: two workgroups per SM. Measured on the
# H200 (2026-12-02d, bench/results/matmul_wide_h200_2026-12-02d.json) against the
# 128 x 64 tiles of 8 x 4 blocks staged 16 deep that they replace: GEMM 4096^3 3.364 ->
# 3.049 ms (0.84 -> 0.91 of cuBLAS), the 8192 x 1024 x 4096 linear 1.741 -> 1.600 (0.82
# -> 0.90); staged 16 deep 5.261 and 2.594 ms, 256 x 128 tiles 3.305 and 1.736 ms. Suite
# call 48 (51 plans): every level-2 linear 3-11% faster, level1/109 13.5%. They lose
# where the grid ends in a partial wave: a 128 x 128 tile is twice the work, so the
# last wave is coarser (0.92x on level1/011, 640 tiles; 0.89x on the 3004 x 4096 x
# 3000 GEMM, 576 tiles; the transformer blocks' 384-tile products; since 2026-12-02e
# the tiles and K chunks are chosen by the device's measured waves, below) -- and with
# K of 256 or less (a pointwise convolution's K = 256 over 6400 tiles 1.05x and 1.12x
# slower, attention's scores, K = 64, 1.03x), hence MATMUL_WIDE_MIN_K. The
# irregular 3001 x 4093 x 2999 (scalar loads) 2.076 -> 2.520 ms: they need M, N and K
# multiples of 4. Convolutions keep 128 x 64: the U-Net's split-K transposed
# convolution phases (window loaders) made it 9.248 -> 9.497 ms.
MATMUL_LARGE_TILES = (128, 128, 8, 16)
MATMUL_PLAIN_TILES = (128, 64, 8, 4)  # where the wide tiles are refused or lose by waves
MATMUL_WIDE_BLOCK = 128  # TM x TN from which a block takes BK 8 and ROWS 1
MATMUL_WIDE_MIN_K = 512
# 192 rows (a convolution's 192 output channels) without a prologue, K at least 512
# (matmul_wide): one tile row of 192 x 128, 12 x 8 blocks, staged 8 deep, where 128-row
# tiles would waste a quarter of their rows and 64-row ones (the rule before) hold 16
# accumulators an invocation. Measured on the H200 (2026-12-04,
# matmul_conv192_h200_2026-12-04.json), the 3 x 3 convolution 128 -> 192 channels at 64
# x 64, batch 32: 1.891 ms (64 x 64 tiles, 0.81 of cuDNN) -> 1.526 (1.01); 192 x 64 of
# 12 x 4 1.739 (BK 8) and 1.777 (BK 16), 128 x 64 2.112, ROWS 1 1.581; as a plain
# batched product (192 x 1152 x 4096, 32 entries) 1.782 -> 1.646 ms. With K = 32
# (MobileNetV2's 1 x 1 expansions, 784 columns) they lost: level3/018 3.826 -> 3.938 ms
# (suite, 2026-12-04), hence the least K. The same for 64, 128 and 256 rows lost
# (2026-12-04, matmul_conv_tiles_h200_2026-12-04.json): 3 x 3, 128 channels 1.651 ms on
# 128 x 64 against 2.163 on 128 x 128 (8 x 8, BK 8) and 2.343 on the wide tiles; 64
# channels 1.301 on 64 x 64 against 1.312-1.574 on 64 x 128 and 64 x 256; stride 2 to
# 256 channels 0.167 against 0.188 on 256 x 64.
MATMUL_ROWS192_TILES = (192, 128, 12, 8)
# 64 rows (a convolution's 64 output channels) without a prologue, K at least 512
# (matmul_wide): one tile row of 64 x 256, 8 x 16 blocks (128 invocations holding 128
# accumulators, as the wide tiles), staged 8 deep along the rows (matmul_knobs: ROWS 1),
# where the 64 x 64 tiles of 4 x 4 blocks read two 16-byte fragments from workgroup
# memory per 16 multiply-adds. Measured on an H100 (2026-12-06c, the H200 could not be
# had; m64_variants_h100_2026-12-06c.json, the default in the same calls): the 3 x 3
# convolution of 64 channels at 128 x 128, batch 32, 1.302 -> 1.236 ms (0.83 -> 0.87 of
# cuDNN), its product from stored operands (64 x 576 x 16384, 32 entries) 1.228 -> 0.984
# (0.72 -> 0.90 of cuBLAS), the 3-d 3 x 3 x 3 convolution 32 -> 64 channels (level1/072's
# shape) 3.906 -> 3.734 (0.77 -> 0.81); the same tiles staged along K (ROWS 0) 1.482,
# 1.204 and 4.481 ms, 64 x 128 of 8 x 16 1.488 and 1.168, 64 x 128 of 4 x 8 1.314 and
# 1.067 (and 1.362-1.574 for 64 x 128 of 4 x 8 BK 8, 64 x 256 of 4 x 16 and 8 x 8 on the
# H200, 2026-12-04: matmul_conv_tiles_h200_2026-12-04.json). Only on grids of at least
# MATMUL_ROWS64_MIN_WORKGROUPS tiles: in the suite (the same H100, base and head in one
# call, h100_2026-12-06c/README.md) level1/072 (4096 tiles) 3.900 -> 3.729 ms and
# level1/055 (3328) 2.892 -> 2.783 gained, but ResNet-18's and the ResNet-50 stack's
# 64-channel convolutions at 56 x 56, batch 32 (416 tiles: 1.6 waves of 264), lost
# 5.389 -> 6.169 and 3.375 -> 3.945 ms; at 784 tiles (level3/004) no change, at 1024
# three problems gained 0.7-3.8% (level1/074, 075, level3/022) and one lost 2.1%
# (level3/005, whose epilogue is a batch norm and a ReLU).
MATMUL_ROWS64_TILES = (64, 256, 8, 16)
MATMUL_ROWS64_MIN_WORKGROUPS = 2048


# Waves. A device runs a fixed number of workgroups of a setting at once (its slots, the
# SMs times the workgroups that fit in one); a grid of T tiles takes ceil(T / S) waves,
# the last one partly idle. WebGPU does not say how many SMs a device has, so the slots
# of both large-product tiles are measured once per device (tune/waves.py, stored in
# the tune cache); measured on the H200 (2026-12-02e, wave_probe_h200_2026-12-02e.json):
# the time of one tile row steps up after every 264 wide tiles (132 SMs x 2) and every
# 132 plain ones. Where they are known, a large product takes the tiles, the K chunks
# (split-K), a tail of rows and aligned copies of least modelled time (lower/linalg.
# wave_plan, through matmul_wave_cost):
#     waves(T) * S * (tile area / rate) * depth * (1 + MATMUL_SPLIT_COST * (c + 1) / K)
# with waves(T) = ceil(T / S) for the wide tiles. The plain tiles' steps of 132 are each
# SM's next workgroup, two of which share an SM (122 registers each): their rounds come
# in pairs, and an odd last round runs alone on its SMs, at MATMUL_PLAIN_LONE rounds'
# time (waves(T) = n + MATMUL_PLAIN_LONE - 1 for an odd n = ceil(T / S)). Measured on
# the H200: the K 4096 probe (wave_probe_k4096_h200_2026-12-02e.json) adds 0.169, 0.236,
# 0.187, 0.224, 0.194 ms per round of 132 (the odd rounds 1.12-1.2x the even ones); four
# narrow products whose 384 tiles are 2.9 rounds (split_narrow_shapes_h200_2026-12-04b.json,
# split_narrow_h200_2026-12-04b.json) ran their matmul 5.5-9% faster in 2 K chunks (6
# rounds of half the depth): 49152 x 4096 x 52 0.713 -> 0.652 ms, 24576 x 8192 x 100
# 1.369 -> 1.285, 49152 x 8192 x 50 (B aligned) 1.404 -> 1.281, while 512 tiles (4 rounds)
# did not (0.875 -> 0.876). With 1.2 every plain-tile matmul time measured in those files
# and split_waves_h200_2026-12-02e.json is within 4% of the model's (2.5-9% off with 1.0).
# for c chunks of depth K / c (whole staged tiles, at least MATMUL_WIDE_MIN_K deep), the
# wide tiles' rate MATMUL_WIDE_RATE times the plain ones' (GEMM 4096^3, full waves: 3.361
# against 3.039 ms) and the chunks' partial sums costing about MATMUL_SPLIT_COST / K per
# chunk (their reduce kernel: 2-4% at K = 4096). Fitted on the H200 (2026-12-02e,
# split_waves_h200_2026-12-02e.json): the modelled times are within 4% of the measured
# matmul times (1.58-1.69e-3 ms per unit) and rank every setting as measured --
# level1/011's 4096 x 4096 x 2560 (640 wide tiles: 2.42 waves) 2.358 ms wide, 2.170 plain,
# 1.979 + 0.051 wide in 2 chunks; 3004 x 4096 x 3000 (576 wide tiles) 2.133 wide, 1.919
# plain, 1.896 wide in 4 chunks; 4096^3 (1024 wide tiles: 3.88 waves) unsplit.
MATMUL_WIDE_RATE = 1.1
MATMUL_PLAIN_LONE = 1.2
MATMUL_SPLIT_COST = 32
MATMUL_WAVE_MAX_CHUNKS = 8
# The plain tiles loading both operands by scalars (K not a multiple of 4) run at this
# rate of the plain tiles' 16-byte loads: 3001 x 4093 x 2999 2.076-2.085 ms against
# 1.915-1.932 for 3004 x 4096 x 3000 (2026-12-02d/e, the same tiles and grid). B alone
# loaded by scalars (N not a multiple of 4) cost nothing measurable in one piece: 49152 x
# 8192 x 50 1.403 ms against 1.404 with B copied 52 wide (split_narrow_h200_2026-12-04b.json;
# in 2 K chunks it did, 1.332 against 1.281, which the aligned plan's chunks model).
MATMUL_SCALAR_RATE = 0.92


def matmul_wave_cost(tiles: tuple[int, int, int, int], m: int, n: int, nb: int, k: int,
                     chunks: int, facts: Waves) -> float:
    """The modelled time (arbitrary units) of nb products of M x N x K over `chunks` K
    chunks on `tiles` (the wide or the plain ones, module comment above; other tiles are
    not measured: they are modelled as the plain ones' rate and slots of the same area,
    a round holding as many tile elements, and no lone last round)."""
    bm, bn = tiles[:2]
    wide = tuple(tiles) == MATMUL_LARGE_TILES
    plain = tuple(tiles) == MATMUL_PLAIN_TILES
    area = MATMUL_PLAIN_TILES[0] * MATMUL_PLAIN_TILES[1]
    slots = facts.wide if wide else facts.plain if plain else max(1, facts.plain * area
                                                                  // (bm * bn))
    count = nb * chunks * math.ceil(m / bm) * math.ceil(n / bn)
    per_tile = bm * bn * (k / chunks) / (MATMUL_WIDE_RATE if wide else 1.0)
    split = 1.0 + MATMUL_SPLIT_COST * (chunks + 1) / k if chunks > 1 else 1.0
    rounds = math.ceil(count / slots)
    if plain and rounds % 2:
        rounds += MATMUL_PLAIN_LONE - 1
    return rounds * slots * per_tile * split


def large_tiles(m: int, n: int, nb: int, wide: bool,
                waves: Waves | None = None) -> tuple[int, int, int, int]:
    """A large product's tiles without a prologue or windows: the wide ones where `wide`
    allows them and, with known waves and at least one wave of them, they model faster
    than the plain ones (smaller grids keep the wide tiles, as split-K's rules expect)."""
    facts = waves
    if not wide:
        return MATMUL_PLAIN_TILES
    bm, bn = MATMUL_LARGE_TILES[:2]
    if facts is None or nb * math.ceil(m / bm) * math.ceil(n / bn) < facts.wide:
        return MATMUL_LARGE_TILES
    return min((MATMUL_LARGE_TILES, MATMUL_PLAIN_TILES),  # (any K: both scale with it)
               key=lambda t: matmul_wave_cost(t, m, n, nb, MATMUL_WIDE_MIN_K, 1, facts))


def reads_window(v: Value) -> bool:
    """Whether a matmul operand is a convolution's windows (through reshapes and expands)."""
    while v.node is not None and v.node.op in ("reshape", "expand"):
        v = v.node.inputs[0]
    return v.node is not None and v.node.op == "window"


def product_reads_window(tnode) -> bool:
    """Whether matmul node `tnode` is a convolution's implicit GEMM: an operand reads
    windows (reads_window), or its batch is folded into its columns (the `fold` of
    GraphBuilder.folded_matmul, whose B reads the windows through a permute)."""
    a, b = tnode.inputs
    return bool(tnode.attrs.get("fold")) or reads_window(a) or reads_window(b)


def matmul_tiles(m: int, n: int, nb: int = 1, prologue: bool = False,
                 window: bool = False, wide: bool = True,
                 waves: Waves | None = None) -> tuple[int, int, int, int]:
    """The matmul template's (BM, BN, TM, TN) for `nb` products of M x N (lower/linalg.py
    reads the tile count to decide on split-K). Large products (both sides at least 512)
    get the wide tiles MATMUL_LARGE_TILES where `wide` (matmul_wide: M, N and K multiples
    of 4, K long enough), no operand reads a convolution's `window` and, where the
    device's waves are known, they model faster (large_tiles), else 128 x 64 tiles
    with an 8 x 4 block per invocation (256 invocations, 122 registers in NVIDIA's code:
    two workgroups per SM), or with a `prologue` (see matmul_knobs: one staged buffer)
    128 x 128 tiles with 8 x 8 blocks (187 registers, one workgroup per SM). Measured on
    the H200 (2026-12-01k,
    matmul_tiles_h200_2026-12-01k.json), 128 x 64 (8 x 4) against 128 x 128 (8 x 8), both
    with two staged buffers:
    GEMM 4096^3 3.366 against 3.362 ms, 3001 x 4093 x 2999 2.080 against 2.355 (576
    workgroups of 128 x 128 fill 4.4 waves of 132 SMs), the 8192 x 1024 x 4096 linear
    1.741 against 1.759; with a LayerNorm in the A loader 128 x 64 lost (0.953 against
    0.898 ms with two buffers, 1.014 against 0.851 with one). 192 rows without a
    prologue get MATMUL_ROWS192_TILES where `wide` (K at least 512) and they make
    MATMUL_TALL_MIN_WORKGROUPS(_PLAIN) workgroups, and 64 rows MATMUL_ROWS64_TILES
    where they make MATMUL_ROWS64_MIN_WORKGROUPS. Under 512 rows, a multiple of 128
    rows gets 128 x 64 tiles with 8 x 4 blocks when that still makes
    MATMUL_TALL_MIN_WORKGROUPS workgroups: each staged B tile then serves 128 rows, not
    64. Measured on the H200 (2026-12-01f,
    bench/results/matmul_variants_h200.json) on the implicit GEMMs of 3 x 3
    convolutions: 128 channels at 56 x 56, batch 64 (M = 128, 3136 workgroups), 2.57
    against 3.22 ms with 64 x 64 tiles (0.58 and 0.47 of cuDNN); 128 to 256 channels,
    stride 2 to 14 x 14, batch 32 (M = 256, 256 workgroups), 0.221 against 0.304 ms
    (0.74 and 0.50). With 64 output channels the 128-row tile wastes half its rows
    (3.15 against 1.94 ms). Smaller grids than 256 workgroups are not measured.
    17-32 rows (a convolution's 32 output channels) get 32 x 128 tiles with 4 x 4 blocks,
    staged 8 deep (matmul_knobs), not 64 x 64 tiles half of whose rows are padding, where
    that still makes MATMUL_TALL_MIN_WORKGROUPS workgroups (a small grid, as the 32-row
    steps of a recurrent network's batch, keeps twice the workgroups of 64 x 64 tiles):
    measured on the H200 (2026-12-01k, matmul_tiles32_h200_2026-12-01k.json) on a 3-d
    3 x 3 x 3 convolution of 32 channels (M = 32, K = 864, batch 8 of 65536 positions),
    1.272 ms against 1.939 (0.84 and 0.55 of cuDNN); 16 deep 1.411 ms, 32 x 256 tiles
    (4 x 8) 1.306. The same for 17-32 columns is not measured. Many rows and 17-511
    columns take the large products' 128 x 64 tiles too, without a prologue, where the
    grid keeps MATMUL_TALL_MIN_WORKGROUPS (2026-12-01l): 262144 x 384 x 384 2.415 ->
    1.945 ms in the suite (0.72x -> 0.91x eager); 49152 x 8192 x 50 (384 workgroups)
    1.398 against 1.663 ms with 64 x 64 tiles (0.83 and 0.70 of cuBLAS; BK 8 1.792).
    Products that read no convolution windows (`window` False) take these tiles down to
    MATMUL_TALL_MIN_WORKGROUPS_PLAIN workgroups, where fewer tiles also let split-K
    (lower/linalg.product_plan) cut the recurrent steps of an RNN: measured on the H200
    (2026-12-02b, bench/results/profile_tall_h200_2026-12-02b.json, one threshold of 64
    for all products) the GRU of level1/107 (256 x 1024 x 3072 steps) 7.768 -> 6.242
    ms, level1/108 8.042 -> 7.716, but ResNet-18's convolutions 5.358 -> 5.706 and the
    U-Net 9.807 -> 9.862, so convolutions keep 256."""
    tall_min = MATMUL_TALL_MIN_WORKGROUPS if window else MATMUL_TALL_MIN_WORKGROUPS_PLAIN
    if m <= 16:
        return 16, 64, 1, 4
    if n <= 16:
        return 64, 16, 4, 1
    if m <= 32 and nb * math.ceil(n / 128) >= tall_min:
        return 32, 128, 4, 4
    if m >= 512 and n >= 512:
        if prologue:
            return 128, 128, 8, 8
        return MATMUL_PLAIN_TILES if window else large_tiles(m, n, nb, wide, waves)
    if (m == MATMUL_ROWS192_TILES[0] and wide and not prologue
            and nb * math.ceil(n / 128) >= tall_min):
        return MATMUL_ROWS192_TILES
    if (m == MATMUL_ROWS64_TILES[0] and wide and not prologue
            and nb * math.ceil(n / MATMUL_ROWS64_TILES[1]) >= MATMUL_ROWS64_MIN_WORKGROUPS):
        return MATMUL_ROWS64_TILES
    # 128-row tiles: a multiple of 128 rows, or 512 and more (a fifth padding at most)
    tall = m % 128 == 0 if m < 512 else not prologue
    if tall and nb * math.ceil(m / 128) * math.ceil(n / 64) >= tall_min:
        return 128, 64, 8, 4
    return 64, 64, 4, 4


def matmul_knobs(m: int, n: int, nb: int = 1, prologue: bool = False,
                 window: bool = False, wide: bool = True, waves: Waves | None = None) -> dict:
    """The default knobs: the tiles above, BK = 16, and where the blocks allow it (TM and
    TN multiples of 4) vec4 staged fragments with 16-byte loads (VEC = 4) in two staged
    buffers (DB = 2; see _matmul). Measured on the H200 (bench/results/
    matmul_variants_h200.json): 128 x 128 tiles went from 0.41 / 0.38 / 0.40 of cuBLAS
    (VEC 1, DB 1) to 0.61 / 0.58 / 0.64 at 4096^3, 3001 x 4093 x 2999 and a
    8192 x 1024 x 4096 linear; 64 x 64 tiles with VEC 4, DB 2 reached 0.50-0.54 there.
    `prologue` (an operand's loader computes on the values it loads: `_computes_on_loads`)
    takes one staged buffer: DB 2 fetches the next tile into registers before the
    multiply, and a loader that computes on its loads waits for them right there, so the
    fetch hides nothing and only adds registers. Measured on the H200 (2026-12-01g,
    bench/results/matmul_variants_layernorm_h200.json): a LayerNorm computed in the A
    loader of a 12544 x 512 x 2048 linear, 1.029 ms with DB 1 against 1.312 ms with DB 2
    (the search had found DB 1 1.25-1.39x faster on three such kernels); in the suite,
    level1/110 (triangular masks on the operands) 7.10 -> 4.63 ms, the minGPT MLP block
    7.21 -> 5.54 ms, the MLP-Mixer 6.08 -> 5.34 ms.
    With VEC = 4 the K step's inner loop is written out (UNROLL = 1) and with a prologue
    operands read along K are staged along their rows (ROWS = 1): measured on the H200
    (2026-12-01j, matmul_unroll_rows_h200_2026-12-01j.json, all four combinations on 12
    products): unrolled, GEMM 4096^3 3.83 -> 3.38 ms, the linear 2.01 -> 1.76, 3 x 3
    convolutions of 128 channels (128 x 64 tiles) 2.02 -> 1.65, stride 2 0.196 -> 0.180,
    the transposed 1-d 2.50 -> 2.04; 64 x 64 tiles (two K steps a pass) unchanged
    (0.99-1.00x). With a LayerNorm in the loader (DB 1) unrolling alone gave 1.01x, with
    ROWS 1.18x (1.009 -> 0.853 ms); ROWS on products without a prologue went either way
    (0.93-1.04x) and is left to the search."""
    bm, bn, tm, tn = matmul_tiles(m, n, nb, prologue, window, wide, waves)
    fast = tm % 4 == 0 and tn % 4 == 0
    many = tm * tn >= MATMUL_WIDE_BLOCK  # 128 accumulators: BK 8, staged along the rows
    return {"BM": bm, "BN": bn, "TM": tm, "TN": tn,
            "BK": 8 if bm in (32, MATMUL_ROWS192_TILES[0]) or many else MATMUL_BK,
            "VEC": 4 if fast else 1, "DB": 2 if fast and not prologue else 1,
            "ROWS": 1 if fast and (prologue or many) else 0, "UNROLL": 1 if fast else 0,
            "GROUP": MATMUL_GROUP}


# A product of at most this many output columns (rows) is one tile column (row) of the
# default tiles: its A (B) loader loads each element once (matmul_loads_once).
MATMUL_ONCE_SIDE = 64


# A prologue loaded once per element (matmul_loads_once) over at least this long a K
# takes the plain tiles (128 x 64, two staged buffers, 16-byte fetches), not the
# prologue's (one staged buffer, ROWS 1). Measured on the H200 (2026-12-02c,
# bench/results/profile_pv_h200_2026-12-02c.json, attention's exp(S - lse) by V, K = 1024
# and 2048 keys): the product by V 1.348 -> 1.029 ms (16 x 16 heads, 1024 queries),
# 1.123 -> 1.080 ms causal (8 x 12 heads, 2048), 0.686 -> 0.528 ms (nn.MultiheadAttention);
# with K of 32-197 (window attention's, ViT's) the plain tiles lost: the Swin blocks
# 4.216 -> 4.415 ms, ViT 4.675 -> 4.718 (suite call 43).
MATMUL_ONCE_PLAIN_MIN_K = 512


def matmul_wide(m: int, n: int, k: int) -> bool:
    """Whether a large product (matmul_tiles) takes the wide tiles, MATMUL_LARGE_TILES:
    M, N and K all multiples of 4 (operands load 16 bytes at a time whichever dim is
    contiguous) and K at least MATMUL_WIDE_MIN_K."""
    return m % 4 == 0 and n % 4 == 0 and k % 4 == 0 and k >= MATMUL_WIDE_MIN_K


def matmul_loads_once(m: int, n: int) -> tuple[bool, bool]:
    """Whether a product of M x N outputs loads each element of A, of B, once."""
    return n <= MATMUL_ONCE_SIDE, m <= MATMUL_ONCE_SIDE


def _computes_on_loads(v: Value, materialized) -> bool:
    """Whether the loader of `v` computes on the values it loads (an elementwise prologue:
    a LayerNorm's normalization, an activation, a cast) rather than only moving them
    (views, pads; a gather's index does not count). A convolution's windows do not count
    even over a prologue: a dense block's BN + ReLU + convolution (level3/014) ran at
    13.2 ms with DB 1 against 7.0 ms with DB 2 (2026-12-01g, suite)."""
    if v.kind != "node" or v in materialized or v.node.op == "window":
        return False
    if v.node.op == "ew":
        return True
    inputs = v.node.inputs[:1] if v.node.op == "gather" else v.node.inputs
    return v.node.op in MOVEMENT_OPS and any(_computes_on_loads(x, materialized)
                                             for x in inputs)


_MATMUL_KNOBS = ("BM", "BN", "TM", "TN", "BK", "VEC", "DB")
# The search space. Products of at least 512 x 512 try MATMUL_VARIANTS, settings that vary
# one lever at a time around the 128 x 128 tiles with 8 x 8 per invocation (the default
# before 2026-12-01k, and still with a prologue) and the 128 x 64 tiles with 8 x 4 (the
# default from then, and still where matmul_wide refuses the wide tiles): one or two
# staged buffers, BK, the tile shape; the wide tiles (MATMUL_LARGE_TILES, the default
# since 2026-12-02d) are in MATMUL_ALONG_ROWS. Smaller products try the
# scalar tiles MATMUL_TILES x MATMUL_BKS (each with 256 invocations) and
# MATMUL_VEC_VARIANTS. Dropped 2026-12-01k: scalar fragments (VEC 1; 0.38-0.41 of cuBLAS
# against 0.80 then) and 128 x 128 tiles of 8 x 16 staged 16 deep along K (128
# invocations holding 128 accumulators: 0.46-0.58, matmul_tiles_h200_2026-12-01k.json;
# staged 8 deep along the rows they became the wide tiles).
MATMUL_VARIANTS = (  # (BM, BN, TM, TN, BK, VEC, DB)
    (128, 128, 8, 8, 8, 4, 1),
    (128, 128, 8, 8, 16, 4, 1),  # the default with a prologue
    (128, 128, 8, 8, 32, 4, 1),
    (128, 128, 8, 8, 8, 4, 2),
    (128, 128, 8, 8, 16, 4, 2),
    (128, 64, 8, 4, 16, 4, 2),  # the default where matmul_wide refuses the wide tiles
    (128, 64, 8, 4, 32, 4, 1),
    (128, 64, 8, 8, 16, 4, 2),
    (128, 64, 8, 8, 32, 4, 1),
    (64, 128, 8, 8, 16, 4, 2),
    (256, 128, 8, 16, 8, 4, 2),
    (256, 128, 8, 16, 16, 4, 1),
    (64, 64, 4, 4, 16, 4, 2),
)
# ROWS = 1 (with VEC = 4): an operand read along K (a row-major A, a B stored [N, K] as
# nn.Linear's weight) is staged along its rows (M, N) anyway, each 16-byte load stored as
# four scalars: the inner loop then holds 2 vec4 of A per k step instead of TM vec4 for
# four steps (fewer live registers next to the 64 accumulators). The default where an
# operand's loader computes (DB 1: 1.18x on a LayerNorm + linear, 2026-12-01j); elsewhere
# in the search space, where it measured 0.89-1.19x of the default (2026-12-01f) and
# 0.93-1.04x with the loop written out (2026-12-01j). ROWS = 2: A alone (a linear's
# activations, not its weight): ROWS 1 gained 3-4% on plain GEMMs, whose B is read along
# N, and lost 1% on the linear, whose B it stages too. Measured 2026-12-01k on 128 x 128
# tiles: 1.036x (4096^3), 1.043x (3001 x 4093 x 2999), 0.993x (the linear) of ROWS 0; on
# the 128 x 64 default 0.94-0.97x (matmul_rows2_h200_2026-12-01k.json): in the search
# space of the 128 x 128 setting.
MATMUL_ALONG_ROWS = ((128, 128, 8, 8, 16, 4, 2), (128, 128, 8, 8, 8, 4, 2),
                     (128, 64, 8, 8, 16, 4, 2), (64, 64, 4, 4, 16, 4, 2),
                     (*MATMUL_LARGE_TILES, 8, 4, 2))  # the large products' default
# UNROLL = 1 (the VEC = 4 default): the K step's inner loop written out (BK / 4 copies
# with the offset a constant, the swizzled indices folded). NVIDIA's driver left the
# loop of an 8 x 8 block rolled: its K loop was 378 instructions for 256 FFMAs before
# the fetch set-up was hoisted (2026-12-01i), and written out it is 1024 FFMAs in about
# 1090 instructions a K step (SASS of the 4096^3 GEMM, 2026-12-01j). Measured 0.82-0.90x
# of the rolled loop before that hoisting (2026-12-01f), 1.13x after. The rolled loop
# (UNROLL = 0) on the default tiles (the wide ones and 128 x 64) stays in the search, and
# on 128 x 128 tiles with and without ROWS.
MATMUL_ROLLED = (((*MATMUL_LARGE_TILES, 8, 4, 2), 1), ((128, 64, 8, 4, 16, 4, 2), 0),
                 ((128, 128, 8, 8, 16, 4, 2), 0), ((128, 128, 8, 8, 16, 4, 2), 1),
                 ((64, 64, 4, 4, 16, 4, 2), 0), ((64, 64, 4, 4, 16, 4, 2), 1))
MATMUL_TILES = ((16, 64, 1, 4), (64, 16, 4, 1), (32, 32, 2, 2), (64, 64, 4, 4),
                (64, 128, 4, 8), (128, 64, 8, 4), (128, 128, 8, 8))
MATMUL_BKS = (8, 16, 32)
MATMUL_VEC_VARIANTS = ((64, 64, 4, 4, 16, 4, 2), (64, 64, 4, 4, 8, 4, 1),
                       (64, 128, 4, 8, 16, 4, 2), (128, 64, 8, 4, 16, 4, 2),
                       # 17-32 output rows (the default there, staged 8 deep) and
                       # columns (not measured)
                       (32, 128, 4, 4, 8, 4, 2), (32, 128, 4, 4, 16, 4, 2),
                       (128, 32, 4, 4, 16, 4, 2),
                       # 8 x 8 blocks where one side is 64 (a convolution's 64 output
                       # channels, M in the 100,000s); in the search only, not measured
                       (256, 64, 8, 8, 8, 4, 2), (64, 256, 8, 8, 8, 4, 2),
                       # the large products' default where one side is under 512 per
                       # batch entry (convolutions of 128-256 output channels, with the
                       # batch in the grid); in the search only, not measured
                       (128, 128, 8, 8, 16, 4, 2))


def matmul_workgroup_bytes(knobs: dict) -> int:
    """Workgroup memory of a setting: BK-deep slices of A and B, once or twice, with
    MATMUL_PAD vec4s per k on each side that may be staged along its rows."""
    rows = knobs["ROWS"] and knobs["VEC"] == 4 and knobs["DB"] == 1
    return ((knobs["BM"] + knobs["BN"]) * 4 + (32 * MATMUL_PAD if rows else 0)) \
        * knobs["BK"] * knobs["DB"]


def matmul_space(m: int, n: int, k: int) -> list[dict]:
    """Tiles whose sides are at most twice the product's (rounded up to a power of two),
    BK at most K (rounded up), staged tiles within MATMUL_WORKGROUP_BYTES."""
    if m >= 512 and n >= 512:
        rows = MATMUL_VARIANTS
    else:
        rows = tuple((bm, bn, tm, tn, bk, 1, 1) for bm, bn, tm, tn in MATMUL_TILES
                     for bk in MATMUL_BKS) + MATMUL_VEC_VARIANTS
    space = ([{**dict(zip(_MATMUL_KNOBS, row)), "ROWS": 0, "UNROLL": int(row[5] == 4)}
              for row in rows]
             + [{**dict(zip(_MATMUL_KNOBS, row)), "ROWS": 1, "UNROLL": 1}
                for row in MATMUL_ALONG_ROWS]
             + [{**dict(zip(_MATMUL_KNOBS, MATMUL_ALONG_ROWS[0])), "ROWS": 2, "UNROLL": 1}]
             + [{**dict(zip(_MATMUL_KNOBS, row)), "ROWS": r, "UNROLL": 0}
                for row, r in MATMUL_ROLLED])
    if m >= 512 and n >= 512:  # the default tiles in bands of 8 tile rows (MATMUL_GROUP)
        space += [{**dict(zip(_MATMUL_KNOBS, MATMUL_VARIANTS[5])), "ROWS": 0, "UNROLL": 1,
                   "GROUP": 8},
                  {**dict(zip(_MATMUL_KNOBS, MATMUL_ALONG_ROWS[-1])), "ROWS": 1, "UNROLL": 1,
                   "GROUP": 8}]
    return [{"GROUP": MATMUL_GROUP, **s} for s in space
            if s["BM"] <= 2 * pow2_ceil(m) and s["BN"] <= 2 * pow2_ceil(n)
            and s["BK"] <= max(8, pow2_ceil(k))
            and matmul_workgroup_bytes(s) <= MATMUL_WORKGROUP_BYTES]


@dataclass
class _Operand:
    """One matmul operand as the tile code sees it: `rows` (BM or BN) rows of the tile
    along the output dim (m for A, n for B), `size` of that dim, the register block's
    `per` rows per invocation spread over `threads` invocations along `tid`."""

    name: str  # "a" or "b"
    rows: int
    size: int
    base: str  # the tile's first row: "m0" or "n0"
    tid: str  # "ty" or "tx"
    threads: int  # TY or TX
    per: int  # TM or TN
    row_dim: int  # the loader dim of the rows (A: 1, B: 2); K is the other of 1, 2
    contiguous: str | None  # "row", "k" or None (unknown): which dim is contiguous
    layout: str  # "O": fragments along the rows, "K": along K (vec4 only)
    width: int  # 1 (scalars) or 4 (vec4)
    view: tuple[str, int, list[int]] | None  # vec4 view name, offset, strides: 16-byte loads
    transpose: bool = False  # read along K, staged along the rows (ROWS): 4 stores a load
    lanes: int | None = None  # no view: the loader dim whose 4 values one call returns
    pad: int = 0  # vec4s of padding per k of the staged tile (MATMUL_PAD)

    @property
    def kstride(self) -> int:
        """Tile elements from one k to the next in a fragments-along-the-rows tile."""
        return self.rows // self.width + self.pad

    def call(self, row: str, k: str, suffix: str = "") -> str:
        return (f"load_a{suffix}(b, {row}, {k})" if self.name == "a"
                else f"load_b{suffix}(b, {k}, {row})")

    def row_of(self, i: int) -> str:
        """The tile row of the invocation's i-th row (A: m, B: n)."""
        if self.layout == "K":
            return f"{self.tid} + {i * self.threads}"
        w = self.width
        return f"({self.tid} + {i // w * self.threads}) * {w} + {i % w}"


def _matmul_operand(src, materialized, name: str, x: Value, knobs: dict) -> _Operand:
    vec = knobs["VEC"]
    a = name == "a"
    row_dim = 1 if a else 2
    cdim = contiguous_dim(x, materialized)
    contiguous = None if cdim is None else ("row" if cdim == row_dim else "k")
    transpose = vec == 4 and contiguous == "k" and knobs["ROWS"] in ((1, 2) if a else (1,))
    layout = "K" if vec == 4 and contiguous == "k" and not transpose else "O"
    width = 1 if vec == 1 else 4
    view = None
    plain = plain_strides(x, materialized) if vec == 4 else None
    if plain is not None:
        root, offset, st = plain
        # the dim a vec4 load runs along; every other stride a multiple of 4, those of
        # size-1 dims too (stricter than vec4_view: relaxed, 4 suite plans change,
        # level1/005, 013, level3/018 and 019, not measured)
        vdim = row_dim if layout == "O" and not transpose else 3 - row_dim
        if (st[vdim] == 1 and x.shape[vdim] % 4 == 0 and offset % 4 == 0
                and all(s % 4 == 0 for d, s in enumerate(st) if d != vdim)):
            view = (src.view4(root), offset, st)
    # without a view, the 16 bytes an invocation fetches at once come from one loader
    # call (`load_a4`, `load_b4`: loader with lanes), where their index arithmetic is
    # shared; measured on the H200 (2026-12-01h, bench/results/window_variants_h200.json)
    # on 3 x 3 convolutions, whose windows' pixels each call divided by the image width:
    # 128 channels at 56 x 56 2.55 -> 2.08 ms, 128 -> 192 at 64 x 64 2.85 -> 2.15 ms,
    # 64 channels at 128 x 128 1.94 -> 1.48 ms
    # Along K the four lanes must be all inside or all outside (a K tail reads zeros);
    # along the rows of a computed operand (a window, a prologue) a group may cross
    # their end: the lanes past it land in tile rows whose outputs are not stored
    # (WebGPU keeps any read in bounds). Measured on the H200 (2026-12-01m): 3 x 3
    # convolutions of 7 x 7 images 0.207 -> 0.157 ms, level1/060 (127-wide rows) 5.65
    # -> 4.32 ms; a plain B of 50 columns (each lane tested alone before) 1.41 -> 1.71
    # ms, so a plain operand keeps its lanes' own tests
    lanes = None
    if vec == 4 and view is None:
        ldim = row_dim if layout == "O" and not transpose else 3 - row_dim
        computed = plain is None
        lanes = (ldim if x.shape[ldim] % 4 == 0 or ldim == row_dim and computed
                 else None)
    return _Operand(name, knobs["BM" if a else "BN"], x.shape[row_dim], "m0" if a else "n0",
                    "ty" if a else "tx", knobs["BM"] // knobs["TM"] if a else
                    knobs["BN"] // knobs["TN"], knobs["TM" if a else "TN"], row_dim,
                    contiguous, layout, width, view, transpose, lanes,
                    MATMUL_PAD if transpose and knobs["DB"] == 1 else 0)


def _matmul_tile_code(op: _Operand, bk: int, nt: int, k: int, db: int):
    """Declarations, the per-invocation set-up and prefetch registers, and the code that
    fetches one staged tile of the operand into registers (at K offset `kb`) and stores
    it (at `{off}`). What does not depend on `kb` (an invocation's row and K offset in
    the tile, its staging slot, its row's bounds test, the address of a vec4 view but
    for the K term) is computed once before the K loop, and bounds tests that hold for
    every tile (M, N or K a multiple of the tile) are not written: the driver neither
    hoisted that arithmetic nor dropped those tests, so a plain GEMM's K step spent 110
    integer instructions beside its 256 FMAs (SASS read from NVIDIA's shader cache on
    the H200, 2026-12-01i)."""
    w, rows = op.width, op.rows
    vec_t = "f32" if w == 1 else "vec4<f32>"
    per_buffer = op.kstride * bk if op.layout == "O" else rows * bk // w
    decl = f"var<workgroup> tile_{op.name}: array<{vec_t}, {per_buffer * db}>;"
    chunks = bk // 4
    n = op.name
    if op.transpose:  # 4 k values of one row loaded, stored into 4 fragments' lanes
        units, groups = rows * bk // 4, op.kstride
        pos = ("({t} % {c}) * 4", "{t} / {c}")
    elif op.layout == "O":
        units, groups = per_buffer, op.kstride
        pos = (("{t} % {bk}", "{t} / {bk}") if op.contiguous == "k"
               else ("{t} / {g}", "{t} % {g}"))
    else:
        units = per_buffer
        pos = (("({t} / {rows}) * 4", "{t} % {rows}") if op.contiguous == "row"
               else ("({t} % {c}) * 4", "{t} / {c}"))
    rows_in = op.size % rows == 0  # every tile's rows inside the operand
    k_in = k % bk == 0  # every K step inside

    def inside(r: str, kk: str, first: str, row_ok: str) -> str:
        """The test that element (row r, K offset kk) of a fetch lies inside the operand
        ("" when every tile's is): its row's precomputed `row_ok` for the first row."""
        tests = [] if rows_in else [row_ok if r == first else f"{op.base} + {r} < {op.size}"]
        if not k_in:
            tests.append(f"kb + {kk} < {k}")
        return " && ".join(tests)

    def guarded(test: str, body: str) -> str:
        return f"if ({test}) {{ {body} }}" if test else body

    def filled(reg: str, test: str, body: str) -> str:  # zeros where the test fails
        return f"{reg} = vec4<f32>(0.0); {guarded(test, body)}" if test else body

    prefetch, fetch, store = [], [], []
    for u in range(-(-units // nt)):
        reg, t, kq, rq = f"p{n}{u}", f"t{n}{u}", f"q{n}{u}", f"r{n}{u}"
        kx, rx = (p.format(t=t, c=chunks, bk=bk, g=groups if op.layout == "O" else 0,
                           rows=rows) for p in pos)
        prefetch += [f"    var {reg}: {vec_t};",
                     f"    let {t} = lin + {u * nt}; let {kq} = {kx}; let {rq} = {rx};"]
        if op.transpose or op.layout == "K":
            elems = [(rq, f"{kq} + {e}") for e in range(4)]
        else:
            elems = [(f"{rq} * {w} + {e}" if w > 1 else rq, kq) for e in range(w)]
        row_ok = f"v{n}{u}"  # the row of the first element (all of a vec4 view's)
        if not rows_in:
            prefetch.append(f"    let {row_ok} = {op.base} + {elems[0][0]} < {op.size};")

        if op.view is not None:
            name, offset, st = op.view
            r, kk = elems[0]
            terms = [str(offset // 4)] if offset else []
            for dim, idx in ((0, "b"), (op.row_dim, f"({op.base} + {r})"),
                             (3 - op.row_dim, kk if " " not in kk else f"({kk})")):
                if st[dim] == 1:
                    terms.append(f"{idx} / 4")
                elif st[dim]:
                    terms.append(f"{idx} * {st[dim] // 4}")
            kst = st[3 - op.row_dim]  # kb, a multiple of 4, apart from the rest
            kterm = "(kb >> 2u)" if kst == 1 else f"kb * {kst // 4}"
            prefetch.append(f"    let i{n}{u} = {' + '.join(terms) or '0'};")
            body = filled(reg, inside(r, kk, elems[0][0], row_ok),
                          f"{reg} = {name}[i{n}{u} + {kterm}];")
        elif op.lanes is not None:  # the four lanes from one call, all in or all out
            r, kk = elems[0]
            body = filled(reg, inside(r, kk, elems[0][0], row_ok),
                          f"{reg} = {op.call(f'{op.base} + {r}', f'kb + {kk}', '4')};")
        else:
            body = f"{reg} = {vec_t}(0.0);"
            for e, (r, kk) in enumerate(elems):
                lane = f"{reg}.{_LANES[e]}" if w > 1 else reg
                body += " " + guarded(inside(r, kk, elems[0][0], row_ok),
                                      f"{lane} = {op.call(f'{op.base} + {r}', f'kb + {kk}')};")
        if op.transpose:
            prefetch.append(f"    let s{n}{u} = {kq} * {groups} + {rq} / 4; "
                            f"let l{n}{u} = {rq} % 4;")
            st_line = " ".join(f"tile_{n}[{{off}} + s{n}{u} + {e * groups}][l{n}{u}]"
                               f" = {reg}.{_LANES[e]};" for e in range(4))
        else:
            slot = (f"{kq} * {groups} + {rq}" if op.layout == "O"
                    else f"{rq} * {chunks} + (({kq} / 4) ^ {_swizzle(rq, chunks)})")
            prefetch.append(f"    let s{n}{u} = {slot};")
            st_line = f"tile_{n}[{{off}} + s{n}{u}] = {reg};"
        f_line, s_line = body, st_line
        if (u + 1) * nt > units:  # a last round that only part of the workgroup loads
            f_line = f"if ({t} < {units}) {{ {f_line} }}"
            s_line = f"if ({t} < {units}) {{ {s_line} }}"
        fetch.append(f"{{ {f_line} }}")
        store.append(f"{{ {s_line} }}")
    return decl, per_buffer, prefetch, fetch, store


def _swizzle(row: str, chunks: int) -> str:
    """The XOR swizzle of K-major vec4 tiles: row r's chunk c is stored at c ^ s(r), so
    that 8 consecutive rows read at one chunk hit 8 different 16-byte bank groups."""
    shift = max(0, 3 - (chunks.bit_length() - 1))  # rows per swizzle step: 8 / chunks
    return f"(({row} >> {shift}u) & {chunks - 1})" if shift else f"({row} & {chunks - 1})"


def _matmul_multiply(a: _Operand, b: _Operand, bk: int, vec: int) -> list[str]:
    """The unrolled register block of one K step (VEC = 1) or four (VEC = 4): A's values
    for the step held in registers, B's streamed, one fma per accumulator and k."""
    lines = []
    steps = 1 if vec == 1 else 4
    kv = "kk" if vec == 1 else "kq"

    def fragment(op: _Operand, g: int, c: int, off: str) -> str:
        """Tile element (vec4 or scalar) g of the operand's fragment at step c."""
        if op.layout == "K":
            chunks = bk // 4
            z = f"z{op.name}" if op.threads % 8 == 0 else _swizzle(f"({op.row_of(g)})", chunks)
            return f"tile_{op.name}[{off} + ({op.row_of(g)}) * {chunks} + (({kv} / 4) ^ {z})]"
        k = kv if c == 0 else f"{kv} + {c}"
        return f"tile_{op.name}[{off} + ({k}) * {op.kstride} + {op.tid} + {g * op.threads}]"

    def value(op: _Operand, var: str, i: int, c: int) -> str:
        if op.layout == "K":
            return f"{var}{i}.{_LANES[c]}"
        if op.width == 1:
            return f"{var}{i}_{c}"
        return f"{var}{i // 4}_{c}.{_LANES[i % 4]}"

    if a.layout == "K":
        lines += [f"let a{i} = {fragment(a, i, 0, 'aoff')};" for i in range(a.per)]
    else:
        lines += [f"let a{g}_{c} = {fragment(a, g, c, 'aoff')};"
                  for c in range(steps) for g in range(a.per // a.width)]
    if b.layout == "K":
        for j in range(b.per):
            lines.append(f"let b{j} = {fragment(b, j, 0, 'boff')};")
            lines += [f"acc_{i}_{j} = fma({value(a, 'a', i, c)}, {value(b, 'b', j, c)},"
                      f" acc_{i}_{j});" for c in range(steps) for i in range(a.per)]
    else:
        for c in range(steps):
            for g in range(b.per // b.width):
                lines.append(f"let b{g}_{c} = {fragment(b, g, c, 'boff')};")
                lines += [f"acc_{i}_{j} = fma({value(a, 'a', i, c)}, {value(b, 'b', j, c)},"
                          f" acc_{i}_{j});"
                          for j in range(g * b.width, (g + 1) * b.width) for i in range(a.per)]
    return lines


def _block_key(op: _Operand) -> tuple:
    """What of an operand `_matmul_multiply` reads: its register block's layout."""
    return (op.name, op.rows, op.tid, op.threads, op.per, op.layout, op.width, op.pad)


@lru_cache(maxsize=256)
def _register_block(a: tuple, b: tuple, bk: int, vec: int) -> str:
    """`_matmul_multiply`'s lines, indented, for the operands of block keys `a` and `b`:
    one string per register block, however many kernels share it."""
    ops = [_Operand(name, rows, 0, "", tid, threads, per, 0, None, layout, width, None, pad=pad)
           for name, rows, tid, threads, per, layout, width, pad in (a, b)]
    return "\n".join(f"            {line}" for line in _matmul_multiply(*ops, bk, vec))


def _matmul(src, materialized, out, tnode, knobs, options: CompileOptions):
    """The matmul kernel for the given knobs (module comment of kernels/matmul.wgsl).
    VEC = 4: each operand's staged tile holds vec4 fragments along its contiguous dim
    (A K-contiguous, as stored by a row-major A: [m][k/4], XOR-swizzled; A
    M-contiguous: [k][m/4]; B likewise with n), so the inner loop does 16-byte shared
    loads for both operands; the global loads are 16 bytes wide too when the loader is
    a plain buffer read whose contiguous dim is a multiple of 4 (a vec4 view of the
    buffer is bound next to it), else four scalar loader calls. DB = 2: two staged
    buffers; the next tile is fetched into registers while this one is multiplied and
    stored after it, one barrier per K step."""
    a, b = tnode.inputs
    nb, m, k = a.shape
    n = b.shape[2]
    # a prologue loaded once per element over a long K (one tile column: attention's
    # exp(S - lse) by V) takes the plain tiles (matmul_knobs, MATMUL_ONCE_PLAIN_MIN_K)
    prologue = any(_computes_on_loads(x, materialized)
                   and not (once and k >= MATMUL_ONCE_PLAIN_MIN_K)
                   for x, once in zip((a, b), matmul_loads_once(m, n)))
    knobs = merge_knobs(matmul_knobs(m, n, nb, prologue, product_reads_window(tnode),
                                     matmul_wide(m, n, k), options.waves), knobs)
    bm, bn, tm, tn, bk, vec, db = (knobs[name] for name in _MATMUL_KNOBS)
    require(all(isinstance(v, int) and v >= 1 for v in (bm, bn, tm, tn, bk)), knobs,
            "tile sizes must be positive integers")
    require(bm % tm == 0 and bn % tn == 0, knobs, "TM must divide BM and TN divide BN")
    require((bm // tm) * (bn // tn) <= MAX_WG, knobs, f"more than {MAX_WG} invocations")
    require(vec in (1, 4) and db in (1, 2), knobs, "VEC must be 1 or 4 and DB 1 or 2")
    require(knobs["ROWS"] in (0, 1, 2) and knobs["UNROLL"] in (0, 1), knobs,
            "ROWS must be 0, 1 or 2 (A only) and UNROLL 0 or 1")
    require(isinstance(knobs["GROUP"], int) and knobs["GROUP"] >= 0, knobs,
            "GROUP must be a non-negative integer")
    require(vec == 1 or (tm % 4 == 0 and tn % 4 == 0 and bk % 4 == 0
                         and (bk // 4) & (bk // 4 - 1) == 0 and bk <= 32), knobs,
            "VEC = 4 needs TM, TN multiples of 4 and BK 4 times a power of two, at most 32")
    wg_bytes = matmul_workgroup_bytes(knobs)
    require(wg_bytes <= MATMUL_WORKGROUP_BYTES, knobs,
            f"staged tiles exceed {MATMUL_WORKGROUP_BYTES} bytes")
    if nb > MAX_GRID:
        raise CompileError(f"matmul batch {nb} exceeds the grid limit {MAX_GRID}")
    # the scalar loaders first: they bind the operands' buffers (names in the key) before
    # any vec4 view of them
    scalar = [loader(src, materialized, "load_a", a), loader(src, materialized, "load_b", b)]
    tx, ty = bn // tn, bm // tm
    nt = tx * ty
    ops = [_matmul_operand(src, materialized, name, x, knobs) for name, x in (("a", a), ("b", b))]
    functions = "".join(f if op.lanes is None
                        else loader(src, materialized, f"load_{op.name}4", x, lanes=op.lanes)
                        for f, op, x in zip(scalar, ops, (a, b)))
    tiles, prefetch, fetch, stores, sizes = [], [], [], [], []
    for op in ops:
        decl, per_buffer, pre, fet, sto = _matmul_tile_code(op, bk, nt, k, db)
        tiles.append(decl)
        prefetch += pre
        fetch += fet
        stores.append(sto)
        sizes.append(per_buffer)
        if op.layout == "K" and op.threads % 8 == 0:  # one swizzle for all of its rows
            prefetch.append(f"    let z{op.name} = {_swizzle(op.tid, bk // 4)};")

    def stored(off_a: str, off_b: str, indent: str) -> str:
        return "\n".join(indent + line.replace("{off}", off)
                         for off, lines in zip((off_a, off_b), stores) for line in lines)

    def fetched(indent: str) -> str:
        return "\n".join(indent + f for f in fetch)

    mult = _register_block(*(_block_key(op) for op in ops), bk, vec)
    step = 1 if vec == 1 else 4
    kv = "kk" if vec == 1 else "kq"
    if knobs["UNROLL"]:
        inner = "\n".join(snippet("matmul_inner_step").substitute(KV=kv, OFFSET=i, MULTIPLY=mult)
                          for i in range(0, bk, step))
    else:
        inner = snippet("matmul_inner_loop").substitute(KV=kv, BK=bk, STEP=step, MULTIPLY=mult)
    # A triangular operand (lower/linalg.k_range) bounds each tile's K loop: [klo, khi),
    # klo a multiple of BK; the loaders' masks still zero what lies outside the band.
    # An epilogue ending in where(mask, value, scalar) whose mask is a band of the
    # output (ir.where_band: causal attention's scores) needs no product in a tile
    # the band misses: its K range is empty
    at = tnode.attrs
    band = (where_band(out) if out is not tnode.out and out.shape[-2:] == (m, n)
            and not at.get("fold") else None)
    missed = None  # no output of the tile in the band: from the range of n - m in it
    if band is not None:
        op, c, _ = band
        least, most = f"n0 - m0 - {bm - 1}", f"n0 - m0 + {bn - 1}"
        missed = {"le": f"{least} > {c}", "lt": f"{least} >= {c}", "ge": f"{most} < {c}",
                  "gt": f"{most} <= {c}", "eq": f"{least} > {c} || {most} < {c}"}[op]
    ranged = bool(at.get("k_from") or at.get("k_to") or missed)
    first, end = "0", str(k)
    if ranged:
        lows = [f"{ax}0 + {c}" for ax, c in at.get("k_from", [])]
        highs = [f"{ax}0 + {(bm if ax == 'm' else bn) + c}" for ax, c in at.get("k_to", [])]
        lo = "0"
        for t in lows:
            lo = f"max({lo}, {t})"
        hi = str(k)
        for t in highs:
            hi = f"min({hi}, {t})"
        first, end = "klo", "khi"
        # klo stays inside K: an empty range's first fetch still reads the operands
        klo = f"(min({lo}, {k - 1}) / {bk}) * {bk}" if lows else "0"
        # a tile the band misses stores nothing when nothing reads there (src.band_only:
        # ir.read_only_in_band), else the epilogue's value outside the band
        skip = f"    if ({missed}) {{ return; }}\n" if missed and src.band_only else ""
        if missed and not skip:
            hi = f"select({hi}, 0, {missed})"
        ranges = f"{skip}    let klo = {klo};\n    let khi = {hi};\n"
    if db == 1:
        loop = snippet("matmul_loop_db1").substitute(
            FIRST=first, END=end, BK=bk, FETCH=fetched("        "),
            STORE=stored("0", "0", "        "), INNER=inner)
    else:
        # The next tile is fetched into registers during the multiply and stored into
        # the other buffer after it, unconditionally: the step whose next tile is past K
        # fetches the first tile again (no branch around the fetch and store, whose
        # merges cost the driver register moves; its store lands in a buffer no step
        # reads). Blocks of up to 32 accumulators take two steps per pass of the loop,
        # one per buffer, so that the buffer offsets are constants; with 64 the driver
        # shuffles them between the two steps (156 register moves in a 4096^3 GEMM's
        # loop, read from NVIDIA's shader cache), so they take one. Measured on the H200
        # (2026-12-01i, against the branches and a buffer computed from k0): 3 x 3
        # convolutions (64 x 64 and 128 x 64 tiles) 1.46 -> 1.30 ms (64 ch), 2.07 ->
        # 2.02 (128 ch), 2.16 -> 1.89 (128 -> 192); GEMM 4096^3 3.78 -> 3.84 ms, and
        # with two steps 4.59
        sa, sb = sizes
        steps = -(-k // bk)
        pair = tm * tn <= 32

        def k_step(cur: str, nxt: str, last: bool) -> str:
            """One K step on buffer `cur` (0, 1 or an expression), fetching the tile at
            `nxt`; `last`: `nxt` may be past K."""
            ind = "        "
            other = f"(1 - {cur})" if not cur.isdigit() else str(1 - int(cur))
            kb = f"select({nxt}, 0, {nxt} >= {end})" if last else nxt
            return snippet("matmul_k_step").substitute(
                KB=kb, FETCH=fetched(ind), CUR=cur, SA=sa, SB=sb, INNER=inner,
                STORE=stored(f"{other} * {sa}", f"{other} * {sb}", ind))

        if pair:  # with an odd number of steps the second runs only while there is one
            # (a K range's parity is the tile's: both steps may be the last)
            one = textwrap.indent(k_step("0", f"k0 + {bk}", ranged or steps % 2 == 1), "    ")
            two = textwrap.indent(k_step("1", f"k0 + {2 * bk}", ranged or steps % 2 == 0),
                                  "    ")
            guard = "" if steps % 2 == 0 and not ranged else f"if (k0 + {bk} < {end}) "
            body = snippet("matmul_k_pair").substitute(FIRST_STEP=one, SECOND_STEP=two,
                                                       GUARD=guard)
        else:
            body = (f"        let cur = ((k0 - {first}) / {bk}) % 2;\n" if ranged else
                    f"        let cur = (k0 / {bk}) % 2;\n") + k_step("cur", f"k0 + {bk}", True)
        loop = snippet("matmul_loop_db2").substitute(
            FIRST=first, END=end, FETCH=fetched("        "), STORE=stored("0", "0", "    "),
            STEP=(2 if pair else 1) * bk, BODY=body)
    if ranged:
        loop = ranges + loop
    a_op, b_op = ops
    accs = [f"    var acc_{i}_{j} = 0.0;" for i in range(tm) for j in range(tn)]
    # the stores test M and N only where a tile can cross them
    test = " && ".join(t for t, inside in ((f"m < {m}", m % bm == 0), (f"n < {n}", n % bn == 0))
                       if not inside)

    def store(i: int, j: int) -> str:
        body = f"let gi = {output_index(tnode)}; let acc = acc_{i}_{j}; $STORE"
        return f"if ({test}) {{ {body} }}" if test else body

    outs = [f"    {{ let m = m0 + {a_op.row_of(i)}; let n = n0 + {b_op.row_of(j)}; {store(i, j)} }}"
            for i in range(tm) for j in range(tn)]
    gx, gy = math.ceil(n / bn), math.ceil(m / bm)
    slots = dict(functions=functions, key_functions="".join(scalar), BM=bm, BN=bn, TX=tx,
                 TY=ty, ORIGIN=_tile_origin(knobs["GROUP"], gx, gy, bm, bn),
                 TILES="\n".join(tiles),
                 PREFETCH="\n".join(prefetch), ACCUMULATORS="\n".join(accs), K_LOOP=loop,
                 STORE_BLOCK="\n".join(outs), workgroup_bytes=wg_bytes)
    return "matmul", slots, (gx, gy, nb), knobs


def output_index(tnode) -> str:
    """The flat index gi in the matmul node's output of element (b, m, n) of its
    product: [nb, M, N] row-major, or with `fold` (GraphBuilder.folded_matmul) [N / fold,
    nb, M, fold], column n in block n / fold."""
    a, b = tnode.inputs
    nb, m = a.shape[:2]
    n = b.shape[2]
    fold = tnode.attrs.get("fold")
    if not fold or fold == n:
        return f"(b * {m} + m) * {n} + n"
    return f"((n / {fold}) * {nb * m} + b * {m} + m) * {fold} + n % {fold}"


def _tile_origin(group: int, gx: int, gy: int, bm: int, bn: int) -> str:
    """m0, n0: the first row and column of the workgroup's tile (MATMUL_GROUP)."""
    if group == 0 or gy == 1 or gx == 1:
        return f"    let m0 = i32(wid.y) * {bm};\n    let n0 = i32(wid.x) * {bn};"
    g = min(group, gy)
    rows = str(g) if gy % g == 0 else f"min({gy} - first, {g})"
    return (f"    let pid = i32(wid.y) * {gx} + i32(wid.x);\n"
            f"    let first = (pid / {g * gx}) * {g};\n"
            f"    let inside = pid - first * {gx};\n"
            f"    let rows = {rows};\n"
            f"    let m0 = (first + inside % rows) * {bm};\n"
            f"    let n0 = (inside / rows) * {bn};")


def _matmul_space(out, tnode):
    a, b = tnode.inputs
    return matmul_space(a.shape[1], b.shape[2], a.shape[2])
