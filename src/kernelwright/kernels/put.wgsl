// Put kernel (GraphBuilder.put, an index_copy): the output already holds the tensor
// (the state the put updates, or a copy of it made just before); each invocation takes
// EPT elements of the new slices v, THREADS apart, and stores each at its slice's
// position along the put's dim. Elements are [OUTER, K, INNER] in v and [OUTER, J, INNER]
// in the output; `load_index(k)` is slice k's position, negative ones counted from the
// end, positions outside [0, J) write nothing, and of several slices at one position the
// last one writes (`LATEST`: no later slice has the same position).
// A packed half output (PAIR 2) is written a word at a time: a step takes two
// neighbouring elements of one slice (INNER is even), which fill one word.
// Slots: BINDINGS, FUNCTIONS (load_index, load_v), WG, ROW, THREADS, EPT, STEPS (v's
// elements / PAIR), PAIR, K, J, INNER, LATEST (a bool expression of k and p), WRITE
// (the store of element e, or of the pair from e, at the output's element d).
$BINDINGS
$FUNCTIONS
fn position(k: i32) -> i32 {
    let p = load_index(k);
    return select(p, p + $J, p < 0);
}

@compute @workgroup_size($WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let base = i32(gid.x) + i32(gid.y) * $ROW;
    if (base >= $THREADS) {
        return;
    }
    for (var u = 0; u < $EPT; u += 1) {
        let q = base + u * $THREADS;
        if (q < $STEPS) {
            let e = q * $PAIR;
            let k = (e / $INNER) % $K;
            let p = position(k);
            if (p >= 0 && p < $J && $LATEST) {
                let d = ((e / ($INNER * $K)) * $J + p) * $INNER + e % $INNER;
                $WRITE
            }
        }
    }
}
