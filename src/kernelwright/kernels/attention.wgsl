// Fused scaled dot-product attention, out[b, i, c] = sum_j P(b, i, j) * V(b, j, c) with
// P = softmax_j(Q(b, i, :) . K(b, j, :) * SCALE + MASK(b, i, j)), never storing the
// L x S score matrix. One workgroup per (batch * head b, block of BQ query rows);
// TPR invocations per query row. The workgroup walks the keys in blocks of BK: it
// stages the block of K and V in workgroup memory, each row's invocations compute
// its BK scores (lane-strided), and every invocation of the row folds them into the
// row's running max m, running sum l and its CPT output columns (lane + c * TPR) with
// the online softmax rescaling (acc *= exp(m_old - m_new)). With CAUSAL, key j is
// kept for query i only when j <= i, and key blocks past the block's last query are
// never loaded. A row whose keys are all masked (-inf) stores zeros, as PyTorch.
// load_q / load_k / load_v (and load_mask) are loaders, so transposed, broadcast or
// elementwise-produced operands cost no copy; `epilogue` applies fused consumers.
// Slots: BINDINGS, FUNCTIONS, L, S, E, EV, EVP (= CPT * TPR, v_tile's padded width),
// KS (= E + 1) and SS (= BK + 1: row strides of k_tile and s_tile, padded so that
// invocations reading different rows of them hit different memory banks), BQ, BK,
// TPR, WG (= BQ * TPR), CPT, NQB (query blocks), GROUPS (= batch * NQB), GRID_X,
// SCALE, KEND (the key loop's bound), KEEP (the per-score keep condition), MASK (the
// additive mask term), STORE.
$BINDINGS
$FUNCTIONS
var<workgroup> q_tile: array<f32, $BQ * $E>;   // [i][e], pre-scaled
var<workgroup> k_tile: array<f32, $BK * $KS>;  // [j][e]
var<workgroup> v_tile: array<f32, $BK * $EVP>; // [j][c], zero past EV
var<workgroup> s_tile: array<f32, $BQ * $SS>;  // [i][j] masked scores

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let neg_inf = bitcast<f32>(0xff800000u);
    let flat = i32(wid.x) + i32(wid.y) * $GRID_X;
    if (flat >= $GROUPS) {
        return;
    }
    let b = flat / $NQB;
    let q0 = (flat % $NQB) * $BQ;
    let t = i32(li);
    let row = t / $TPR;
    let lane = t % $TPR;
    let i = q0 + row;
    for (var x = t; x < $BQ * $E; x += $WG) {
        let r = x / $E;
        var val = 0.0;
        if (q0 + r < $L) {
            val = load_q(b, q0 + r, x % $E) * $SCALE;
        }
        q_tile[x] = val;
    }
    var m = neg_inf;
    var l = 0.0;
    var acc: array<f32, $CPT>;
    let kend = $KEND;
    for (var k0 = 0; k0 < kend; k0 += $BK) {
        workgroupBarrier();  // the previous block's tiles are no longer read
        for (var x = t; x < $BK * $E; x += $WG) {
            let j = k0 + x / $E;
            var val = 0.0;
            if (j < $S) {
                val = load_k(b, j, x % $E);
            }
            k_tile[(x / $E) * $KS + x % $E] = val;
        }
        for (var x = t; x < $BK * $EVP; x += $WG) {
            let j = k0 + x / $EVP;
            let c = x % $EVP;
            var val = 0.0;
            if (j < $S && c < $EV) {
                val = load_v(b, j, c);
            }
            v_tile[x] = val;
        }
        workgroupBarrier();
        for (var jj = lane; jj < $BK; jj += $TPR) {
            let j = k0 + jj;
            var s = neg_inf;
            if ($KEEP) {
                var dot = 0.0;
                for (var e = 0; e < $E; e += 1) {
                    dot = fma(q_tile[row * $E + e], k_tile[jj * $KS + e], dot);
                }
                s = dot$MASK;
            }
            s_tile[row * $SS + jj] = s;
        }
        workgroupBarrier();
        var mb = m;
        for (var jj = 0; jj < $BK; jj += 1) {
            mb = max(mb, s_tile[row * $SS + jj]);
        }
        if (mb != neg_inf) {
            let alpha = select(exp(m - mb), 0.0, m == neg_inf);
            l = l * alpha;
            for (var c = 0; c < $CPT; c += 1) {
                acc[c] = acc[c] * alpha;
            }
            for (var jj = 0; jj < $BK; jj += 1) {
                let s = s_tile[row * $SS + jj];
                let p = select(exp(s - mb), 0.0, s == neg_inf);
                l = l + p;
                for (var c = 0; c < $CPT; c += 1) {
                    acc[c] = fma(p, v_tile[jj * $EVP + lane + c * $TPR], acc[c]);
                }
            }
            m = mb;
        }
    }
    if (i < $L) {
        let inv = select(1.0 / l, 0.0, l == 0.0);
        for (var c = 0; c < $CPT; c += 1) {
            let col = lane + c * $TPR;
            if (col < $EV) {
                let gi = (b * $L + i) * $EV + col;
                let acc = acc[c] * inv;
                $STORE
            }
        }
    }
}
