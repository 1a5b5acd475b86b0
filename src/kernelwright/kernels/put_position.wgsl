// A put's slice position (put_step.wgsl): load_index(k), a negative one counted from the
// end of the put's dim of J. Slots: J, P (the prefix of the put's function names: several
// puts in one kernel, kernels/put.fused_puts).
fn ${P}position(k: i32) -> i32 {
    let p = ${P}load_index(k);
    return select(p, p + $J, p < 0);
}
