// The matmul's multiply of one staged tile as a loop (UNROLL = 0; kernels/matmul.py):
// K offset KV from 0 to BK by STEP (1, or 4 with vec4 fragments). Slots: KV, BK, STEP,
// MULTIPLY (the register block's fmas for one offset).
        for (var $KV = 0; $KV < $BK; $KV += $STEP) {
$MULTIPLY
        }
