// Batched matrix product out[b, m, n] = sum_k A(b, m, k) * B(b, k, n), tiled: a
// workgroup computes a BM x BN tile, staging BK-deep slices of A and B in
// workgroup memory; each invocation accumulates a TM x TN block in registers.
// A and B are loader functions (load_a, load_b), so transposes, broadcasts and
// elementwise prologues cost no copy; `epilogue` applies fused consumers (bias,
// activation, ...) before the store. Tile loads walk the operand's contiguous
// dim fastest (A_TILE_INDEX / B_TILE_INDEX), so that neighbouring invocations read
// neighbouring addresses whether an operand is stored transposed or not.
// The register block is generated unrolled (ACCUMULATORS, LOAD_TILES, MULTIPLY,
// STORE_BLOCK): accumulators in arrays indexed by loop counters were measured to
// land in local memory on NVIDIA's Vulkan driver (0.8 TFLOP/s at 4096^3).
// Slots: BINDINGS, FUNCTIONS, M, N, K, BM, BN, BK, TX (= BN / TN), TY (= BM / TM).
$BINDINGS
$FUNCTIONS
var<workgroup> tile_a: array<f32, $BK * $BM>;  // [k][m]
var<workgroup> tile_b: array<f32, $BK * $BN>;  // [k][n]

@compute @workgroup_size($TX, $TY)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let b = i32(wid.z);
    let m0 = i32(wid.y) * $BM;
    let n0 = i32(wid.x) * $BN;
    let tx = i32(lid.x);
    let ty = i32(lid.y);
    let lin = i32(li);
$ACCUMULATORS
    for (var k0 = 0; k0 < $K; k0 += $BK) {
$LOAD_TILES
        workgroupBarrier();
        for (var kk = 0; kk < $BK; kk += 1) {
$MULTIPLY
        }
        workgroupBarrier();
    }
$STORE_BLOCK
}
