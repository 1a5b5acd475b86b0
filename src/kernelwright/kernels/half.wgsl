// Narrowing f32 to the packed half types (dtypes.PACKED), rounding to nearest even as
// PyTorch does, in integer arithmetic (WGSL leaves pack2x16float's rounding and its
// overflow to the implementation): f16 overflows to infinity, a NaN stays a quiet NaN,
// values below f16's normal range round to its subnormals. kw_pack_f16 / kw_pack_bf16
// put two elements into one u32 word, the first in the low half (codegen.read_packed
// reads them so); kw_round_f16 / kw_round_bf16 give the f32 value such a word holds
// (codegen.round_packed: a value read as it will be stored, before it is).

fn kw_f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7e00u;
    }
    if (a >= 0x477ff000u) {  // 65520 and above: past the largest f16 (65504) by half a step
        return sign | 0x7c00u;
    }
    if (a >= 0x38800000u) {  // normal: exponent rebiased by 127 - 15, 13 mantissa bits cut
        let m = a - 0x38000000u;
        return sign | ((m + 0xfffu + ((m >> 13u) & 1u)) >> 13u);
    }
    if (a <= 0x33000000u) {  // 2^-25 and below: zero (2^-25 ties to even, zero)
        return sign;
    }
    // subnormal: units of 2^-24, the mantissa (with its hidden bit) shifted by 126 - e
    let shift = 126u - (a >> 23u);
    let mant = (a & 0x7fffffu) | 0x800000u;
    let k = mant >> shift;
    let rest = mant & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    let up = rest > half || (rest == half && (k & 1u) == 1u);
    return sign | (k + select(0u, 1u, up));
}

fn kw_bf16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return (b >> 16u) | 0x40u;
    }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

fn kw_pack_f16(lo: f32, hi: f32) -> u32 {
    return kw_f16_bits(lo) | (kw_f16_bits(hi) << 16u);
}

fn kw_pack_bf16(lo: f32, hi: f32) -> u32 {
    return kw_bf16_bits(lo) | (kw_bf16_bits(hi) << 16u);
}

fn kw_round_f16(x: f32) -> f32 {
    return unpack2x16float(kw_f16_bits(x)).x;
}

fn kw_round_bf16(x: f32) -> f32 {
    return bitcast<f32>(kw_bf16_bits(x) << 16u);
}
