// The scan of the invocations' totals, shared by scan.wgsl, scan_staged.wgsl and
// scan_regs.wgsl (the scan template's SUMS 0; scan_rake.wgsl is SUMS 1): a
// work-efficient (Blelloch) scan in workgroup memory, 2 log2(WG) + 4 barriers. Every
// invocation calls it with its own total `run` (in uniform control flow: it meets
// every barrier); it returns the total of the invocations before it and the
// workgroup's total. `combine` needs to be associative only: operands always stay in
// invocation order.
// Slots: ACC, INIT, WG (a power of two).
var<workgroup> sums: array<$ACC, $WG>;

struct ScanSums { before: $ACC, total: $ACC }

fn scan_sums(li: i32, run: $ACC) -> ScanSums {
    sums[li] = run;
    workgroupBarrier();
    // Up-sweep: sums[i] becomes the total of the 2d invocations ending at i.
    for (var d = 1; d < $WG; d *= 2) {
        let i = (li + 1) * 2 * d - 1;
        if (i < $WG) {
            sums[i] = combine(sums[i - d], sums[i]);
        }
        workgroupBarrier();
    }
    let total = sums[$WG - 1];
    workgroupBarrier();
    if (li == 0) {
        sums[$WG - 1] = $INIT;
    }
    workgroupBarrier();
    // Down-sweep: sums[i] becomes the total of the invocations before i.
    for (var d = $WG / 2; d >= 1; d /= 2) {
        let i = (li + 1) * 2 * d - 1;
        if (i < $WG) {
            let left = sums[i - d];
            sums[i - d] = sums[i];
            sums[i] = combine(sums[i], left);
        }
        workgroupBarrier();
    }
    let before = sums[li];
    workgroupBarrier();  // the next call writes sums again
    return ScanSums(before, total);
}
