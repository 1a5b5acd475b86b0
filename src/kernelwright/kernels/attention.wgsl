// Fused scaled dot-product attention, out[b, i, c] = sum_j P(b, i, j) * V(b, j, c) with
// P = softmax_j(Q(b, i, :) . K(b, j, :) * SCALE + MASK(b, i, j)), never storing the
// L x S score matrix (flash attention). One workgroup per (batch * head b, block of BQ
// query rows), WG = 16 * TY invocations: invocation (ty, tx) owns the block's rows
// ty * RM .. ty * RM + RM - 1, and in each block of BK keys the keys tx + 16 c (c < CN)
// for the scores, the value columns tx + 16 d (d < CV) for the output. The workgroup
// stages the block's (pre-scaled) queries once, then walks the keys in blocks of BK:
// K staged, the RM x CN scores computed in registers (two 16-byte query loads per
// key dim), each row's maximum over its 16 invocations found through workgroup
// memory, the probabilities exp(s - m) written to workgroup memory with the online
// softmax rescaling of the running sums and outputs (o *= exp(m_old - m_new)), then V
// staged in K's place and the RM x CV outputs accumulated in registers from 16-byte
// loads of four keys' probabilities. Each invocation keeps its own part of a row's
// sum; the parts are added once, at the end. With CAUSAL, key j is kept for query i
// only when j <= i, and key blocks past the block's last query are never loaded. A
// row whose keys are all masked (-inf) stores zeros, as PyTorch. Registers are named
// scalars (the template unrolls the blocks), not arrays indexed by loop counters.
// load_q / load_k / load_v (and load_mask) are loaders, so transposed, broadcast or
// elementwise-produced operands cost no copy; `epilogue` applies fused consumers.
// Slots: BINDINGS, FUNCTIONS, L, S, E, EV, BQ, BK, WG, RM, QS (q_tile's row stride,
// BQ + 4), KS (= BK + 1: k rows padded so that the stores of consecutive dims hit
// different banks), EVP (= 16 * CV), QWORDS, KVWORDS, PWORDS (the tiles' sizes), NQB
// (query blocks), GROUPS (= batch * NQB), GRID_X, SCALE, KEND (the key loop's bound),
// REGISTERS, SCORES, SOFTMAX, OUTPUTS, TOTALS, STORES (generated), STORE.
$BINDINGS
$FUNCTIONS
var<workgroup> q_tile: array<vec4<f32>, $QWORDS>;  // [e][row], pre-scaled, rows padded to QS
var<workgroup> kv_tile: array<f32, $KVWORDS>;      // K as [e][j] (stride KS), then V as [j][c]
var<workgroup> p_tile: array<vec4<f32>, $PWORDS>;  // [row][j]; first each row's 16 maxima

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let neg_inf = kw_f32_bits(0xff800000u);  // not a constant: WGSL forbids -inf
    let flat = i32(wid.x) + i32(wid.y) * $GRID_X;
    if (flat >= $GROUPS) {
        return;  // the whole workgroup: the barriers below stay uniform
    }
    let b = flat / $NQB;
    let q0 = (flat % $NQB) * $BQ;
    let t = i32(li);
    let tx = t % 16;
    let r0 = (t / 16) * $RM;
    for (var x = t; x < $BQ * $E; x += $WG) {
        let r = x / $E;
        let e = x % $E;
        var val = 0.0;
        if (q0 + r < $L) {
            val = load_q(b, q0 + r, e) * $SCALE;
        }
        q_tile[(e * $QS + r) / 4][r % 4] = val;
    }
$REGISTERS
    let kend = $KEND;
    for (var k0 = 0; k0 < kend; k0 += $BK) {
        workgroupBarrier();  // the previous block's V and probabilities are no longer read
        for (var x = t; x < $BK * $E; x += $WG) {
            let j = x / $E;
            let e = x % $E;
            var val = 0.0;
            if (k0 + j < $S) {
                val = load_k(b, k0 + j, e);
            }
            kv_tile[e * $KS + j] = val;
        }
        workgroupBarrier();
$SCORES
        workgroupBarrier();
$SOFTMAX
        for (var x = t; x < $BK * $EVP; x += $WG) {
            let j = x / $EVP;
            let c = x % $EVP;
            var val = 0.0;
            if (k0 + j < $S && c < $EV) {
                val = load_v(b, k0 + j, c);
            }
            kv_tile[x] = val;
        }
        workgroupBarrier();
        for (var j = 0; j < $BK; j += 4) {
$OUTPUTS
        }
    }
    workgroupBarrier();
$TOTALS
$STORES
}
