// Batched matrix product out[b, m, n] = sum_k A(b, m, k) * B(b, k, n) on the matrix
// units (NVIDIA's tensor cores): the "accelerated" precision mode. Operands are rounded
// to f16 as they are staged, products accumulate in f32. The matrix operations are
// spelled by kernels/matmul_coop.py for the device's api: Dawn's subgroup matrices
// (subgroupMatrixLoad, subgroupMatrixMultiplyAccumulate, subgroupMatrixStore) or
// wgpu-native's cooperative matrices (coopLoad, coopMultiplyAdd, coopStore); one
// matrix product is m x k by k x n.
// A workgroup of NSG subgroups computes a BM x BN tile at (m0, n0) (ORIGIN: the grid's
// order, or bands of GROUP tile rows walked column by column); subgroup sg owns the
// WM x WN warp tile at (wm, wn), held as (WM / m) x (WN / n) f32 accumulators (acc_i_j).
// Each BK-deep step (K_LOOP: kernels/matmul_coop_loop1.wgsl or _loop2.wgsl) the whole
// workgroup fetches A and B through the loaders (load_a, load_b: fused prologues,
// transposes and broadcasts cost no copy; VEC 4: four elements a load) into registers
// (REGISTERS, their index arithmetic set up once in SETUP), rounds them to f16 and
// writes them to workgroup memory in the layout the matrix loads read (rows padded by
// PAD elements against bank conflicts; STAGES 2: two buffers, one written while the
// other is read); zero padding past M, N and K makes every matrix operation work on
// whole matrices. After the K loop each subgroup stores its accumulators (one, or a
// row of them: EPI) into its slice of tile_c, from which its invocations apply
// `epilogue` (fused consumers: bias, activations) and store with bounds checks
// (STORE_BLOCK). Matrix operations run in uniform control flow only: the loops have
// constant bounds, and bounds checks guard plain loads and stores, never a matrix one.
// Slots: ENABLE, BINDINGS, FUNCTIONS, BM, BN, WG, NSG, SCRATCH (tile_c elements a
// subgroup), WARPS_N, WM, WN, A_WORDS, B_WORDS, ORIGIN, REGISTERS, SETUP,
// ACCUMULATORS, K_LOOP, STORE_BLOCK.
$ENABLE
$BINDINGS
$FUNCTIONS
var<workgroup> tile_a: array<f16, $A_WORDS>;
var<workgroup> tile_b: array<f16, $B_WORDS>;
var<workgroup> tile_c: array<f32, $NSG * $SCRATCH>;  // each subgroup's results, staged

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let b = i32(wid.z);
$ORIGIN
    let lin = i32(li);
    let wm = i32(sg / $WARPS_N) * $WM;
    let wn = i32(sg % $WARPS_N) * $WN;
    let cbase = i32(sg) * $SCRATCH;
    for (var e = lin; e < $NSG * $SCRATCH; e += $WG) {
        tile_c[e] = 0.0;
    }
$REGISTERS
$SETUP
    workgroupBarrier();
$ACCUMULATORS
$K_LOOP
$STORE_BLOCK
}
