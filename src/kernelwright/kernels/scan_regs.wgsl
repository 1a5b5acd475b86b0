// Inclusive scan of x[A, R, B] along R, one workgroup per row (a, b), with the row's
// elements kept in registers (the scan template's STAGE 2; scan.wgsl is STAGE 0,
// scan_staged.wgsl STAGE 1). The row is walked in chunks of WG * ITEMS elements, cut
// into groups of VEC consecutive elements: invocation i holds the groups i, i + WG,
// i + 2 WG, ... of the chunk (V = ITEMS / VEC of them), so that adjacent invocations
// read and write adjacent groups when B = 1 (with VEC 4 and rows of a multiple of 4,
// 16 bytes at a time: stored through a vec4 view of `out`, and loaded through one of
// the input's buffer where x is a plain buffer read: kernels/scan._scan_regs). Each
// invocation scans its groups in registers, and only the groups' totals go through
// workgroup memory: staged in `tile`, each invocation scans V consecutive ones
// serially, the scan of the invocations' totals (SCAN_SUMS) gives it the total before
// them, and it writes back the total before each of its V groups, which their holders
// then fold into their elements. The workgroup memory traffic and the serial work are
// 1 / VEC of STAGE 1's and the elements never leave registers, so a larger chunk fits
// the same 16 KiB (VEC 4 and ITEMS 32: rows of 8192 in one pass at WG 256, with every
// load of the row in flight before the first barrier). Every item is loaded first, at
// its index clamped into the row (unless the chunks tile the row), and the per-item
// code is generated unrolled, so no array indexed by a loop counter can land in local
// memory. `tile` is padded by one slot every 32 (pad), so that invocations reading V
// apart hit different memory banks. `combine` needs to be associative only: operands
// always stay in row order.
// Slots: BINDINGS, FUNCTIONS (load_x, leaf, combine, epilogue), SCAN_SUMS
// (scan_sums.wgsl or scan_rake.wgsl), WG (a power of two), CHUNK (= WG * ITEMS),
// TILE (WG * V plus its padding), R, B, ROWS (A * B), GRID_X, ACC (accumulator type),
// INIT (its identity), SETUP (per row: the vec4 view's offset), LOADS (the leaves
// x<j>_<e> of the groups' elements, from group starts r<j>), RUNS (their running
// values s<j>_<e>, each group's total staged), TOTALS (the scan of the invocation's V
// staged totals: its total `run`, the totals before each, u<k>), PREFIXES (those
// written back), STORES (each group's elements with the total before the group), NEXT
// (the barrier before the next chunk stages its totals; none where one chunk covers
// the row).
$BINDINGS
$FUNCTIONS
$SCAN_SUMS
var<workgroup> tile: array<$ACC, $TILE>;

fn pad(i: i32) -> i32 {
    return i + (i >> 5u);
}

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = i32(wid.x) + i32(wid.y) * $GRID_X;
    let li = i32(lid);
    let live = row < $ROWS;  // workgroups past the last row still meet every barrier
    let a = min(row, $ROWS - 1) / $B;  // their loads stay in the tensor
    let b = min(row, $ROWS - 1) % $B;
$SETUP
    var carry: $ACC = $INIT;
    for (var base = 0; base < $R; base += $CHUNK) {
$LOADS
$RUNS
        workgroupBarrier();
$TOTALS
        let scanned = scan_sums(li, run);
        let prefix = combine(carry, scanned.before);
$PREFIXES
        workgroupBarrier();
$STORES
        carry = combine(carry, scanned.total);
$NEXT
    }
}
