// Max, argmax or average pooling over the last three dims of x[L, D, H, W] (L: all
// leading dims; 1-d and 2-d pooling arrive with unit dims in front), one invocation
// per output element out[l, od, oh, ow]. Per dim the window starts at START_ (a WGSL
// expression of the output index: o * S - P for regular pooling, floor(o I / O) for
// adaptive) and holds K_ taps DIL_ apart; taps before 0 or at or past END_ (the input
// size, or the adaptive window's end) are skipped, so padding never counts as a value.
// FOLD folds the tap value v into acc: max keeps the first maximum (NaN propagates, as
// PyTorch) and its flat index (id * IN_H + ih) * IN_W + iw in best, the argmax's
// result; average sums, and FINISH divides by the count of taps, the padded window
// (count_include_pad) or divisor_override. The result leaves through `epilogue`.
// Slots: BINDINGS, FUNCTIONS (load_x, epilogue), WG, ROW, NUMEL, INIT, FOLD,
// FINISH, and per dim (suffix _D, _H, _W): OUT_, IN_, K_, DIL_, START_, END_; STORE.
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
    let l = gi / ($OUT_W * $OUT_H * $OUT_D);
    let d0 = $START_D;
    let h0 = $START_H;
    let w0 = $START_W;
    let d1 = $END_D;
    let h1 = $END_H;
    let w1 = $END_W;
    var acc: f32 = $INIT;
    var best = -1;
    var count = 0;
    for (var kd = 0; kd < $K_D; kd += 1) {
        let id = d0 + kd * $DIL_D;
        if (id < 0 || id >= d1) {
            continue;
        }
        for (var kh = 0; kh < $K_H; kh += 1) {
            let ih = h0 + kh * $DIL_H;
            if (ih < 0 || ih >= h1) {
                continue;
            }
            for (var kw = 0; kw < $K_W; kw += 1) {
                let iw = w0 + kw * $DIL_W;
                if (iw < 0 || iw >= w1) {
                    continue;
                }
                let v = load_x(l, id, ih, iw);
                $FOLD
                count += 1;
            }
        }
    }
    $FINISH
    $STORE
}
