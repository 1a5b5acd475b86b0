// Sort in workgroup memory, one workgroup per chunk of P (key, index) pairs of a row
// (a, b) of x[A, R, B]: the whole row padded to P (a power of two; CHUNKS 1), or, for a
// row longer than one workgroup holds (lower/sorting.py), each of its CHUNKS chunks of
// P. LOAD places pair r of the chunk (element g = c0 + r of the row) in keys[r],
// idxs[r]: from x's values (sort_load_values.wgsl; padding past R sorts last) or from
// pairs an earlier pass stored (sort_load_pairs.wgsl). Blocks of `size` from FIRST up
// to P are sorted alternately up and down by a bitonic network (FIRST 2: a whole sort;
// FIRST P: only the last merge, for a chunk that is already a bitonic sequence), and
// STORES writes the result (sort_store_first.wgsl: the indices of the first K;
// sort_store_pairs.wgsl: the pairs). A key is a u32 whose unsigned order is the order
// of the values (key_f32: NaN the largest, -0 equal to +0; key_i32), inverted by FLIP
// ("~") for a descending sort; ties go to the lower index, so the sort is stable.
// Slots: BINDINGS, FUNCTIONS (load_x, epilogue), WG, P, FIRST, CHUNKS, B, GROUPS
// (A * B * CHUNKS), GRID_X, LOAD, STORES.
$BINDINGS
$FUNCTIONS

fn key_f32(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return 0xffffffffu;  // every NaN, above +inf
    }
    if ((bits & 0x7fffffffu) == 0u) {
        return 0x80000000u;  // -0 as +0
    }
    return select(bits | 0x80000000u, ~bits, (bits & 0x80000000u) != 0u);
}

fn key_i32(v: i32) -> u32 {
    return bitcast<u32>(v) ^ 0x80000000u;
}

var<workgroup> keys: array<u32, $P>;
var<workgroup> idxs: array<i32, $P>;

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let w = i32(wid.x) + i32(wid.y) * $GRID_X;
    let li = i32(lid);
    let live = w < $GROUPS;  // workgroups past the last chunk still meet every barrier
    let wl = min(w, $GROUPS - 1);  // their loads stay in the tensor
    let row = wl / $CHUNKS;
    let c0 = (wl % $CHUNKS) * $P;  // the chunk's first element in the row
    let a = row / $B;
    let b = row % $B;
    for (var r = li; r < $P; r += $WG) {
        let g = c0 + r;
$LOAD
    }
    workgroupBarrier();
    // Blocks of `size` sorted alternately up and down, merged by compare-exchanges of
    // pairs `gap` apart: P / 2 pairs per step, WG at a time.
    for (var size = $FIRST; size <= $P; size = size * 2) {
        for (var gap = size / 2; gap > 0; gap = gap / 2) {
            for (var t = li; t < $P / 2; t += $WG) {
                let i = (t / gap) * 2 * gap + t % gap;
                let j = i + gap;
                let ki = keys[i];
                let kj = keys[j];
                let ii = idxs[i];
                let ij = idxs[j];
                let after = ki > kj || (ki == kj && ii > ij);  // pair i sorts after pair j
                if (after == ((i & size) == 0)) {
                    keys[i] = kj;
                    keys[j] = ki;
                    idxs[i] = ij;
                    idxs[j] = ii;
                }
            }
            workgroupBarrier();
        }
    }
    if (live) {
$STORES
    }
}
