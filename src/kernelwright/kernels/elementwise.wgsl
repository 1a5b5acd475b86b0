// Elementwise kernel: a fused chain of elementwise and movement ops, generated into
// `epilogue(gi, x...)`, evaluated for every output element. The buffers it reads at
// the element it stores arrive as the arguments x<i> (codegen lanes): with VEC = 4
// they are loaded and the results stored 16 bytes at a time (vec4), four elements per
// step. Each invocation does EPT steps spaced THREADS apart (neighbouring invocations
// touch neighbouring addresses; several loads in flight per invocation).
// Slots: BINDINGS, FUNCTIONS, WG (workgroup size), ROW (invocations per grid row),
// THREADS (invocations doing work), EPT, STEPS (NUMEL / VEC), BODY (one step q).
$BINDINGS
$FUNCTIONS
@compute @workgroup_size($WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let base = i32(gid.x) + i32(gid.y) * $ROW;
    if (base >= $THREADS) {
        return;
    }
    for (var u = 0; u < $EPT; u += 1) {
        let q = base + u * $THREADS;
        if (q < $STEPS) {
            $BODY
        }
    }
}
