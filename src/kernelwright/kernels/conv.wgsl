// Direct convolution (cross-correlation, as PyTorch) over three spatial dims, one
// invocation per output element out[n, co, od, oh, ow]: it sums
// x(n, g * CG + ci, id, ih, iw) * w(co, ci, kd, kh, kw) over the input channels ci of
// its group g and the kernel taps, at i = o * S - P + k * DIL per dim; taps in the
// padding are skipped. 1-d and 2-d convolutions arrive with unit leading dims. The
// inputs are read through loaders (load_x, load_w) and the result leaves through
// `epilogue`, so prologue ops, bias and activations fuse.
// Slots: BINDINGS, FUNCTIONS (load_x, load_w, epilogue), WG, ROW, NUMEL, CO,
// CG (input channels per group), COG (output channels per group), and per spatial dim
// (suffix _D, _H, _W): OUT_ (output size), IN_ (input size), K_ (kernel size),
// S_ (stride), P_ (padding), DIL_ (dilation); STORE.
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
    var acc = 0.0;
    for (var kd = 0; kd < $K_D; kd += 1) {
        let id = od * $S_D - $P_D + kd * $DIL_D;
        if (id < 0 || id >= $IN_D) {
            continue;
        }
        for (var kh = 0; kh < $K_H; kh += 1) {
            let ih = oh * $S_H - $P_H + kh * $DIL_H;
            if (ih < 0 || ih >= $IN_H) {
                continue;
            }
            for (var kw = 0; kw < $K_W; kw += 1) {
                let iw = ow * $S_W - $P_W + kw * $DIL_W;
                if (iw < 0 || iw >= $IN_W) {
                    continue;
                }
                for (var ci = 0; ci < $CG; ci += 1) {
                    acc = fma(load_x(n, c0 + ci, id, ih, iw), load_w(co, ci, kd, kh, kw), acc);
                }
            }
        }
    }
    $STORE
}
