// One compare-exchange pass of the sort of rows longer than one workgroup holds
// (lower/sorting.py) over pairs x[A, 2 * P, B]: pair i's key (u32 bits) at 2 * i, its
// index at 2 * i + 1. Invocation t of a row (P / 2 of them) takes the pair at
// i = (t / H) * 2H + t % H (bit H of i clear) and its partner i ^ MASK (MASK = H: a
// half-cleaner; MASK = 2H - 1: i's mirror in its block of 2H), and stores the smaller
// pair (by key, then index) at i, the larger at the partner. Each invocation owns both
// of its pairs, so every pair of out is written once.
// Slots: BINDINGS, FUNCTIONS (load_x, epilogue), WG, P, H, MASK, B, PAIRS (A * B * P / 2),
// GRID_X (invocations per grid row), STORE.
$BINDINGS
$FUNCTIONS

@compute @workgroup_size($WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = i32(gid.x) + i32(gid.y) * $GRID_X;
    if (n >= $PAIRS) {
        return;
    }
    let row = n / ($P / 2);
    let t = n % ($P / 2);
    let a = row / $B;
    let b = row % $B;
    let i = (t / $H) * (2 * $H) + t % $H;
    let j = i ^ $MASK;
    let ki = bitcast<u32>(load_x(a, 2 * i, b));
    let ii = load_x(a, 2 * i + 1, b);
    let kj = bitcast<u32>(load_x(a, 2 * j, b));
    let ij = load_x(a, 2 * j + 1, b);
    let swap = ki > kj || (ki == kj && ii > ij);  // pair i sorts after pair j
    let lo = select(vec2<i32>(bitcast<i32>(ki), ii), vec2<i32>(bitcast<i32>(kj), ij), swap);
    let hi = select(vec2<i32>(bitcast<i32>(kj), ij), vec2<i32>(bitcast<i32>(ki), ii), swap);
    let base = a * 2 * $P;
    {
        let gi = (base + 2 * i) * $B + b;
        let acc = lo.x;
        $STORE
    }
    {
        let gi = (base + 2 * i + 1) * $B + b;
        let acc = lo.y;
        $STORE
    }
    {
        let gi = (base + 2 * j) * $B + b;
        let acc = hi.x;
        $STORE
    }
    {
        let gi = (base + 2 * j + 1) * $B + b;
        let acc = hi.y;
        $STORE
    }
}
