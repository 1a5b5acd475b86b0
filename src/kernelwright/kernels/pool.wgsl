// Max, argmax or average pooling over the last three dims of x[L, D, H, W] (L: all
// leading dims; 1-d and 2-d pooling arrive with unit dims in front). Each invocation
// computes OPT adjacent outputs out[l, od, oh, ow0 .. ow0 + OPT - 1] of one output row
// (OWB invocations per row; those past OUT_W are computed and not stored). Per dim the
// window starts at START_ (a WGSL expression of the output index: o * S - P for regular
// pooling, floor(o I / O) for adaptive; for the last dim that of ow0) and takes TAPS_
// taps DIL_ apart. Regular pooling takes all K taps of the window: those before 0 or
// past the input (END_) do not count (OK_ false), so padding never counts as a value,
// and every tap is loaded at its index clamped into the input (AT_) and folded only
// when it counts: no load waits behind a branch, so the window's loads are in flight
// together (a loop with `continue` around each load was latency-bound). An adaptive
// window (END_: its end) takes exactly its own taps.
// ROW_TAPS loads and folds one window row (l, cd, ch; ok_h: whether the row counts).
// With OPT 1 it is the loop over the TAPS_W taps of the output's window, as above.
// With OPT > 1 (windows of a static size and spacing along the last dim: every regular
// pooling, and adaptive pooling where the output size divides the input's) it is
// unrolled: each column w0 + c of the union of the OPT windows is loaded once into a
// register x<c> (at its clamped index; COLUMNS sets that index and okw<c>, whether the
// column lies in the input, once per invocation), then each output folds its own taps
// from those registers, in window order. Neighbouring windows share columns (3 x 3,
// stride 2: 9 loads per row for 4 outputs instead of 12), and no array is indexed by a
// loop counter (NVIDIA would place it in local memory). With VEC 4 (OPT * S a multiple
// of 4 and rows of whole vec4s, so that every invocation's columns sit at the same
// lanes) the columns arrive 16 bytes at a time: from a vec4 view of a plain input
// buffer, else through load_x4 (4 computed columns per call).
// The fold (per output j) folds the tap value v into acc<j> when ok: max keeps the first
// maximum (NaN propagates, as PyTorch) and its flat index (id * IN_H + ih) * IN_W + iw
// in best<j>, the argmax's result; average sums into acc<j> and counts the taps in
// count<j>. STORES finishes each output (the average divides by the count of taps, the
// padded window (count_include_pad) or divisor_override) and hands res (acc<j> or
// best<j>) to `epilogue` at gi; outputs past OUT_W are not stored.
// Slots: BINDINGS, FUNCTIONS (load_x; load_x4 for VEC 4 without a view; epilogue), WG,
// ROW, NUMEL (invocations), OWB (invocations per output row), OPT, and per dim (suffix
// _D, _H, _W): OUT_, START_, END_, and for D and H TAPS_, DIL_, OK_, AT_ (the last
// dim's are written into ROW_TAPS); generated: ACCUMULATORS, COLUMNS, ROW_TAPS, STORES.
$BINDINGS
$FUNCTIONS
@compute @workgroup_size($WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let q = i32(gid.x) + i32(gid.y) * $ROW;
    if (q >= $NUMEL) {
        return;
    }
    let ow0 = (q % $OWB) * $OPT;
    let oh = (q / $OWB) % $OUT_H;
    let od = (q / ($OWB * $OUT_H)) % $OUT_D;
    let l = q / ($OWB * $OUT_H * $OUT_D);
    let d0 = $START_D;
    let h0 = $START_H;
    let w0 = $START_W;
    let d1 = $END_D;
    let h1 = $END_H;
    let w1 = $END_W;
$ACCUMULATORS
$COLUMNS
    for (var kd = 0; kd < $TAPS_D; kd += 1) {
        let id = d0 + kd * $DIL_D;
        let ok_d = $OK_D;
        let cd = $AT_D;
        for (var kh = 0; kh < $TAPS_H; kh += 1) {
            let ih = h0 + kh * $DIL_H;
            let ok_h = ok_d && $OK_H;
            let ch = $AT_H;
$ROW_TAPS
        }
    }
    let base = (q / $OWB) * $OUT_W + ow0;
$STORES
}
