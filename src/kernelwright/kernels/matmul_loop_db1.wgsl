// The matmul's K loop with one staged buffer (DB = 1; kernels/matmul.py, _matmul): per
// K step, fetch both operands' tiles at kb into registers, store them, multiply.
// Slots: FIRST, END (the loop's K range), BK, FETCH, STORE (the tiles' fetches and
// stores, _matmul_tile_code), INNER (the multiply of one staged tile).
    for (var k0 = $FIRST; k0 < $END; k0 += $BK) {
        let kb = k0;
$FETCH
$STORE
        workgroupBarrier();
        let aoff = 0;
        let boff = 0;
$INNER
        workgroupBarrier();
    }
