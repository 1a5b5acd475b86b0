// 2-D max or average pooling over the last two dims of x[N, C, H, W], one invocation
// per output element. Max ignores padding (as PyTorch's implicit -inf); average
// divides by DIVISOR_EXPR, which encodes count_include_pad / divisor_override.
// Slots: BINDINGS, FUNCTIONS (load_x, epilogue), WG, ROW, NUMEL, C, HO, WO,
// H, W, KH, KW, SH, SW, PH, PW, DH, DW, INIT, FOLD, DIVISOR_EXPR, STORE.
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
    let c = (gi / ($WO * $HO)) % $C;
    let n = gi / ($WO * $HO * $C);
    let h0 = oh * $SH - $PH;
    let w0 = ow * $SW - $PW;
    var acc: f32 = $INIT;
    var count = 0;
    for (var kh = 0; kh < $KH; kh += 1) {
        let ih = h0 + kh * $DH;
        if (ih < 0 || ih >= $H) {
            continue;
        }
        for (var kw = 0; kw < $KW; kw += 1) {
            let iw = w0 + kw * $DW;
            if (iw >= 0 && iw < $W) {
                let v = load_x(n, c, ih, iw);
                $FOLD
                count += 1;
            }
        }
    }
    acc = acc / f32($DIVISOR_EXPR);
    $STORE
}
