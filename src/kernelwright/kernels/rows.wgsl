// Row kernel: O rows of R elements, WG invocations per workgroup, TPR per row (RPW =
// WG / TPR rows per workgroup; ORDER "row" puts a row's invocations side by side, "col"
// the rows). Each pass over the row (generated in BODY) folds its elements into one
// accumulator per invocation, then a tree in workgroup memory (partial_<j>) combines
// the row's TPR accumulators; `finish_<j>` turns the total into the row's value rv<j>
// (the reduction's epilogue), which later passes read. The last pass stores either the
// elementwise `epilogue` over the row's elements or the last row value. Buffers read
// at the row's own elements (lanes) are loaded VEC at a time, and kept in registers
// when there is more than one pass.
// Slots: BINDINGS, FUNCTIONS, SHARED, WG, TPR, RPW, O, GRID_X, SLOT (the invocation's
// row in the workgroup), LANE (its place among the row's invocations), LEAD (the
// partial of the row's first invocation), BODY.
$BINDINGS
$FUNCTIONS
$SHARED

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let li = i32(lid);
    let slot = $SLOT;
    let t = $LANE;
    let lead = $LEAD;
    let o = (i32(wid.x) + i32(wid.y) * $GRID_X) * $RPW + slot;
    let live = o < $O;
$BODY
}
