// Counter-based random numbers: a value is a pure function of (seed, draw, stream, index),
// so a kernel recomputes it wherever it needs it (a dropout mask in the forward and
// again in the backward) and no generator state lives on the GPU.

// A bijective 32-bit mix: one step of a linear congruential generator, then a
// data-dependent xorshift and an odd multiply (a permutation in the manner of PCG's
// output functions), then a final xorshift that folds the high bits down.
fn kw_mix(x: u32) -> u32 {
    let s = x * 747796405u + 2891336453u;
    let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}

// A uniform float in [0, 1) on a grid of 2^-24: the key (seed, draw, stream) chained
// through kw_mix, then the element's index mixed in twice with the key between.
fn kw_uniform(seed: u32, draw: u32, stream: u32, index: u32) -> f32 {
    let key = kw_mix(seed ^ kw_mix(draw ^ kw_mix(stream + 0x9e3779b9u)));
    let h = kw_mix(kw_mix(index ^ key) + key);
    return f32(h >> 8u) * 5.9604644775390625e-8;
}
