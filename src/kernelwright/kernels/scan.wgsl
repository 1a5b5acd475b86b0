// Inclusive scan of x[A, R, B] along R, one workgroup per row (a, b). The row is
// walked in chunks of WG * ITEMS elements: each invocation scans its ITEMS consecutive
// elements serially, a work-efficient (Blelloch) scan of the invocations' totals in
// workgroup memory gives each invocation the total of the items before its own, and
// the total of the chunks already done is carried into the next one. `combine` needs
// to be associative only: operands always stay in row order.
// Slots: BINDINGS, FUNCTIONS (load_x, leaf, combine, epilogue), SCAN_SUMS
// (scan_sums.wgsl), WG (a power of two), ITEMS, R, B, ROWS (A * B), GRID_X, ACC (accumulator type), INIT (its identity), LEAF
// (the accumulator of element r), STORE.
$BINDINGS
$FUNCTIONS
$SCAN_SUMS

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = i32(wid.x) + i32(wid.y) * $GRID_X;
    let li = i32(lid);
    let live = row < $ROWS;  // workgroups past the last row still meet every barrier
    let a = row / $B;
    let b = row % $B;
    var carry: $ACC = $INIT;
    for (var base = 0; base < $R; base += $WG * $ITEMS) {
        var items: array<$ACC, $ITEMS>;
        var run: $ACC = $INIT;
        for (var k = 0; k < $ITEMS; k += 1) {
            let r = base + li * $ITEMS + k;
            if (live && r < $R) {
                run = combine(run, $LEAF);
            }
            items[k] = run;
        }
        let scanned = scan_sums(li, run);
        let prefix = combine(carry, scanned.before);
        for (var k = 0; k < $ITEMS; k += 1) {
            let r = base + li * $ITEMS + k;
            if (live && r < $R) {
                let gi = (a * $R + r) * $B + b;
                let acc = combine(prefix, items[k]);
                $STORE
            }
        }
        carry = combine(carry, scanned.total);
    }
}
