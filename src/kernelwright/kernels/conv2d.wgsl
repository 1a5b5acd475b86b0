// Direct 2-D convolution (cross-correlation, as PyTorch), one invocation per output
// element out[n, co, oh, ow]: it sums x(n, g*CG + ci, ih, iw) * w(co, ci, kh, kw)
// over its group's input channels and the kernel window; taps in the padding are
// skipped. Bias and activations arrive through `epilogue`.
// Slots: BINDINGS, FUNCTIONS (load_x, load_w, epilogue), WG, ROW, NUMEL,
// CO, HO, WO, H, W, CG (input channels per group), COG (output channels per
// group), KH, KW, SH, SW, PH, PW, DH, DW, STORE.
$BINDINGS
$FUNCTIONS
@compute @workgroup_size($WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let gi = i32(gid.x) + i32(gid.y) * $ROW;
    if (gi >= $NUMEL) {
        return;
    }
    let ow = gi % $WO;
    let oh = (gi / $WO) % $HO;
    let co = (gi / ($WO * $HO)) % $CO;
    let n = gi / ($WO * $HO * $CO);
    let c0 = (co / $COG) * $CG;
    var acc = 0.0;
    for (var ci = 0; ci < $CG; ci += 1) {
        for (var kh = 0; kh < $KH; kh += 1) {
            let ih = oh * $SH - $PH + kh * $DH;
            if (ih < 0 || ih >= $H) {
                continue;
            }
            for (var kw = 0; kw < $KW; kw += 1) {
                let iw = ow * $SW - $PW + kw * $DW;
                if (iw >= 0 && iw < $W) {
                    acc = fma(load_x(n, c0 + ci, ih, iw), load_w(co, ci, kh, kw), acc);
                }
            }
        }
    }
    $STORE
}
