"""Random inputs: one generator for the harness's trials and the tuner's input sets.

`draw` gives float32 samples of a distribution ("normal", "normal*K", "heavy":
Student-t with 2 degrees of freedom clipped to +-HEAVY_TAIL_CLIP, "positive": uniform
in [0.1, 2)); the values depend on the key alone, not on how many threads drew them.
`kernel_inputs` draws the buffers of one kernel (the tuner's and the sandbox's input
sets).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ..dtypes import numpy_type, to_storage

HEAVY_TAIL_CLIP = 20.0
DRAW_CHUNK = 1 << 20  # elements drawn with one generator (on one thread) at a time
POSITIVE_BELOW = float(np.nextafter(np.float32(2.0), np.float32(0.0)))  # "positive" < 2
KERNEL_DISTRIBUTIONS = ("normal", "positive", "heavy")  # f32 buffers of set t: [t % 3]


def seed_key(*parts: int) -> list[int]:
    """Non-negative entropy for numpy's SeedSequence, from seeds and indices."""
    return [part % 2**64 for part in parts]


def fill_random(out: torch.Tensor, kind: str, key: list[int]) -> None:
    """Fill the contiguous float32 tensor `out` with standard normal (`kind` "normal") or
    uniform [-1, 1) ("uniform") samples; the values depend on `key` alone. On a GPU one
    generator seeded from `key` fills it. On the CPU each DRAW_CHUNK elements have a
    torch.Generator of their own, seeded from `key` and the chunk's index, and the
    chunks are drawn on a pool of threads (PyTorch's CPU generators are sequential), so
    the values never depend on how many threads drew them."""
    def sample(part: torch.Tensor, seed: int) -> None:
        generator = torch.Generator(part.device).manual_seed(seed)
        if kind == "normal":
            part.normal_(generator=generator)
        else:
            part.uniform_(-1.0, 1.0, generator=generator)

    if out.device.type != "cpu":
        sample(out, int(np.random.SeedSequence(key).generate_state(1)[0]))
        return
    parts = out.view(-1).split(DRAW_CHUNK)
    seeds = np.random.SeedSequence(key).generate_state(len(parts))  # uint32 each

    def fill(i: int) -> None:
        sample(parts[i], int(seeds[i]))

    threads = min(len(parts), torch.get_num_threads())
    if threads <= 1:
        for i in range(len(parts)):
            fill(i)
        return
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fill, range(len(parts))))


def draw(distribution: str, key: list[int], shape: tuple,
         device: torch.device | str = "cpu") -> torch.Tensor:
    """Float32 samples of one distribution, the same for the same `key` (and device)."""
    z = torch.empty(shape, dtype=torch.float32, device=device)
    if distribution == "heavy":  # Student-t with 2 degrees of freedom, clipped
        # by its inverse CDF: for w = 2 F(t) - 1, uniform in (-1, 1),
        # t = w * sqrt(2 / (1 - w^2)) = sqrt(2) * sinh(atanh(w)), computed in place
        fill_random(z, "uniform", key)
        z.atanh_().sinh_().mul_(math.sqrt(2.0))
        return z.clamp_(-HEAVY_TAIL_CLIP, HEAVY_TAIL_CLIP)
    if distribution == "positive":  # uniform in [0.1, 2): logs, roots, divisors
        fill_random(z, "uniform", key)
        return z.mul_(0.95).add_(1.05).clamp_(max=POSITIVE_BELOW)
    fill_random(z, "normal", key)
    if distribution.startswith("normal*"):
        z.mul_(float(distribution.removeprefix("normal*")))
    return z


def draw_integers(high: int, key: list[int], shape: tuple) -> torch.Tensor:
    """Integers uniform in [0, high), as int32, the same for the same `key`."""
    u = torch.empty(shape, dtype=torch.float32)
    fill_random(u, "uniform", key)
    return u.add_(1.0).mul_(high / 2).floor_().clamp_(0, high - 1).to(torch.int32)


def kernel_inputs(operands: list[tuple[int, str]], t: int, seed: int) -> list[np.ndarray]:
    """Input set `t` of one kernel: random contents for buffers of (element count, dtype):
    f32 of KERNEL_DISTRIBUTIONS[t % 3] (f16 and bf16 the same, narrowed), i32 in [0, 8),
    bool 0 or 1. A set can be drawn alone, so that a check over several sets holds one at
    a time."""
    kind = KERNEL_DISTRIBUTIONS[t % len(KERNEL_DISTRIBUTIONS)]
    arrays = []
    for i, (numel, dtype) in enumerate(operands):
        key, shape = seed_key(seed, t, i), (max(1, numel),)
        if dtype in ("f32", "f16", "bf16"):
            arrays.append(to_storage(draw(kind, key, shape).numpy(), dtype))
        else:
            ints = draw_integers(8 if dtype == "i32" else 2, key, shape).numpy()
            arrays.append(ints.astype(numpy_type(dtype), copy=False))
    return arrays
