// One accumulator of the accelerated matmul stored (kernels/matmul_coop.py): the
// subgroup writes it to its workgroup scratch, then each lane stores its elements
// through the epilogue. Slots: STORE_ACC (the matrix store statement), SUBGROUP, CELLS
// (elements of one result matrix), COLS (its columns), ROW_OFF, COL_OFF (its offset in
// the warp tile), M, N, GI (element (b, m, n)'s output index: kernels.matmul.output_index),
// CELL (the element's scratch index), STORE (the store statement, filled by fill_kernel).
    $STORE_ACC
    workgroupBarrier();
    for (var e = i32(lane); e < $CELLS; e += $SUBGROUP) {
        let r = e / $COLS; let c = e % $COLS; let m = m0 + wm + $ROW_OFF + r; let n = n0 + wn + $COL_OFF + c;
        if (m < $M && n < $N) { let gi = $GI; let acc = tile_c[cbase + $CELL]; $$STORE }
    }
    workgroupBarrier();
