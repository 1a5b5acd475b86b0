// One row's reduction in the gemv template (kernels/gemv.wgsl): the KS partial sums of
// each column group (ACC, the invocation's accumulator of row ROW) added by a tree in
// workgroup memory (STRIDE: from one K slice's entry to the next), then stored by the
// first slice (STORE).
    workgroupBarrier();
    red[lin] = $ACC;
    workgroupBarrier();
    for (var h = $HALF; h > 0; h = h / 2) {
        if (s < h) {
            red[lin] = red[lin] + red[lin + h * $STRIDE];
        }
        workgroupBarrier();
    }
    if (s == 0 && live) {
        let v = red[lin];
        let m = $ROW;
$STORE
    }