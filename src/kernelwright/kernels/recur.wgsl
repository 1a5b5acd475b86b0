// The first-order linear recurrence h_r = a_r * h_(r-1) + b_r along R of a, b [P, R, Q],
// h_(-1) = h0 [P, Q], storing every h_r [P, R, Q]: one invocation per column (p, q),
// walking R in order (the recurrence is sequential; adjacent invocations hold adjacent
// q, so each step reads and writes consecutive addresses across a warp). An invocation
// past the last column returns at once: no workgroup memory, no barriers.
// Slots: BINDINGS, FUNCTIONS (load_a, load_b, load_h, epilogue), WG, R, Q, COLS (P * Q),
// GRID_X, STORE.
$BINDINGS
$FUNCTIONS

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let col = (i32(wid.x) + i32(wid.y) * $GRID_X) * $WG + i32(lid);
    if (col >= $COLS) {
        return;
    }
    let p = col / $Q;
    let q = col % $Q;
    var h: f32 = load_h(p, q);
    for (var r = 0; r < $R; r += 1) {
        h = load_a(p, r, q) * h + load_b(p, r, q);
        let gi = (p * $R + r) * $Q + q;
        let acc = h;
        $STORE
    }
}
