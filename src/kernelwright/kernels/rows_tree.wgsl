// A row kernel's tree reduction of its partial results (kernels/rows.py, _rows): the TPR
// invocations of a row combine partial_J pairwise, halving each round.
// Slots: J (the phase), HALF (TPR / 2), TS (the stride between a row's invocations).
    partial_$J[li] = a$J;
    workgroupBarrier();
    for (var s = $HALF; s > 0; s = s / 2) {
        if (t < s) { partial_$J[li] = combine_$J(partial_$J[li], partial_$J[li + s * $TS]); }
        workgroupBarrier();
    }
