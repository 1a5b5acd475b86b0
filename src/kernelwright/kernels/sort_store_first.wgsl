// sort.wgsl's STORES for a whole row: the indices of its first K pairs, out[a, k, b].
// Slots: WG, K, B (STORE is left for the kernel's store statement).
        for (var r = li; r < $K; r += $WG) {
            let gi = (a * $K + r) * $B + b;
            let acc = idxs[r];
            $STORE
        }
