// Max, argmax or average pooling over the last three dims of x[L, D, H, W] (L: all
// leading dims; 1-d and 2-d pooling arrive with unit dims in front), one invocation
// per output element out[l, od, oh, ow]. Per dim the window starts at START_ (a WGSL
// expression of the output index: o * S - P for regular pooling, floor(o I / O) for
// adaptive) and takes TAPS_ taps DIL_ apart. Regular pooling takes all K taps of the
// window: those before 0 or past the input (END_) do not count (OK_ false), so padding
// never counts as a value, and every tap is loaded at its index clamped into the input
// (AT_) and folded only when it counts: no load waits behind a branch, so the window's
// loads are in flight together (a loop with `continue` around each load was
// latency-bound). An adaptive window (END_: its end) takes exactly its own taps.
// FOLD folds the tap value v into acc when ok: max keeps the first maximum (NaN
// propagates, as PyTorch) and its flat index (id * IN_H + ih) * IN_W + iw in best, the
// argmax's result; average sums, and FINISH divides by the count of taps, the padded
// window (count_include_pad) or divisor_override. The result leaves through `epilogue`.
// Slots: BINDINGS, FUNCTIONS (load_x, epilogue), WG, ROW, NUMEL, INIT, FOLD,
// FINISH, and per dim (suffix _D, _H, _W): OUT_, IN_, DIL_, START_, END_, TAPS_,
// OK_, AT_; STORE.
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
    for (var kd = 0; kd < $TAPS_D; kd += 1) {
        let id = d0 + kd * $DIL_D;
        let ok_d = $OK_D;
        let cd = $AT_D;
        for (var kh = 0; kh < $TAPS_H; kh += 1) {
            let ih = h0 + kh * $DIL_H;
            let ok_h = ok_d && $OK_H;
            let ch = $AT_H;
            for (var kw = 0; kw < $TAPS_W; kw += 1) {
                let iw = w0 + kw * $DIL_W;
                let ok = ok_h && $OK_W;
                let v = load_x(l, cd, ch, $AT_W);
                $FOLD
                count += select(0, 1, ok);
            }
        }
    }
    $FINISH
    $STORE
}
