// put_step.wgsl's LATEST where a put has several slices: whether no slice after k has
// position p (p is then written by slice k alone). Slots: K.
fn latest(k: i32, p: i32) -> bool {
    for (var k2 = k + 1; k2 < $K; k2 += 1) {
        if (position(k2) == p) {
            return false;
        }
    }
    return true;
}
