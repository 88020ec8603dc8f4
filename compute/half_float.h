// IEEE 754 binary16 ("half") <-> binary32 conversions, bit for bit what CUDA's
// __float2half_rn and __half2float give, so the host kernels, the CUDA kernels and the tests
// agree exactly on what an f16 KV row holds. Header-only, constexpr, no dependencies.
//
//   half_from_float  round to nearest, ties to even; subnormal halves produced (never
//                    flushed); |x| >= 65520 becomes +-inf; +-inf stays +-inf; every NaN becomes
//                    0x7fff (CUDA's canonical NaN: sign and payload dropped).
//   float_from_half  exact (every half is a float); every NaN becomes 0x7fffffff (CUDA's
//                    __half2float likewise drops sign and payload).
#pragma once

#include <bit>
#include <cstdint>

namespace siesta::half_float {

// The bits of the half nearest to `value` (ties to even).
constexpr uint16_t half_from_float(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // inf or NaN
    return magnitude == 0x7f800000u ? static_cast<uint16_t>(sign | 0x7c00u) : uint16_t{0x7fff};
  }
  // From here on: the truncated half `result` plus `remainder`, the discarded bits as a
  // fraction of one half-ulp scaled to 2^32 (0x80000000 = exactly half an ulp).
  uint32_t result = 0;
  uint32_t remainder = 0;
  if (magnitude > 0x477fefffu) {  // >= 65520 (the midpoint above the largest half): overflow
    result = sign | 0x7bffu;      // 65504, odd, with a remainder of one half: rounds to inf
    remainder = 0x80000000u;
  } else if (magnitude >= 0x38800000u) {  // >= 2^-14: a normal half
    remainder = magnitude << 19;
    result = sign | ((magnitude - 0x38000000u) >> 13);  // rebias the exponent by 127 - 15
  } else if (magnitude < 0x33000001u) {  // <= 2^-25 (half the smallest subnormal): zero
    remainder = magnitude;               // non-zero only below the tie, so never rounds up
    result = sign;
  } else {  // a subnormal half: shift the mantissa, its hidden bit included, into place
    const uint32_t exponent = magnitude >> 23;
    const uint32_t shift = 0x7eu - exponent;  // 14..24 for exponents 102..112
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    remainder = mantissa << (32 - shift);
    result = sign | (mantissa >> shift);
  }
  if (remainder > 0x80000000u || (remainder == 0x80000000u && (result & 1u) != 0)) {
    ++result;  // a carry out of the mantissa correctly bumps the exponent (up to inf)
  }
  return static_cast<uint16_t>(result);
}

// The float equal to the half `bits`.
constexpr float float_from_half(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits >> 15) & 1u;
  uint32_t exponent = static_cast<uint32_t>(bits >> 10) & 0x1fu;
  uint32_t mantissa = static_cast<uint32_t>(bits & 0x3ffu) << 13;
  if (exponent == 0x1fu) {  // inf or NaN
    if (mantissa != 0) {
      sign = 0;
      mantissa = 0x7fffffu;
    }
    exponent = 0xffu;
  } else if (exponent == 0) {
    if (mantissa != 0) {  // subnormal half: normalise, it is a normal float
      exponent = 0x71u;   // 127 - 15 + 1, minus one per shift below
      do {
        --exponent;
        mantissa <<= 1;
      } while ((mantissa & 0x800000u) == 0);
      mantissa &= 0x7fffffu;
    }
  } else {
    exponent += 0x70u;  // rebias 15 -> 127
  }
  return std::bit_cast<float>((sign << 31) | (exponent << 23) | mantissa);
}

}  // namespace siesta::half_float
