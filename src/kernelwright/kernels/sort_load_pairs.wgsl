// sort.wgsl's LOAD from pairs x[A, 2 * P, B] an earlier pass stored: pair g's key (u32
// bits) at 2 * g, its index at 2 * g + 1. No slots.
        keys[r] = bitcast<u32>(load_x(a, 2 * g, b));
        idxs[r] = load_x(a, 2 * g + 1, b);
