// Sort of each row of x[A, R, B] along R, one workgroup per row (a, b), in workgroup
// memory: the row's (key, index) pairs, padded to P (a power of two) with pairs that
// sort last, go through a bitonic sorting network, and the indices of the first K
// pairs are stored (out[a, k, b]). A key is a u32 whose unsigned order is the order
// of the values (key_f32: NaN the largest, -0 equal to +0; key_i32), inverted by FLIP
// ("~") for a descending sort; ties go to the lower index, so the sort is stable.
// Slots: BINDINGS, FUNCTIONS (load_x, epilogue), WG, P, R, K, B, ROWS (A * B), GRID_X,
// KEY (key_f32 or key_i32), FLIP ("" or "~"), STORE.
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
    let row = i32(wid.x) + i32(wid.y) * $GRID_X;
    let li = i32(lid);
    let live = row < $ROWS;  // workgroups past the last row still meet every barrier
    let a = min(row, $ROWS - 1) / $B;  // their loads stay in the tensor
    let b = min(row, $ROWS - 1) % $B;
    for (var r = li; r < $P; r += $WG) {
        var key = 0xffffffffu;  // padding: after every element (its index is larger)
        if (r < $R) {
            key = $FLIP$KEY(load_x(a, r, b));
        }
        keys[r] = key;
        idxs[r] = r;
    }
    workgroupBarrier();
    // Blocks of `size` sorted alternately up and down, merged by compare-exchanges of
    // pairs `gap` apart: P / 2 pairs per step, WG at a time.
    for (var size = 2; size <= $P; size = size * 2) {
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
        for (var r = li; r < $K; r += $WG) {
            let gi = (a * $K + r) * $B + b;
            let acc = idxs[r];
            $STORE
        }
    }
}
