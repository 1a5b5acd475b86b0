// Scaled dot-product attention of few queries (LQ <= 8 per batch * head: a decoding
// step's new tokens against a KV cache), out[b, i, c] = sum_j P(b, i, j) * V(b, j, c),
// P = softmax_j(Q(b, i, :) . K(b, j, :) * SCALE + MASK(b, i, j)), the scores never
// stored. One workgroup per (batch * head b, span p of SPAN keys): the queries are
// staged once (pre-scaled), then the span is walked in blocks of WG keys, online
// softmax: invocation t computes the LQ scores of key k0 + t (its dot products over E,
// reading the key's row), the block's maximum of each query is read by every
// invocation from workgroup memory (all find the same), the running sums and outputs
// are rescaled by exp(m_old - m_new), the key's owner writes its probabilities, and
// the outputs are accumulated by invocation (kh, c): value columns c + CW * d (d < CV)
// over the block's keys kh, kh + KH, ... (V read along its rows, CW columns at a time).
// Each invocation keeps its own part of a query's sum and outputs; the parts are added
// once, at the end. With NP = 1 the kernel stores the normalized output [b, i, c] (a
// query whose keys are all masked: zeros, as PyTorch); with NP > 1 each span stores
// its part, [b, i, p, EV + 2]: the unnormalized output, the maximum and the sum, which
// a small elementwise kernel combines (lower/attention.py). With CAUSAL, key j is kept
// for query i only when j <= i (KEND bounds the keys). Registers are named scalars (the
// template unrolls the queries and columns). load_q / load_k / load_v (and load_mask)
// are loaders: a RoPE on q, GQA's repeated heads, a half cache and a mask cost no copy.
// A cache whose update by the step's new keys or values (a put of one slot) the loaders
// read inline (schedule.fuse) is bound read_write: the loaders take the new slot's
// elements as computed (codegen.Emitter._put), and PUTS stores them into the cache, each
// element by one invocation of the grid (kernels/put.fused_puts), so no other kernel
// writes them first. Slots: BINDINGS, FUNCTIONS, SHARED (the tiles), PUTS, LQ, E, WG,
// CW, KH, NP, SPAN, KEND, GROUPS, GRID_X, SCALE, REGISTERS, SCORES, MAXIMA, SOFTMAX,
// OUTPUTS, TOTALS, STORES.
$BINDINGS
$FUNCTIONS
$SHARED

@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let neg_inf = kw_f32_bits(0xff800000u);  // not a constant: WGSL forbids -inf
    let flat = i32(wid.x) + i32(wid.y) * $GRID_X;
    if (flat >= $GROUPS) {
        return;  // the whole workgroup: the barriers below stay uniform
    }
    let b = flat / $NP;
    let p = flat % $NP;
    let t = i32(li);
    let c = t % $CW;
    let kh = t / $CW;
$PUTS
    for (var x = t; x < $LQ * $E; x += $WG) {
        q_tile[x] = load_q(b, x / $E, x % $E) * $SCALE;
    }
    let k_lo = p * $SPAN;
    let k_hi = min(k_lo + $SPAN, $KEND);
$REGISTERS
    for (var k0 = k_lo; k0 < k_hi; k0 += $WG) {
        workgroupBarrier();  // the queries staged; the previous block's tiles read
        let j = k0 + t;
$SCORES
        workgroupBarrier();
$MAXIMA
$SOFTMAX
        workgroupBarrier();
        let jn = min($WG, k_hi - k0);
        for (var jj = kh; jj < jn; jj += $KH) {
            let jv = k0 + jj;
$OUTPUTS
        }
    }
    workgroupBarrier();
$TOTALS
$STORES
}
