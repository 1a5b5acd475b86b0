// Direct convolution (cross-correlation, as PyTorch) over three spatial dims: each
// invocation computes OPT adjacent outputs out[n, co, od, oh, ow0 .. ow0 + OPT - 1] of
// one row, summing x(n, g * CG + ci, id, ih, iw) * w(co, ci, kd, kh, kw) over the input
// channels ci of its group g and the kernel taps, at i = o * S - P + k * DIL per dim;
// taps in the padding are skipped. With OPT > 1 an invocation reads each weight once
// for its OPT outputs and shares the index arithmetic of the row. 1-d and 2-d
// convolutions arrive with unit leading dims. The inputs are read through loaders
// (load_x, load_w) and the result leaves through `epilogue`, so prologue ops, bias and
// activations fuse.
// Slots: BINDINGS, FUNCTIONS (load_x, load_w, epilogue), WG, ROW, NUMEL (invocations),
// OWB (invocations per output row), OPT, CO, CG (input channels per group), COG (output
// channels per group), and per spatial dim (suffix _D, _H, _W): OUT_ (output size),
// IN_ (input size), K_ (kernel size), S_ (stride), P_ (padding), DIL_ (dilation);
// generated: ACCUMULATORS, TAP (the innermost loops over the taps of kw for the
// invocation's outputs), STORES.
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
    let co = (q / ($OWB * $OUT_H * $OUT_D)) % $CO;
    let n = q / ($OWB * $OUT_H * $OUT_D * $CO);
    let c0 = (co / $COG) * $CG;
$ACCUMULATORS
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
$TAP
            }
        }
    }
    let base = (((n * $CO + co) * $OUT_D + od) * $OUT_H + oh) * $OUT_W + ow0;
$STORES
}
