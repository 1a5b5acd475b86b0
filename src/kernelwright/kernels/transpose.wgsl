// Elementwise kernel through a transposing tile (the elementwise template's TILE 1):
// for a chain whose main input is contiguous along output dim B while the output is
// contiguous along its last dim A (a permute or transpose made contiguous), each
// workgroup of 32 x ROWS invocations computes a tile of 32 (A) x TB (B, 32 * EPT) for
// one index of the other dims. The values are computed with B running across adjacent
// invocations (the input read coalesced), staged in workgroup memory, and stored with A
// running across them (the output written coalesced). `epilogue(gi, d...)` computes the element at flat
// index gi from its index along each dim (the other dims' d<i> decoded once a tile).
// Slots: BINDINGS, FUNCTIONS, TILES_A, TILES_B (tiles along A and B), GROUPS (all
// tiles), GRID_X, SIZE_A, SIZE_B, STRIDE_B (output stride of B), TB, ROW (TB + 1),
// ROWS, STAGED (32 * ROW), REST (code: the tile's other dims d<i> and `base`, their
// flat output index, from `r`), COMPUTE (the loops computing the tile), STORE_TILE.
$BINDINGS
$FUNCTIONS
var<workgroup> tile: array<$TILE_T, $STAGED>;  // [a][b], 32 x (TB + 1): no bank conflicts

@compute @workgroup_size(32, $ROWS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let flat = i32(wid.x) + i32(wid.y) * $GRID_X;
    if (flat >= $GROUPS) {
        return;
    }
    let ta = flat % $TILES_A;
    let tb = (flat / $TILES_A) % $TILES_B;
    let r = flat / ($TILES_A * $TILES_B);
$REST
    let a0 = ta * 32;
    let b0 = tb * $TB;
    let tx = i32(lid.x);
    let ty = i32(lid.y);
$COMPUTE
    workgroupBarrier();
    for (var j = 0; j < $TB; j += $ROWS) {
        let a = a0 + tx;
        let b = b0 + ty + j;
        if (a < $SIZE_A && b < $SIZE_B) {
            let gi = base + b * $STRIDE_B + a;
$STORE_TILE
        }
    }
}
