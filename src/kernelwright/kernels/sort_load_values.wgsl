// sort.wgsl's LOAD from the values: x's element g of the row (a, b) as its key, g its
// index; past the row's R elements a padding pair, after every element (its key the
// largest, its index larger). Slots: R, KEY, FLIP.
        var key = 0xffffffffu;
        if (g < $R) {
            key = $FLIP$KEY(load_x(a, g, b));
        }
        keys[r] = key;
        idxs[r] = g;
