// Inclusive scan of x[A, R, B] along R, one workgroup per row (a, b). The row is
// walked in chunks of WG * ITEMS elements: each invocation scans its ITEMS consecutive
// elements serially, a scan of the invocations' totals in workgroup memory (SCAN_SUMS)
// gives each invocation the total of the items before its own, and the total of the
// chunks already done is carried into the next one. The per-item code is generated
// unrolled into registers (x<k>: the leaves, s<k>: the running values): every item is
// loaded first, at its index clamped into the row, so that the ITEMS loads are in
// flight together rather than each behind its bounds test, and no array indexed by a
// loop counter can land in local memory. `combine` needs to be associative only:
// operands always stay in row order.
// Slots: BINDINGS, FUNCTIONS (load_x, leaf, combine, epilogue), SCAN_SUMS
// (scan_sums.wgsl, or scan_rake.wgsl with SUMS 1), WG (a power of two), ITEMS, R, B,
// ROWS (A * B), GRID_X, ACC (accumulator type), INIT (its identity), LOADS, RUNS,
// STORES (the unrolled items).
$BINDINGS
$FUNCTIONS
$SCAN_SUMS

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = i32(wid.x) + i32(wid.y) * $GRID_X;
    let li = i32(lid);
    let live = row < $ROWS;  // workgroups past the last row still meet every barrier
    let a = min(row, $ROWS - 1) / $B;  // their loads stay in the tensor
    let b = min(row, $ROWS - 1) % $B;
    var carry: $ACC = $INIT;
    for (var base = 0; base < $R; base += $WG * $ITEMS) {
        let r0 = base + li * $ITEMS;
$LOADS
        var run: $ACC = $INIT;
$RUNS
        let scanned = scan_sums(li, run);
        let prefix = combine(carry, scanned.before);
$STORES
        carry = combine(carry, scanned.total);
    }
}
