// Fused scaled dot-product attention on the matrix units (the "accelerated" precision
// mode; kernels/attention_coop.py): out[b, i, c] = sum_j P(b, i, j) * V(b, j, c) with
// P = softmax_j(Q(b, i, :) . K(b, j, :) * SCALE + MASK(b, i, j)), never storing the
// L x S scores (flash attention), both products on Dawn's subgroup matrices: Q, K, V and
// the probabilities rounded to f16 as they are staged, the products accumulated in f32,
// the softmax statistics kept in f32.
// One workgroup per (batch * head b, block of BQ query rows), NSG subgroups: subgroup sg
// owns the block's rows sg * WQ .. sg * WQ + WQ - 1. The block's queries are staged once
// (zero past L and past E: the head dim is padded to EP, a whole number of matrices) and
// held as left matrices (Q_FRAGMENTS); each subgroup holds its rows' output as result
// matrices (o_i_d, EVP = V's head dim padded to whole matrices). The keys are walked in
// blocks of BK: K staged as [j][e] (its transpose read column-major as right matrices),
// each subgroup's scores S = Q K^T stored to f_tile (SCORES), V staged in K's place, then
// each row's online softmax in f32 by one invocation (rows t, t + WG, ...): the scaled,
// masked scores, the new running maximum m, the factor alpha = exp(m_old - m_new), the
// probabilities exp(s - m) rounded to f16 into h_tile (Q's place: Q is in registers by
// then) and the running sum of those rounded values. The output matrices are rescaled by
// alpha through f_tile (stored, each row multiplied, loaded again: a matrix cannot be
// scaled by rows in place) and then accumulate P V (PV_PRODUCT). With CAUSAL, key j is
// kept for query i only when j <= i, and key blocks past the block's last query are never
// loaded. At the end the output matrices go to f_tile once more and each element is
// divided by its row's sum and stored through `epilogue`; a row whose keys are all
// masked (-inf) stores zeros, as PyTorch. Matrix operations run in uniform control flow
// only: the key loop's bound is the workgroup's, the other loops have constant bounds.
// load_q / load_k / load_v (and load_mask) are loaders, so transposed, broadcast or
// elementwise-produced operands cost no copy.
// Slots: ENABLE, BINDINGS, FUNCTIONS, L, S, E, EV, EP, EVP, BQ, BK, WQ, WG, QS, PS, KS, VS
// (the f16 tiles' row strides: Q, P, K, V), FS (f_tile's: scores, then outputs),
// H_WORDS, KV_WORDS, F_WORDS (the tiles' sizes), TK (one product's depth), NQB (query
// blocks), GROUPS (= batch * NQB), GRID_X, SCALE, KEND (the key loop's bound), KEEP (the
// condition a score is kept on), MASK (added to a kept score), Q_FRAGMENTS,
// O_ACCUMULATORS, SCORES, O_STORE, O_LOAD, PV_PRODUCT (generated), STORE.
$ENABLE
$BINDINGS
$FUNCTIONS
var<workgroup> h_tile: array<f16, $H_WORDS>;   // Q as [row][e] (stride QS), then P [row][j] (PS)
var<workgroup> kv_tile: array<f16, $KV_WORDS>; // K as [j][e] (stride KS), then V [j][c] (VS)
var<workgroup> f_tile: array<f32, $F_WORDS>;   // S as [row][j], then the outputs [row][c] (FS)
var<workgroup> row_m: array<f32, $BQ>;         // each row's running maximum
var<workgroup> row_l: array<f32, $BQ>;         // each row's running sum of probabilities
var<workgroup> row_a: array<f32, $BQ>;         // each row's rescaling factor in this block

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_id) sg: u32) {
    let neg_inf = kw_f32_bits(0xff800000u);  // not a constant: WGSL forbids -inf
    let flat = i32(wid.x) + i32(wid.y) * $GRID_X;
    if (flat >= $GROUPS) {
        return;  // the whole workgroup: the barriers and matrix operations stay uniform
    }
    let b = flat / $NQB;
    let q0 = (flat % $NQB) * $BQ;
    let t = i32(li);
    let wq = i32(sg) * $WQ;
    for (var x = t; x < $BQ * $EP; x += $WG) {
        let r = x / $EP;
        let e = x % $EP;
        var val = 0.0;
        if (q0 + r < $L && e < $E) {
            val = load_q(b, q0 + r, e);
        }
        h_tile[r * $QS + e] = f16(val);
    }
    for (var r = t; r < $BQ; r += $WG) {
        row_m[r] = neg_inf;
        row_l[r] = 0.0;
    }
    workgroupBarrier();
$Q_FRAGMENTS
$O_ACCUMULATORS
    let kend = $KEND;
    for (var k0 = 0; k0 < kend; k0 += $BK) {
        workgroupBarrier();  // the previous block's V, P and outputs are no longer read
        for (var x = t; x < $BK * $EP; x += $WG) {
            let j = x / $EP;
            let e = x % $EP;
            var val = 0.0;
            if (k0 + j < $S && e < $E) {
                val = load_k(b, k0 + j, e);
            }
            kv_tile[j * $KS + e] = f16(val);
        }
        workgroupBarrier();
$SCORES
        workgroupBarrier();  // K read, the scores stored
        for (var x = t; x < $BK * $EVP; x += $WG) {
            let j = x / $EVP;
            let c = x % $EVP;
            var val = 0.0;
            if (k0 + j < $S && c < $EV) {
                val = load_v(b, k0 + j, c);
            }
            kv_tile[j * $VS + c] = f16(val);
        }
        for (var r = t; r < $BQ; r += $WG) {
            let i = q0 + r;
            var top = neg_inf;
            for (var jj = 0; jj < $BK; jj += 1) {
                let j = k0 + jj;
                var sv = neg_inf;
                if ($KEEP) {
                    sv = f_tile[r * $FS + jj] * $SCALE$MASK;
                }
                f_tile[r * $FS + jj] = sv;
                top = max(top, sv);
            }
            let m_old = row_m[r];
            let m_new = max(m_old, top);
            var alpha = 1.0;
            if (m_new != neg_inf) {
                alpha = select(exp(m_old - m_new), 0.0, m_old == neg_inf);
            }
            var total = 0.0;
            for (var jj = 0; jj < $BK; jj += 1) {
                let sv = f_tile[r * $FS + jj];
                let p = f16(select(exp(sv - m_new), 0.0, sv == neg_inf));
                h_tile[r * $PS + jj] = p;
                total += f32(p);
            }
            row_m[r] = m_new;
            row_l[r] = row_l[r] * alpha + total;
            row_a[r] = alpha;
        }
        workgroupBarrier();  // V and P staged, the scores read
$O_STORE
        workgroupBarrier();
        for (var x = t; x < $BQ * $EVP; x += $WG) {
            let r = x / $EVP;
            let c = x % $EVP;
            f_tile[r * $FS + c] = f_tile[r * $FS + c] * row_a[r];
        }
        workgroupBarrier();
$O_LOAD
        for (var jj = 0; jj < $BK; jj += $TK) {
$PV_PRODUCT
        }
    }
    workgroupBarrier();
$O_STORE
    workgroupBarrier();
    for (var x = t; x < $BQ * $EVP; x += $WG) {
        let r = x / $EVP;
        let col = x % $EVP;
        let i = q0 + r;
        if (i < $L && col < $EV) {
            let total = row_l[r];
            let gi = (b * $L + i) * $EV + col;
            let acc = select(f_tile[r * $FS + col] / total, 0.0, total == 0.0);
            $STORE
        }
    }
}
