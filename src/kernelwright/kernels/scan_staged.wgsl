// Inclusive scan of x[A, R, B] along R, one workgroup per row (a, b), with the row's
// elements staged in workgroup memory (the scan template's STAGE 1 setting; scan.wgsl
// is STAGE 0, scan_regs.wgsl STAGE 2). The row is walked in chunks of WG * ITEMS
// elements. A chunk is loaded with invocation i taking elements i, i + WG, i + 2 WG,
// ... (adjacent invocations read adjacent elements when B = 1), each invocation then
// scans its ITEMS consecutive staged elements in place, a scan of the invocations'
// totals (SCAN_SUMS) gives each the total before its own, and the chunk is stored the
// way it was loaded. The staged chunk is padded by one slot every 32 (PAD), so that
// invocations reading ITEMS apart hit different memory banks. No array is indexed by a
// loop counter outside workgroup memory. `combine` needs to be associative only:
// operands always stay in row order.
// Slots: BINDINGS, FUNCTIONS (load_x, leaf, combine, epilogue), SCAN_SUMS
// (scan_sums.wgsl, or scan_rake.wgsl with SUMS 1), WG (a power of two), ITEMS, CHUNK
// (= WG * ITEMS), TILE (CHUNK plus its padding), R, B, ROWS (A * B), GRID_X, ACC
// (accumulator type), INIT (its identity), LEAF (the accumulator of element r), STORE.
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
    let a = row / $B;
    let b = row % $B;
    var carry: $ACC = $INIT;
    for (var base = 0; base < $R; base += $CHUNK) {
        for (var k = 0; k < $ITEMS; k += 1) {
            let c = k * $WG + li;
            let r = base + c;
            var v: $ACC = $INIT;
            if (live && r < $R) {
                v = $LEAF;
            }
            tile[pad(c)] = v;
        }
        workgroupBarrier();
        var run: $ACC = $INIT;
        for (var k = 0; k < $ITEMS; k += 1) {
            let c = pad(li * $ITEMS + k);
            run = combine(run, tile[c]);
            tile[c] = run;
        }
        let scanned = scan_sums(li, run);
        let prefix = combine(carry, scanned.before);
        for (var k = 0; k < $ITEMS; k += 1) {
            let c = pad(li * $ITEMS + k);
            tile[c] = combine(prefix, tile[c]);
        }
        workgroupBarrier();
        for (var k = 0; k < $ITEMS; k += 1) {
            let c = k * $WG + li;
            let r = base + c;
            if (live && r < $R) {
                let gi = (a * $R + r) * $B + b;
                let acc = tile[pad(c)];
                $STORE
            }
        }
        carry = combine(carry, scanned.total);
        workgroupBarrier();  // every store read its slot before the next chunk loads
    }
}
