// Reduction of x[O, R] over R, one workgroup per output row: each invocation folds a
// strided slice of the row, then a tree in workgroup memory combines the partials.
// Used when rows are long. Slots: BINDINGS, FUNCTIONS (load_x, epilogue), WG,
// O, R, ACC (accumulator type), INIT, COMBINE (fn combine), LEAF (acc from one
// element), FINAL (the accumulator's value), GRID_X, STORE.
$BINDINGS
$FUNCTIONS
var<workgroup> partial: array<$ACC, $WG>;

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let o = i32(wid.x) + i32(wid.y) * $GRID_X;
    var acc: $ACC = $INIT;
    if (o < $O) {
        for (var r = i32(li); r < $R; r += $WG) {
            acc = combine(acc, $LEAF);
        }
    }
    partial[li] = acc;
    workgroupBarrier();
    for (var s = ${WG}u / 2u; s > 0u; s = s / 2u) {
        if (li < s) {
            partial[li] = combine(partial[li], partial[li + s]);
        }
        workgroupBarrier();
    }
    if (li == 0u && o < $O) {
        let gi = o;
        let acc = partial[0];
        $STORE
    }
}
