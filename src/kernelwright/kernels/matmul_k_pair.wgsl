// Two K steps per pass of the matmul's loop, one per staged buffer, so that the buffer
// offsets are constants (kernels/matmul.py, _matmul: blocks of up to 32 accumulators).
// Slots: FIRST_STEP, SECOND_STEP (matmul_k_step.wgsl, indented), GUARD (the test that a
// second step remains, or nothing).
        {
$FIRST_STEP
        }
        $GUARD{
$SECOND_STEP
        }
