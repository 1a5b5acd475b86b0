"""Which temporaries share a buffer, from every value's span (the kernel writing it to
its last reader): schedule.share_buffers (greedy by size), reuse_in_order, and
temp_buffers, the one of them that takes fewer bytes."""

import random

from kernelwright.ir.ir import Value
from kernelwright.schedule.schedule import reuse_in_order, share_buffers, temp_buffers


def _size(v: Value) -> tuple[int, str]:
    return v.numel * 4, v.dtype


def _total(tenants: list[list[Value]]) -> int:
    return sum(max(_size(v)[0] for v in t) for t in tenants)


def test_large_values_placed_first_keep_a_long_small_value_out_of_their_buffer():
    """A (100 bytes) is read by kernel 1; S (48) lives from kernel 2 to 9; B (100) from
    3 to 4. Reusing freed buffers in kernel order gives S A's buffer and B a new one
    (200 bytes); placed largest first, B takes A's buffer and S one of its own (148)."""
    a, s, b = Value((25,), "f32"), Value((12, 1), "f32"), Value((5, 5), "f32")
    tenants = share_buffers([(a, 0, 1), (s, 2, 9), (b, 3, 4)], _size)
    assert tenants == [[a, b], [s]]
    assert sum(_size(t[0])[0] for t in tenants) == 148
    assert _total(reuse_in_order([(a, 0, 1), (s, 2, 9), (b, 3, 4)], _size)) == 200
    assert _total(temp_buffers([(a, 0, 1), (s, 2, 9), (b, 3, 4)], _size)) == 148


def test_tenants_of_a_buffer_never_overlap_and_agree_in_type():
    rng = random.Random(0)
    spans = []
    for _ in range(300):
        first = rng.randrange(100)
        v = Value((rng.choice([1, 3, 64, 1000, 4096]),), rng.choice(["f32", "i32"]))
        spans.append((v, first, first + rng.randrange(30)))
    span = {id(v): (f, last) for v, f, last in spans}
    for share in (share_buffers, reuse_in_order):
        tenants = share(spans, _size)
        assert sorted(id(v) for t in tenants for v in t) == sorted(span)
        for t in tenants:
            assert len({v.dtype for v in t}) == 1
            held = sorted(span[id(v)] for v in t)
            assert all(a[1] < b[0] for a, b in zip(held, held[1:]))
        assert len(tenants) < len(spans) // 2  # they do share
    assert all(_size(v)[0] <= _size(t[0])[0]  # greedy by size: the first is the largest
               for t in share_buffers(spans, _size) for v in t)
    assert _total(temp_buffers(spans, _size)) == min(
        _total(share_buffers(spans, _size)), _total(reuse_in_order(spans, _size)))
