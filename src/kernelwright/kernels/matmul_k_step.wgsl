// One K step of the matmul with two staged buffers (kernels/matmul.py, _matmul): fetch
// the tile at KB into registers, multiply buffer CUR (offsets CUR * SA and CUR * SB),
// store the fetched tile into the other buffer (STORE), then one barrier.
// Slots: KB, FETCH, CUR, SA, SB, INNER, STORE.
        let kb = $KB;
$FETCH
        let aoff = $CUR * $SA;
        let boff = $CUR * $SB;
$INNER
$STORE
        workgroupBarrier();
