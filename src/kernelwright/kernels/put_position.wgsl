// A put's slice position (put_step.wgsl): load_index(k), a negative one counted from the
// end of the put's dim of J. Slots: J.
fn position(k: i32) -> i32 {
    let p = load_index(k);
    return select(p, p + $J, p < 0);
}
