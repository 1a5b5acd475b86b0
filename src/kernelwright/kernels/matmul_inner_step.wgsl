// One K offset of the matmul's multiply written out (UNROLL = 1; kernels/matmul.py).
// Slots: KV, OFFSET, MULTIPLY (the register block's fmas).
        {
            let $KV = $OFFSET;
$MULTIPLY
        }
