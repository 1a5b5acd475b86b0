// Inclusive scan of x[A, R, B] along R with one invocation per column (a, b): the scan
// template's STAGE 3, for B > 1 (a scan along a dim that is not the last). Adjacent
// invocations hold adjacent columns, so each step down R reads and writes consecutive
// addresses across a warp, where the row kernels (one workgroup per column) read each
// column's elements B apart. With VEC 4 an invocation holds 4 adjacent columns (B a
// multiple of 4), loaded 16 bytes at a time where x is a plain f32 buffer read in its
// own layout, and stored 16 bytes at a time. Each invocation walks its columns ITEMS
// elements at a time: the ITEMS loads first (at indices clamped into the column,
// unless ITEMS divides R), so that they are in flight together, then the running
// values fold them in order and store each. No workgroup memory and no barriers: an
// invocation past the last column returns at once. `combine` needs to be associative
// only: operands stay in order.
// Slots: BINDINGS, FUNCTIONS (load_x, leaf, combine, epilogue), WG, ITEMS, R, LANES
// (invocations: A * B / VEC), GRID_X, SETUP (the column's a and b, its running values
// `carry<e>`), LOADS (x<k>_<e>: the leaves of item r0 + k), STORES (each folded into
// its running value and stored).
$BINDINGS
$FUNCTIONS

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let col = (i32(wid.x) + i32(wid.y) * $GRID_X) * $WG + i32(lid);
    if (col >= $LANES) {
        return;
    }
$SETUP
    for (var r0 = 0; r0 < $R; r0 += $ITEMS) {
$LOADS
$STORES
    }
}
