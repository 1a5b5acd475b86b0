"""schedule.share_buffers: which temporaries share a buffer, from every value's span
(the kernel writing it to its last reader)."""

import random

from kernelwright.ir.ir import Value
from kernelwright.schedule.schedule import share_buffers


def _size(v: Value) -> tuple[int, str]:
    return v.numel * 4, v.dtype


def test_large_values_placed_first_keep_a_long_small_value_out_of_their_buffer():
    """A (100 bytes) is read by kernel 1; S (48) lives from kernel 2 to 9; B (100) from
    3 to 4. Reusing freed buffers in kernel order gives S A's buffer and B a new one
    (200 bytes); placed largest first, B takes A's buffer and S one of its own (148)."""
    a, s, b = Value((25,), "f32"), Value((12, 1), "f32"), Value((5, 5), "f32")
    tenants = share_buffers([(a, 0, 1), (s, 2, 9), (b, 3, 4)], _size)
    assert tenants == [[a, b], [s]]
    assert sum(_size(t[0])[0] for t in tenants) == 148


def test_tenants_of_a_buffer_never_overlap_and_agree_in_type():
    rng = random.Random(0)
    spans = []
    for _ in range(300):
        first = rng.randrange(100)
        v = Value((rng.choice([1, 3, 64, 1000, 4096]),), rng.choice(["f32", "i32"]))
        spans.append((v, first, first + rng.randrange(30)))
    span = {id(v): (f, last) for v, f, last in spans}
    tenants = share_buffers(spans, _size)
    assert sorted(id(v) for t in tenants for v in t) == sorted(span)
    for t in tenants:
        assert len({v.dtype for v in t}) == 1
        assert all(_size(v)[0] <= _size(t[0])[0] for v in t)  # the first is the largest
        held = sorted(span[id(v)] for v in t)
        assert all(a[1] < b[0] for a, b in zip(held, held[1:]))
    assert len(tenants) < len(spans) // 2  # they do share
