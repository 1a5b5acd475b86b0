// Reduction of x[O, R] over R, one invocation per output element, folding its row
// sequentially. Used when rows are short and there are many of them.
// Slots as in reduce_row.wgsl, plus ROW (invocations per grid row).
$BINDINGS
$FUNCTIONS
@compute @workgroup_size($WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let o = i32(gid.x) + i32(gid.y) * $ROW;
    if (o >= $O) {
        return;
    }
    var acc: $ACC = $INIT;
    for (var r = 0; r < $R; r += 1) {
        acc = combine(acc, $LEAF);
    }
    let gi = o;
    $STORE
}
