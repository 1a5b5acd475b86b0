// One accumulator tile of the accelerated matmul stored (kernels/matmul_coop.py): the
// subgroup writes it to its workgroup scratch, then each lane stores its elements
// through the epilogue. Slots: STORE_OP (coopStore or coopStoreT), ACC, SUBGROUP,
// ROW_OFF, COL_OFF (the tile's offset in the warp tile), M, N, CELL (the element's
// scratch index), STORE (the store statement, filled by fill_kernel).
    $STORE_OP($ACC, &tile_c[cbase], 16u);
    workgroupBarrier();
    for (var e = i32(lane); e < 256; e += $SUBGROUP) {
        let r = e / 16; let c = e % 16; let m = m0 + wm + $ROW_OFF + r; let n = n0 + wn + $COL_OFF + c;
        if (m < $M && n < $N) { let gi = (b * $M + m) * $N + n; let acc = tile_c[cbase + $CELL]; $$STORE }
    }
    workgroupBarrier();
