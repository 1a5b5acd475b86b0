// Elementwise kernel: a fused chain of elementwise and movement ops, generated into
// `epilogue(gi)`, evaluated for every output element. Each invocation handles EPT
// elements spaced THREADS apart (neighbouring invocations touch neighbouring
// addresses; several loads in flight per invocation).
// Slots: BINDINGS, FUNCTIONS, WG (workgroup size), ROW (invocations per grid row),
// THREADS (invocations doing work), EPT, NUMEL, STORE.
$BINDINGS
$FUNCTIONS
@compute @workgroup_size($WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let base = i32(gid.x) + i32(gid.y) * $ROW;
    if (base >= $THREADS) {
        return;
    }
    for (var u = 0; u < $EPT; u += 1) {
        let gi = base + u * $THREADS;
        if (gi < $NUMEL) {
            $STORE
        }
    }
}
