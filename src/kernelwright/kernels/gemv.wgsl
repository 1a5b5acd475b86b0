// Matrix-vector product for few rows: out[b, m, n] = sum_k A(b, m, k) * B(b, k, n) for
// M <= GEMV_MAX_M rows (kernels/gemv.py). A workgroup owns BN output columns of all M
// rows and the whole of K: its WG = CT x KS invocations are CT column groups times KS
// K slices. K is walked in chunks of KC: the chunk of A (M x KC, the loader's prologue
// computed once per element) is staged in workgroup memory as vec4 along K; then each
// invocation takes every KS-th quad of 4 k of the chunk, multiplying the rows' staged
// values by B's 16-byte fragments (`frag_b`: 4 columns of one k where B is contiguous
// along N, layout N; 4 k of one column where it is contiguous along K, layout K). The
// KS partial sums of a column group are then added by a tree in workgroup memory, one
// row at a time, and the first slice stores them through `epilogue`.
// Slots: BINDINGS, FUNCTIONS, SHARED, WG, GX (workgroups along x), GUARD (a workgroup
// past the last column block returns), BN, SLICE and COLUMN (the invocation's K slice
// and column group), LIVE (its column group holds a column), ACCUMULATORS, K, KC, QC
// (= KC / 4), KS, STAGED (= M * QC), LOAD_A (fills `a`, A's quad at row m, k), STEP (one
// quad: k, q), REDUCE (the tree and the stores, per row), STATISTICS (a block computing
// the statistics of A's rows that its loader reads into workgroup memory, or nothing).
$BINDINGS
$FUNCTIONS
$SHARED

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let lin = i32(li);
    let blk = i32(wid.y) * $GX + i32(wid.x);
$GUARD
    let b = i32(wid.z);
$STATISTICS
    let n0 = blk * $BN;
    let s = $SLICE;
    let c = $COLUMN;
    let live = $LIVE;
$ACCUMULATORS
    for (var k0 = 0; k0 < $K; k0 += $KC) {
        workgroupBarrier();
        for (var i = lin; i < $STAGED; i += $WG) {
            let m = i / $QC;
            let k = k0 + (i % $QC) * 4;
            var a = vec4<f32>(0.0);
$LOAD_A
            tile_a[i] = a;
        }
        workgroupBarrier();
        let qend = select(0, min($QC, ($K - k0 + 3) / 4), live);
        for (var q = s; q < qend; q += $KS) {
            let k = k0 + q * 4;
$STEP
        }
    }
$REDUCE
}
