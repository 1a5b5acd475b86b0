// The K loop of the accelerated matmul with one staged buffer per operand (STAGES 1,
// kernels/matmul_coop.py). PREFETCH 0: each step fetches its tiles (FETCH_NOW) and
// stores them (PUT); PREFETCH 1: the first tiles are fetched before the loop
// (FETCH_FIRST), and each step fetches the next tiles into registers (FETCH_NEXT) before
// its multiplies, which hide those loads' latency. Slots: K, BK, TK (the matrix's k),
// FETCH_FIRST, FETCH_NOW, PUT, FETCH_NEXT, MULTIPLY.
$FETCH_FIRST
    for (var k0 = 0; k0 < $K; k0 += $BK) {
$FETCH_NOW
$PUT
        workgroupBarrier();
$FETCH_NEXT
        for (var kk = 0; kk < $BK; kk += $TK) {
$MULTIPLY
        }
        workgroupBarrier();
    }
