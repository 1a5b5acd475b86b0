// The matmul's K loop with two staged buffers (DB = 2; kernels/matmul.py, _matmul): the
// first tile fetched and stored before the loop, then per pass one or two K steps
// (matmul_k_step.wgsl) that multiply one buffer while the next tile goes to the other.
// Slots: FIRST, END (the loop's K range), FETCH, STORE (the first tile's), STEP (K per
// pass), BODY (the pass).
    {
        let kb = $FIRST;
$FETCH
    }
$STORE
    workgroupBarrier();
    for (var k0 = $FIRST; k0 < $END; k0 += $STEP) {
$BODY
    }
