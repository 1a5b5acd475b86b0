// The transposing tile's loads (kernels/elementwise.py, _transpose_tile): each
// invocation row computes the 32 columns of B it covers, EPT times, into the staged
// tile. Slots: ROWS (invocation rows), TB (tile columns along B), SIZE_A, SIZE_B,
// STRIDE_B, ROW (a staged row's length), VALUE (the stored value of element gi).
    for (var j = 0; j < 32; j += $ROWS) {
        for (var h = 0; h < $TB; h += 32) {
            let a = a0 + ty + j;
            let b = b0 + tx + h;
            if (a < $SIZE_A && b < $SIZE_B) {
                let gi = base + b * $STRIDE_B + a;
                tile[(ty + j) * $ROW + tx + h] = $VALUE;
            }
        }
    }
