// Flash attention's backward, the queries' gradient: for a block of BQ queries of
// batch-head b, dQ[i, :] = SCALE * sum_j dS(i, j) K(j, :) over the keys of key/value
// batch-head b / G (grouped-query attention), where, computed again block by block and
// never stored, S = Q K^T * SCALE + MASK, P = exp(S - LSE) (LSE: the forward's
// log-sum-exp of each row), dP = dO V^T and dS = P * (dP - DELTA) (DELTA = rowsum(dO *
// O)). One workgroup of WG invocations per (b, query block): the block's Q, dO, LSE and
// DELTA are staged once; per block of BK keys K and V are staged, each invocation
// computes BQ * BK / WG entries of dS into workgroup memory, then adds the block's terms
// to the dQ entries it owns (registers named by the generator: ACCUMULATE). With CAUSAL
// (key j kept for query i only when j <= i) key blocks past the block's last query are
// never loaded (KEND). A score that is -inf (masked) gives P = 0.
// Slots: BINDINGS, FUNCTIONS (load_q, load_k, load_v, load_do, load_lse, load_delta,
// load_mask), L, S, E, EV, G, BQ, BK, WG, NQB (query blocks), GROUPS (= B * NQB),
// GRID_X, SCALE, KEND, KEEP, MASK, REGISTERS, ACCUMULATE, STORES (generated), STORE.
$BINDINGS
$FUNCTIONS
var<workgroup> k_tile: array<f32, $KWORDS>;    // [j][e]
var<workgroup> v_tile: array<f32, $VWORDS>;    // [j][c]
var<workgroup> q_tile: array<f32, $QWORDS>;    // [i][e]
var<workgroup> g_tile: array<f32, $GWORDS>;    // dO, [i][c]
var<workgroup> ds_tile: array<f32, $PWORDS>;   // dS, [i][j]
var<workgroup> row_tile: array<f32, $RWORDS>;  // LSE then DELTA of the block's rows

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let neg_inf = kw_f32_bits(0xff800000u);  // not a constant: WGSL forbids -inf
    let flat = i32(wid.x) + i32(wid.y) * $GRID_X;
    if (flat >= $GROUPS) {
        return;  // the whole workgroup: the barriers below stay uniform
    }
    let b = flat / $NQB;
    let q0 = (flat % $NQB) * $BQ;
    let bk = b / $G;
    let t = i32(li);
    for (var x = t; x < $BQ * $E; x += $WG) {
        let i = x / $E;
        var val = 0.0;
        if (q0 + i < $L) {
            val = load_q(b, q0 + i, x % $E);
        }
        q_tile[x] = val;
    }
    for (var x = t; x < $BQ * $EV; x += $WG) {
        let i = x / $EV;
        var val = 0.0;
        if (q0 + i < $L) {
            val = load_do(b, q0 + i, x % $EV);
        }
        g_tile[x] = val;
    }
    for (var x = t; x < $BQ; x += $WG) {
        var lse = 0.0;
        var delta = 0.0;
        if (q0 + x < $L) {
            lse = load_lse(b, q0 + x);
            delta = load_delta(b, q0 + x);
        }
        row_tile[x] = lse;
        row_tile[$BQ + x] = delta;
    }
$REGISTERS
    let kend = $KEND;
    for (var k0 = 0; k0 < kend; k0 += $BK) {
        workgroupBarrier();  // the previous block's tiles are no longer read
        for (var x = t; x < $BK * $E; x += $WG) {
            let j = x / $E;
            var val = 0.0;
            if (k0 + j < $S) {
                val = load_k(bk, k0 + j, x % $E);
            }
            k_tile[x] = val;
        }
        for (var x = t; x < $BK * $EV; x += $WG) {
            let j = x / $EV;
            var val = 0.0;
            if (k0 + j < $S) {
                val = load_v(bk, k0 + j, x % $EV);
            }
            v_tile[x] = val;
        }
        workgroupBarrier();
        for (var x = t; x < $BQ * $BK; x += $WG) {
            let r = x / $BK;
            let c = x % $BK;
            let i = q0 + r;
            let j = k0 + c;
            var ds = 0.0;
            if ($KEEP) {
                var s = 0.0;
                for (var e = 0; e < $E; e += 1) {
                    s = fma(q_tile[r * $E + e], k_tile[c * $E + e], s);
                }
                s = s * $SCALE$MASK;
                var p = 0.0;
                if (s != neg_inf) {
                    p = exp(s - row_tile[r]);
                }
                var dp = 0.0;
                for (var e = 0; e < $EV; e += 1) {
                    dp = fma(g_tile[r * $EV + e], v_tile[c * $EV + e], dp);
                }
                ds = p * (dp - row_tile[$BQ + r]);
            }
            ds_tile[x] = ds;
        }
        workgroupBarrier();
        for (var c = 0; c < $BK; c += 1) {
$ACCUMULATE
        }
    }
$STORES
}
