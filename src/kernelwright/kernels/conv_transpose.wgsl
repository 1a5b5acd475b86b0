// Transposed convolution as a gather, one invocation per output element
// out[n, co, od, oh, ow] (no scatter, no atomics): input element i reaches output
// o = i * S - P + k * DIL through tap k, so each output sums x(n, c, id, ih, iw) *
// w(c, co mod COG, kd, kh, kw) over the input channels c of its group and the taps k
// for which i = (o + P - k * DIL) / S is exact and inside the input. Per dim those taps
// are k0, k0 + M, k0 + 2 M, ... with g = gcd(S, DIL), M = S / g and
// k0 = (o + P) / g * INV mod M (INV the inverse of DIL / g modulo M), and none exist
// unless g divides o + P; kernels/conv.py computes g, M and INV. 1-d and 2-d convolutions
// arrive with unit leading dims; loaders and `epilogue` work as in conv.wgsl.
// Slots: BINDINGS, FUNCTIONS (load_x, load_w, epilogue), WG, ROW, NUMEL, CO,
// CG (input channels per group), COG (output channels per group), and per spatial dim
// (suffix _D, _H, _W): OUT_, IN_, K_, S_, P_, DIL_, G_ (g), M_ (M), INV_ (INV); STORE.
$BINDINGS
$FUNCTIONS
@compute @workgroup_size($WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let gi = i32(gid.x) + i32(gid.y) * $ROW;
    if (gi >= $NUMEL) {
        return;
    }
    let ow = gi % $OUT_W;
    let oh = (gi / $OUT_W) % $OUT_H;
    let od = (gi / ($OUT_W * $OUT_H)) % $OUT_D;
    let co = (gi / ($OUT_W * $OUT_H * $OUT_D)) % $CO;
    let n = gi / ($OUT_W * $OUT_H * $OUT_D * $CO);
    let c0 = (co / $COG) * $CG;
    let cw = co % $COG;
    let rd = od + $P_D;
    let rh = oh + $P_H;
    let rw = ow + $P_W;
    var acc = 0.0;
    if (rd % $G_D == 0 && rh % $G_H == 0 && rw % $G_W == 0) {
        for (var kd = (rd / $G_D * $INV_D) % $M_D; kd < $K_D; kd += $M_D) {
            let id = (rd - kd * $DIL_D) / $S_D;
            if (id < 0) {
                break;  // later taps reach further back
            }
            if (id >= $IN_D) {
                continue;
            }
            for (var kh = (rh / $G_H * $INV_H) % $M_H; kh < $K_H; kh += $M_H) {
                let ih = (rh - kh * $DIL_H) / $S_H;
                if (ih < 0) {
                    break;
                }
                if (ih >= $IN_H) {
                    continue;
                }
                for (var kw = (rw / $G_W * $INV_W) % $M_W; kw < $K_W; kw += $M_W) {
                    let iw = (rw - kw * $DIL_W) / $S_W;
                    if (iw < 0) {
                        break;
                    }
                    if (iw >= $IN_W) {
                        continue;
                    }
                    for (var ci = 0; ci < $CG; ci += 1) {
                        acc = fma(load_x(n, c0 + ci, id, ih, iw), load_w(c0 + ci, cw, kd, kh, kw),
                                  acc);
                    }
                }
            }
        }
    }
    $STORE
}
