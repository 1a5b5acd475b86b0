// Elementwise kernel: one invocation per output element (a fused chain of elementwise
// and movement ops, generated into `compute`). Slots: BINDINGS, FUNCTIONS, WG
// (workgroup size), ROW (invocations per grid row), NUMEL, STORE.
$BINDINGS
$FUNCTIONS
@compute @workgroup_size($WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let gi = i32(gid.x) + i32(gid.y) * $ROW;
    if (gi >= $NUMEL) {
        return;
    }
    $STORE
}
