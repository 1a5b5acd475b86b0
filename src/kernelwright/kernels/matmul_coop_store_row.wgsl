// One row of accumulators of the accelerated matmul stored (EPI "row",
// kernels/matmul_coop.py): the subgroup writes the m x WN strip to its workgroup scratch,
// then its lanes store it through the epilogue, consecutive lanes on consecutive columns
// of the output's rows (WN wide, not one matrix's n). Slots: STORE_ACCS (the matrix store
// statements), SUBGROUP, STRIP (elements of the strip), WN, ROW_OFF (its offset in the
// warp tile), M, N, GI (element (b, m, n)'s output index: kernels.matmul.output_index),
// CELL (the element's scratch index), STORE (the store statement, filled by fill_kernel).
    $STORE_ACCS
    workgroupBarrier();
    for (var e = i32(lane); e < $STRIP; e += $SUBGROUP) {
        let r = e / $WN; let c = e % $WN; let m = m0 + wm + $ROW_OFF + r; let n = n0 + wn + c;
        if (m < $M && n < $N) { let gi = $GI; let acc = tile_c[cbase + $CELL]; $$STORE }
    }
    workgroupBarrier();
