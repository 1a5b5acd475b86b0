"""The put family (GraphBuilder.put: index_copy, index_put on one dim at run-time
positions): a kernel over the new slices alone, storing each element into the output's
buffer at its slice's position; knobs, space, generator (its step,
kernels/put_step.wgsl, in the elementwise template)."""

from __future__ import annotations

import math

from ..codegen.codegen import Emitter, Index, pack_pair, to_buffer
from ..dtypes import is_packed
from ..ir.ir import CompileError, Value
from ..options import CompileOptions
from .common import check_wg, grid_1d, merge_knobs, require, snippet


def put_knobs(numel: int) -> dict:
    """256 invocations per workgroup, one step each (an element, or a packed word's two;
    EPT 4 from 2^20 steps, as the elementwise kernels)."""
    return {"WG": 256, "EPT": 4 if numel >= 1 << 20 else 1}


def put_space(numel: int) -> list[dict]:
    return [{"WG": wg, "EPT": ept} for wg in (64, 256) for ept in (1, 2, 4)
            if ept == 1 or numel >= ept * wg]


def _put(src, materialized, out: Value, tnode, knobs, options: CompileOptions):
    """The put's kernel: its positions (`load_index`) and new slices (`load_v`, with any
    elementwise prologue fused: a RoPE's rotation of the new keys) read through loaders;
    the tensor put into (input 0) is never read: the output's buffer holds it. A packed
    half output takes whole words, two elements of a slice each (slices of an even
    count of elements; capture gives others an f32 value, narrowed after)."""
    _, index, v = tnode.inputs
    dim = tnode.attrs["dim"]
    inner = math.prod(out.shape[dim + 1:])
    pair = 2 if is_packed(out.stored) else 1
    if pair == 2 and inner % 2:
        raise CompileError(f"a put into a packed half buffer ({out.stored}) of slices of "
                           f"{inner} elements, an odd count, would write half words")
    knobs = merge_knobs(put_knobs(v.numel // pair), knobs)
    wg, ept = check_wg(knobs), knobs["EPT"]
    require(isinstance(ept, int) and ept >= 1, knobs, "EPT must be a positive integer")
    em = Emitter(src, materialized)
    functions = em.function("load_index", ["k: i32"], "i32",
                            em.value(index, Index(index.shape, flat="k")))
    em = Emitter(src, materialized)
    functions += em.function("load_v", ["gi: i32"], v.dtype, em.value(v, Index(v.shape,
                                                                              flat="gi")))
    k, j = v.shape[dim], out.shape[dim]
    functions += snippet("put_position").substitute(J=j) + "\n"
    if k > 1:
        functions += snippet("latest").substitute(K=k) + "\n"
    if pair == 2:
        src.helpers.add("half")
        write = f"out[d >> 1u] = {pack_pair('load_v(e)', 'load_v(e + 1)', out.stored)};"
    else:
        write = f"out[d] = {to_buffer('load_v(e)', out.dtype)};"
    steps = v.numel // pair
    threads = math.ceil(steps / ept)
    grid, row = grid_1d(threads, wg)
    body = snippet("put_step").substitute(PAIR=pair, K=k, J=j, INNER=inner, WRITE=write,
                                          LATEST="latest(k, p)" if k > 1 else "true")
    return "elementwise", dict(functions=functions, WG=wg, ROW=row, THREADS=threads, EPT=ept,
                               STEPS=steps, BODY=body), grid, knobs
