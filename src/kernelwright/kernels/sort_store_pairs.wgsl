// sort.wgsl's STORES for a chunk: its pairs, pair g of the row's PADDED as out[a, 2 * g,
// b] (the key's bits) and out[a, 2 * g + 1, b] (the index). Slots: WG, P, PADDED, B
// (STORE is left for the kernel's store statement).
        for (var r = li; r < $P; r += $WG) {
            let g = c0 + r;
            {
                let gi = (a * 2 * $PADDED + 2 * g) * $B + b;
                let acc = bitcast<i32>(keys[r]);
                $STORE
            }
            {
                let gi = (a * 2 * $PADDED + 2 * g + 1) * $B + b;
                let acc = idxs[r];
                $STORE
            }
        }
