"""The put family (GraphBuilder.put: index_copy, index_put on one dim at run-time
positions): a kernel over the new slices alone, storing each element into the output's
buffer at its slice's position; knobs, space, generator (its step,
kernels/put_step.wgsl, in the elementwise template)."""

from __future__ import annotations

import math

from ..codegen.codegen import Emitter, Index, pack_pair, to_buffer
from ..dtypes import fills_words, is_packed
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
    _, _, v = tnode.inputs
    dim = tnode.attrs["dim"]
    pair = _pair(tnode)
    knobs = merge_knobs(put_knobs(v.numel // pair), knobs)
    wg, ept = check_wg(knobs), knobs["EPT"]
    require(isinstance(ept, int) and ept >= 1, knobs, "EPT must be a positive integer")
    functions = _put_functions(src, materialized, tnode, "")
    k = v.shape[dim]
    if k > 1:
        functions += snippet("latest").substitute(K=k) + "\n"
    write = _write(src, tnode, "out", "")
    steps = v.numel // pair
    threads = math.ceil(steps / ept)
    grid, row = grid_1d(threads, wg)
    body = _put_step(tnode, "", pair, write, "latest(k, p)" if k > 1 else "true")
    return "elementwise", dict(functions=functions, WG=wg, ROW=row, THREADS=threads, EPT=ept,
                               STEPS=steps, BODY=body), grid, knobs


def _pair(tnode) -> int:
    """The elements a step of put `tnode` stores: 2 into a packed half buffer (one word),
    else 1; a CompileError where a packed buffer's slices would start inside a word."""
    out = tnode.out
    inner = math.prod(out.shape[tnode.attrs["dim"] + 1:])
    if not fills_words(out.stored, inner):
        raise CompileError(f"a put into a packed half buffer ({out.stored}) of slices of "
                           f"{inner} elements, an odd count, would write half words")
    return 2 if is_packed(out.stored) else 1


def _write(src, tnode, buf: str, prefix: str) -> str:
    """The store of step q's element e (a packed buffer: its word, e and e + 1) at
    element d of `buf`, which holds put `tnode`'s value; the new element(s) from
    `{prefix}load_v`, rounded to nearest even into a packed half word (kernels/half.wgsl)."""
    load = f"{prefix}load_v"
    if is_packed(tnode.out.stored):
        src.helpers.add("half")
        return f"{buf}[d >> 1u] = {pack_pair(f'{load}(e)', f'{load}(e + 1)', tnode.out.stored)};"
    return f"{buf}[d] = {to_buffer(f'{load}(e)', tnode.out.dtype)};"


def _put_functions(src, materialized, tnode, prefix: str) -> str:
    """A put's `load_index`, `load_v` (its new slices at a flat index) and `position`,
    their names prefixed with `prefix`."""
    _, index, v = tnode.inputs
    em = Emitter(src, materialized)
    functions = em.function(f"{prefix}load_index", ["k: i32"], "i32",
                            em.value(index, Index(index.shape, flat="k")))
    em = Emitter(src, materialized)
    functions += em.function(f"{prefix}load_v", ["gi: i32"], v.dtype,
                             em.value(v, Index(v.shape, flat="gi")))
    j = tnode.out.shape[tnode.attrs["dim"]]
    return functions + snippet("put_position").substitute(J=j, P=prefix) + "\n"


def _put_step(tnode, prefix: str, pair: int, write: str, latest: str) -> str:
    """put_step.wgsl for put node `tnode`: the store of step q."""
    _, _, v = tnode.inputs
    dim = tnode.attrs["dim"]
    inner = math.prod(tnode.out.shape[dim + 1:])
    return snippet("put_step").substitute(PAIR=pair, K=v.shape[dim], J=tnode.out.shape[dim],
                                          INNER=inner, WRITE=write, LATEST=latest, P=prefix)


def fused_puts(src, materialized) -> str:
    """The functions that store the new slices of the puts a kernel read inline
    (src.puts: codegen.Emitter._put, each of one slice, into a state bound read_write,
    KernelSource.write): `store_puts(first, stride)`, which an invocation calls with its
    index among all of the kernel's and their count, stores step q of each put for
    q = first, first + stride, ...; so every new element is stored once, by one
    invocation, whatever the kernel's grid. A packed half state takes a word a step, the
    new slice's two elements there (its slices fill whole words, `_pair`: no word holds
    both a new element and an old one the kernel reads). "" when the kernel read no put.
    The template that calls it reads the slices it stores through the inline put alone,
    never from the state (the new element comes from `load_v`, rounded as stored)."""
    functions, calls = "", []
    for i, node in enumerate(src.puts):  # (a put's functions may not read another put)
        prefix, state = f"put{i}_", src.write(node.out)
        pair = _pair(node)
        functions += _put_functions(src, materialized, node, prefix)
        write = _write(src, node, state, prefix)
        body = _put_step(node, prefix, pair, write, "true").replace("\n" + " " * 12, "\n    ")
        functions += (f"fn {prefix}store(q: i32) {{\n    {body}\n}}\n")
        steps = node.inputs[2].numel // pair
        calls.append(f"    for (var q = first; q < {steps}; q += stride) {{ {prefix}store(q); }}")
    if not calls:
        return ""
    return functions + "fn store_puts(first: i32, stride: i32) {\n" + "\n".join(calls) + "\n}\n"
