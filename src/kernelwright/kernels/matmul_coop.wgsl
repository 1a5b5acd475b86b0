// Batched matrix product out[b, m, n] = sum_k A(b, m, k) * B(b, k, n) on the matrix
// units (NVIDIA's tensor cores): the "accelerated" precision mode. Operands are rounded
// to f16 as they are staged, products accumulate in f32. The matrix operations are
// spelled by kernels/matmul_coop.py for the device's api: Dawn's subgroup matrices
// (subgroupMatrixLoad, subgroupMatrixMultiplyAccumulate, subgroupMatrixStore) or
// wgpu-native's cooperative matrices (coopLoad, coopMultiplyAdd, coopStore); one
// matrix product is m x k by k x n (TK = k), CELLS = m * n results.
// A workgroup of NSG subgroups computes a BM x BN tile; subgroup sg owns the WM x WN
// warp tile at (wm, wn), held as (WM / m) x (WN / n) f32 accumulators (acc_i_j). Each
// BK-deep step the whole workgroup stages A and B through the loaders (load_a, load_b:
// fused prologues, transposes and broadcasts cost no copy), rounds them to f16 and
// writes them to workgroup memory in the layout the matrix loads read (LOAD_TILES; rows
// padded by PAD elements against bank conflicts); zero padding past M, N and K makes
// every matrix operation work on whole matrices. After the K loop each subgroup stores
// its accumulators one at a time into its slice of tile_c, from which its invocations
// apply `epilogue` (fused consumers: bias, activations) and store with bounds checks
// (STORE_BLOCK). Matrix operations run in uniform control flow only: the loops have
// constant bounds, and bounds checks guard plain loads and stores, never a matrix one.
// Slots: ENABLE, BINDINGS, FUNCTIONS, M, N, K, BM, BN, BK, TK, WG, NSG, CELLS, WARPS_N,
// WM, WN, A_WORDS, B_WORDS, ACCUMULATORS, LOAD_TILES, MULTIPLY, STORE_BLOCK.
$ENABLE
$BINDINGS
$FUNCTIONS
var<workgroup> tile_a: array<f16, $A_WORDS>;
var<workgroup> tile_b: array<f16, $B_WORDS>;
var<workgroup> tile_c: array<f32, $NSG * $CELLS>;  // one result matrix per subgroup

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let b = i32(wid.z);
    let m0 = i32(wid.y) * $BM;
    let n0 = i32(wid.x) * $BN;
    let lin = i32(li);
    let wm = i32(sg / $WARPS_N) * $WM;
    let wn = i32(sg % $WARPS_N) * $WN;
    let cbase = i32(sg) * $CELLS;
    for (var e = lin; e < $NSG * $CELLS; e += $WG) {
        tile_c[e] = 0.0;
    }
    workgroupBarrier();
$ACCUMULATORS
    for (var k0 = 0; k0 < $K; k0 += $BK) {
$LOAD_TILES
        workgroupBarrier();
        for (var kk = 0; kk < $BK; kk += $TK) {
$MULTIPLY
        }
        workgroupBarrier();
    }
$STORE_BLOCK
}
