// Batched matrix product out[b, m, n] = sum_k A(b, m, k) * B(b, k, n), tiled: a
// workgroup computes a BM x BN tile, staging BK-deep slices of A and B in
// workgroup memory; each invocation accumulates a TM x TN block in registers.
// A and B are loader functions (load_a, load_b), so transposes, broadcasts and
// elementwise prologues cost no copy; `epilogue` applies fused consumers (bias,
// activation, ...) before the store. Slots: BINDINGS, FUNCTIONS, M, N, K,
// BM, BN, BK, TM, TN, TX (= BN / TN), TY (= BM / TM), NT (= TX * TY),
// STORE.
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
    var acc: array<f32, $TM * $TN>;
    for (var i = 0; i < $TM * $TN; i += 1) {
        acc[i] = 0.0;
    }
    for (var k0 = 0; k0 < $K; k0 += $BK) {
        for (var t = i32(li); t < $BM * $BK; t += $NT) {
            let mm = t / $BK;
            let kk = t % $BK;
            var v = 0.0;
            if (m0 + mm < $M && k0 + kk < $K) {
                v = load_a(b, m0 + mm, k0 + kk);
            }
            tile_a[kk * $BM + mm] = v;
        }
        for (var t = i32(li); t < $BK * $BN; t += $NT) {
            let kk = t / $BN;
            let nn = t % $BN;
            var v = 0.0;
            if (k0 + kk < $K && n0 + nn < $N) {
                v = load_b(b, k0 + kk, n0 + nn);
            }
            tile_b[kk * $BN + nn] = v;
        }
        workgroupBarrier();
        for (var kk = 0; kk < $BK; kk += 1) {
            var a: array<f32, $TM>;
            var bv: array<f32, $TN>;
            for (var i = 0; i < $TM; i += 1) {
                a[i] = tile_a[kk * $BM + ty + i * $TY];
            }
            for (var j = 0; j < $TN; j += 1) {
                bv[j] = tile_b[kk * $BN + tx + j * $TX];
            }
            for (var i = 0; i < $TM; i += 1) {
                for (var j = 0; j < $TN; j += 1) {
                    acc[i * $TN + j] = fma(a[i], bv[j], acc[i * $TN + j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0; i < $TM; i += 1) {
        for (var j = 0; j < $TN; j += 1) {
            let m = m0 + ty + i * $TY;
            let n = n0 + tx + j * $TX;
            if (m < $M && n < $N) {
                let gi = (b * $M + m) * $N + n;
                let acc = acc[i * $TN + j];
                $STORE
            }
        }
    }
}
