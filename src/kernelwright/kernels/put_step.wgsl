// One step q of a put (GraphBuilder.put, an index_copy), the BODY of the elementwise
// template (elementwise.wgsl: EPT steps an invocation, THREADS apart): the output
// already holds the tensor (the state the put updates, or a copy of it made just
// before); step q takes element e of the new slices v and stores it at its slice's
// position along the put's dim. Elements are [OUTER, K, INNER] in v and [OUTER, J, INNER]
// in the output; `position(k)` is slice k's position (load_index, negative ones counted
// from the end), positions outside [0, J) write nothing, and of several slices at one
// position the last one writes (`LATEST`: no later slice has the same position).
// A packed half output (PAIR 2) is written a word at a time: a step takes two
// neighbouring elements of one slice (INNER is even), which fill one word.
// Slots: PAIR, K, J, INNER, LATEST (a bool expression of k and p), WRITE (the store of
// element e, or of the pair from e, at the output's element d), P (the prefix of the
// put's functions: ${P}position, ${P}load_v).
let e = q * $PAIR;
            let k = (e / $INNER) % $K;
            let p = ${P}position(k);
            if (p >= 0 && p < $J && $LATEST) {
                let d = ((e / ($INNER * $K)) * $J + p) * $INNER + e % $INNER;
                $WRITE
            }
