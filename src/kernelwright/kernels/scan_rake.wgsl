// The scan of the invocations' totals in three barriers (the scan template's SUMS 1;
// scan_sums.wgsl, a tree of 2 log2(WG) + 4 barriers, is SUMS 0), with the same
// contract: every invocation calls it with its own total `run` (in uniform control
// flow: it meets every barrier); it returns the total of the invocations before it and
// the workgroup's total. The totals are raked: G invocations each scan S consecutive
// totals serially in place (all S read before any is written, so that the reads are in
// flight together), then every invocation folds the G rakers' totals itself (the same
// slot read by every invocation at once: a broadcast) and takes those of the groups
// before its own. S * G = WG, S about its square root: at WG 256, 16 reads, writes
// and folds per raker, then 16 reads and folds per invocation, against the tree's 20
// barriers, each with a read and a fold between them. `sums` has one padding slot per S
// totals, so that the rakers, S slots apart, hit different memory banks. `combine`
// needs to be associative only: operands always stay in invocation order.
// Slots: ACC, INIT, WG (a power of two), S, G, SLOTS (= WG + G), RAKE (the raker's
// unrolled scan of its S totals, from slot `first`), FOLD (the unrolled fold of the G
// rakers' totals into `total`, `before` taken at the invocation's own group).
var<workgroup> sums: array<$ACC, $SLOTS>;
var<workgroup> groups: array<$ACC, $G>;

struct ScanSums { before: $ACC, total: $ACC }

fn scan_sums(li: i32, run: $ACC) -> ScanSums {
    let own = li + li / $S;
    sums[own] = run;
    workgroupBarrier();
    if (li < $G) {
        let first = li * ($S + 1);
        var acc: $ACC = $INIT;
$RAKE
        groups[li] = acc;
    }
    workgroupBarrier();
    let group = li / $S;
    var total: $ACC = $INIT;
    var before: $ACC = $INIT;
$FOLD
    before = combine(before, sums[own]);
    workgroupBarrier();  // the next call writes sums and groups again
    return ScanSums(before, total);
}
