"""How a matrix product is cut for the matmul template: the cost model's answer to which
formulation of x @ y is cheapest for these shapes under the compile's options. A product
of few rows goes whole to the gemv template (kernels/gemv.takes_gemv), K cut only where
its grid is small and its K long (gemv_chunks). Otherwise K in
chunks (split-K: partial products summed by the reduce template), the last rows a
product of their own, operands copied into buffers aligned to 4. The lowering
(lower/linalg.planned_product) builds the plan it gets from `product_plan`; the rules and
their measurements are in lower/linalg.product's docstring and `wave_plan`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.ir import broadcast_shapes
from ..options import Waves
from .gemv import gemv_chunks, takes_gemv
from .matmul import (
    MATMUL_BK,
    MATMUL_PLAIN_TILES,
    MATMUL_SCALAR_RATE,
    MATMUL_SPLIT_COST,
    MATMUL_WAVE_MAX_CHUNKS,
    MATMUL_WIDE_MIN_K,
    large_tiles,
    matmul_tiles,
    matmul_wave_cost,
    matmul_wide,
)

# The small grids' rule (see lower/linalg.product for its history).
SPLIT_K_MIN = 512  # split K only from this depth on ...
SPLIT_K_MAX_TILES = 128  # ... of a product of at most this many output tiles ...
SPLIT_K_CHUNK = 128  # ... into chunks at least this deep ...
SPLIT_K_TARGET = 512  # ... until about this many workgroups share the work (see product)
# Deep products (deep_plan): K at least SPLIT_DEEP_RATIO times M and N (a weight's
# gradient, summed over a batch's positions), on a device of known waves, in chunks at
# least SPLIT_DEEP_MIN_CHUNK deep whose partial sums take at most
# SPLIT_K_MAX_PARTIAL_BYTES.
SPLIT_DEEP_RATIO = 8
SPLIT_DEEP_MIN_CHUNK = MATMUL_WIDE_MIN_K
SPLIT_K_MAX_PARTIAL_BYTES = 64 << 20


@dataclass(frozen=True)
class WavePlan:
    """How a product is cut (product_plan, planned_product)."""

    chunks: int = 1  # K chunks (split-K); with a tail, the top rows' product is whole
    tail: int = 0  # the last rows: a product of their own, planned as a small one
    align: bool = False  # operands copied into buffers padded to multiples of 4 (where not)


def product_plan(x_shape, y_shape, window: bool = False,
                 waves: Waves | None = None) -> WavePlan:
    """How x_shape @ y_shape is cut; `window`: an operand reads a convolution's windows
    (kernels.matmul_tiles). Products of more than SPLIT_K_MAX_TILES tiles on a device
    whose `waves` are known (CompileOptions.waves) take the plan of least modelled time
    (wave_plan) where no operand reads windows and they are large (both sides at least
    512) or narrow ones on the plain tiles (M or N under 512: 128 x 64 tiles, whose slots
    are known too);
    others split K by the small grids' rule. A product that takes the gemv template
    (kernels/gemv.takes_gemv: few rows) sums its whole K in each workgroup: its chunks
    are gemv_chunks' (1 but for a long K over few columns)."""
    k = x_shape[-1]
    m, n = x_shape[-2], y_shape[-1]
    nb = math.prod(broadcast_shapes(x_shape[:-2], y_shape[:-2]))
    if takes_gemv(m, window):
        return WavePlan(chunks=gemv_chunks(n, k, nb, waves))
    if waves is not None and k >= SPLIT_K_MIN and k >= SPLIT_DEEP_RATIO * max(m, n):
        return deep_plan(m, n, k, nb, window, waves)
    tiles_ = matmul_tiles(m, n, nb, window=window, wide=matmul_wide(m, n, k), waves=waves)
    tiles = nb * math.ceil(m / tiles_[0]) * math.ceil(n / tiles_[1])
    if tiles > SPLIT_K_MAX_TILES:
        facts = waves
        large = m >= 512 and n >= 512
        if facts is None or window or not (large or tiles_ == MATMUL_PLAIN_TILES):
            return WavePlan()
        return wave_plan(m, n, k, nb, facts)[1]
    if k < SPLIT_K_MIN:
        return WavePlan()
    want = min(k // SPLIT_K_CHUNK, math.ceil(SPLIT_K_TARGET / tiles))
    if want < 2:
        return WavePlan()
    # fewer chunks (down to half) that cut K into whole staged tiles, where some do:
    # a padded K puts a pad in both operands' loaders
    exact = [c for c in range(want, (want - 1) // 2, -1) if k % (c * MATMUL_BK) == 0]
    chunks = exact[0] if exact else want
    return WavePlan(chunks=chunks if chunks >= 2 else 1)


def deep_plan(m: int, n: int, k: int, nb: int, window: bool, facts: Waves) -> WavePlan:
    """The K chunks of least modelled time (kernels.matmul_wave_cost) for nb products of
    M x N x K whose K is long against M and N (product_plan): a convolution's weight
    gradient sums over the batch's positions (U-Net: 128 x 1152 outputs over K = 131072),
    its few output tiles too few workgroups for the device unless K is cut. Each count
    of chunks (whole staged tiles, at least SPLIT_DEEP_MIN_CHUNK deep, partial sums of at
    most SPLIT_K_MAX_PARTIAL_BYTES) is costed on the tiles its product of nb * chunks
    entries gets (kernels.matmul_tiles), the partial sums' reduction included (its
    MATMUL_SPLIT_COST per chunk); the fewest chunks among equal costs."""
    options = []
    for c in range(1, max(1, k // SPLIT_DEEP_MIN_CHUNK) + 1):
        if c > 1 and (k % (c * MATMUL_BK)
                      or 4 * nb * c * m * n > SPLIT_K_MAX_PARTIAL_BYTES):
            continue
        tiles = matmul_tiles(m, n, nb * c, window=window, wide=matmul_wide(m, n, k // c),
                             waves=facts)
        options.append((matmul_wave_cost(tiles, m, n, nb, k, c, facts), c))
    return WavePlan(chunks=min(options)[1])


def wave_plan(m: int, n: int, k: int, nb: int, facts: Waves) -> tuple[float, WavePlan]:
    """The plan of least modelled time (kernels.matmul_wave_cost, in its units) for nb
    products of M x N x K on a device of slots `facts`, and that time:
    * K in c chunks (whole staged tiles, at least MATMUL_WIDE_MIN_K deep) on the wide or
      the plain tiles, whichever model faster (kernels.large_tiles, which the
      chunks' product then gets), or on the plain tiles for a narrow product (M or N
      under 512; product_plan): 49152 x 8192 x 50's 384 tiles are 2.9 rounds of 132,
      the last alone on its SMs, and in 2 chunks 5.8;
    * or, for a large product, the last r rows (r < 512, a multiple of the plain tiles'
      rows) a product of their own on the plain tiles, with its own plan (chunks at
      most), and the rows above one product in whole waves; a cat then copies both
      (MATMUL_SPLIT_COST per element read and written): 3004 x 4096 x 3000's 576 wide
      tiles fill 2.2 waves of 264, its top
      2748 rows 528 tiles (2 waves) and 256 rows 376 plain workgroups (4 chunks);
    * where M, K or N is not a multiple of 4 (operands loaded a scalar at a time, at
      MATMUL_SCALAR_RATE where K is not, and no wide tiles), the same for the padded
      shape, the operands copied there first and the result sliced back.
    """
    if m % 4 or k % 4 or n % 4:
        slow = MATMUL_SCALAR_RATE if k % 4 else 1.0
        as_is = matmul_wave_cost(MATMUL_PLAIN_TILES, m, n, nb, k, 1, facts) / slow
        m4, k4, n4 = (-(-d // 4) * 4 for d in (m, k, n))
        cost, plan = wave_plan(m4, n4, k4, nb, facts)
        copies = nb * ((m * k + m4 * k4 if m % 4 or k % 4 else 0)
                       + (k * n + k4 * n4 if k % 4 or n % 4 else 0))
        cost += MATMUL_SPLIT_COST * (copies + (0 if plan.tail else 2 * nb * m * n))
        return min((as_is, WavePlan()), (cost, replace(plan, align=True)),
                   key=lambda o: o[0])
    large = m >= 512 and n >= 512
    options = []
    for c in range(1, MATMUL_WAVE_MAX_CHUNKS + 1):
        if c > 1 and (k % (c * MATMUL_BK) or k // c < MATMUL_WIDE_MIN_K):
            continue
        tiles = (large_tiles(m, n, nb * c, matmul_wide(m, n, k // c), facts) if large
                 else MATMUL_PLAIN_TILES)
        options.append((matmul_wave_cost(tiles, m, n, nb, k, c, facts), WavePlan(chunks=c)))
    step = MATMUL_PLAIN_TILES[0]
    for r in range(step, min(512, m - 511) if large else 0, step):
        if matmul_tiles(r, n, nb, waves=facts) != MATMUL_PLAIN_TILES:
            continue  # slots unknown (64 x 64 tiles)
        rest = product_plan((nb, r, k), (nb, k, n), waves=facts)  # under 512 rows: chunks
        top = large_tiles(m - r, n, nb, matmul_wide(m - r, n, k), facts)
        cost = (matmul_wave_cost(top, m - r, n, nb, k, 1, facts)
                + matmul_wave_cost(MATMUL_PLAIN_TILES, r, n, nb, k, rest.chunks, facts)
                + MATMUL_SPLIT_COST * 2 * nb * m * n)
        options.append((cost, WavePlan(tail=r)))
    return min(options, key=lambda o: o[0])
