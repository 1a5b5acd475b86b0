// The K loop of the accelerated matmul with two staged buffers per operand (STAGES 2,
// kernels/matmul_coop.py): step t multiplies from buffer t % 2 (at ra, rb) while the
// next tiles go to the other (at wa, wb), one barrier a step. FIRST fetches and stores
// the first tiles; FETCH_NEXT fetches the next ones (PREFETCH 0: and stores them at
// once); PUT_LATE (PREFETCH 1) stores them after the multiplies, which hide the loads'
// latency. Slots: K, BK, TK (the matrix's k), A_STAGE, B_STAGE (a buffer's f16
// elements), FIRST, FETCH_NEXT, MULTIPLY, PUT_LATE.
$FIRST
    workgroupBarrier();
    for (var k0 = 0; k0 < $K; k0 += $BK) {
        let ra = ((k0 / $BK) & 1) * $A_STAGE; let wa = $A_STAGE - ra;
        let rb = ((k0 / $BK) & 1) * $B_STAGE; let wb = $B_STAGE - rb;
$FETCH_NEXT
        for (var kk = 0; kk < $BK; kk += $TK) {
$MULTIPLY
        }
$PUT_LATE
        workgroupBarrier();
    }
