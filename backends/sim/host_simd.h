// Fixed-width float vectors for the host kernels (GCC/Clang vector extensions): element-wise
// IEEE f32 arithmetic, so a loop over W lanes computes exactly the bits of W scalar chains --
// which is how the contract's eight dot8 partial sums become vector registers. W = 4 is one
// SSE register (the x86-64 baseline, no -march flag needed); W = 8 is two of them there, or
// one AVX register where a translation unit is built for it.
//
// Everything is a template on W, marked SIESTA_SIMD: a translation unit that instantiates the
// wide loops defines SIESTA_SIMD_TARGET first (host_kernel_loops_avx2.cc:
// __attribute__((target("avx2")))), so those instantiations, and only they, are compiled for
// that instruction set, while the file as a whole keeps the baseline's flags (no function it
// shares with other files, a standard library one say, can come out built for AVX2). No FMA
// is ever enabled: the bits are those of the baseline.
//
// Thread rule: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "compute/kernel_math.h"

#if defined(SIESTA_SIMD_F16C)
#include <immintrin.h>
#endif

#ifndef SIESTA_SIMD_TARGET
#define SIESTA_SIMD_TARGET
#endif
#define SIESTA_SIMD inline SIESTA_SIMD_TARGET

namespace siesta::host_simd {

template <int W>
struct Simd;
template <>
struct Simd<4> {
  typedef float F __attribute__((vector_size(16)));
  typedef int32_t I __attribute__((vector_size(16)));
};
template <>
struct Simd<8> {
  typedef float F __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
};

template <int W>
using F = typename Simd<W>::F;
template <int W>
using I = typename Simd<W>::I;

template <int W>
SIESTA_SIMD F<W> load(const float* p) {
  F<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int W>
SIESTA_SIMD void store(float* p, F<W> v) {
  std::memcpy(p, &v, sizeof v);
}
template <int W>
SIESTA_SIMD F<W> splat(float x) {
  F<W> v = {};
#pragma GCC unroll 8
  for (int i = 0; i < W; ++i) v[i] = x;
  return v;
}
template <int W>
SIESTA_SIMD F<W> zero() {
  return F<W>{};
}
// Lane-wise mask ? a : b (mask lanes all-ones or all-zeros, as comparisons give).
template <int W>
SIESTA_SIMD F<W> select(I<W> mask, F<W> a, F<W> b) {
  return (F<W>)(((I<W>)a & mask) | ((I<W>)b & ~mask));
}

// kernel_math::exp_f32 on every lane: the same steps, so the same bits.
template <int W>
SIESTA_SIMD F<W> exp_f32(F<W> x) {
  namespace km = kernel_math;
  const I<W> nan = x != x;
  const I<W> low = x < splat<W>(km::kExpLowest);
  const I<W> high = x > splat<W>(km::kExpHighest);
  const I<W> special = nan | low | high;
  const F<W> xs = select<W>(special, zero<W>(), x);
  const F<W> n =
      (xs * splat<W>(km::kLog2e) + splat<W>(km::kRoundMagic)) - splat<W>(km::kRoundMagic);
  F<W> r = xs - n * splat<W>(km::kLn2Hi);
  r = r - n * splat<W>(km::kLn2Lo);
  F<W> y = splat<W>(km::kExpP0);
  y = y * r + splat<W>(km::kExpP1);
  y = y * r + splat<W>(km::kExpP2);
  y = y * r + splat<W>(km::kExpP3);
  y = y * r + splat<W>(km::kExpP4);
  y = y * r + splat<W>(km::kExpP5);
  y = (y * (r * r) + r) + splat<W>(1.0f);
  const I<W> exponent = (__builtin_convertvector(n, I<W>) + 127) << 23;
  y = y * (F<W>)exponent;
  const F<W> inf = (F<W>)(I<W>{} + 0x7f800000);
  return select<W>(nan, x, select<W>(low, zero<W>(), select<W>(high, inf, y)));
}

// half_float::float_from_half on W halves at once, exactly: a finite half's 15 low bits
// shifted into a float's place are the value times 2^-112 (a float subnormal for a half
// subnormal), so one multiplication by 2^112 gives the value; infinities keep their sign and
// every NaN becomes 0x7fffffff, as the scalar conversion does.
template <int W>
SIESTA_SIMD void halves_to_floats(const std::byte* in, float* out) {
#if defined(SIESTA_SIMD_F16C)
  if constexpr (W == 8) {
    // The processor's conversion is exact too; only its NaNs keep their payload and sign,
    // so they are made canonical as above.
    __m128i h;
    std::memcpy(&h, in, sizeof h);
    const __m256 converted = _mm256_cvtph_ps(h);
    F<8> v;
    std::memcpy(&v, &converted, sizeof v);
    store<8>(out, select<8>(v != v, (F<8>)(I<8>{} + 0x7fffffff), v));
    return;
  }
#endif
  uint16_t h[W];
  std::memcpy(h, in, sizeof h);
  I<W> bits = {};
#pragma GCC unroll 8
  for (int i = 0; i < W; ++i) bits[i] = h[i];
  const I<W> magnitude = bits & 0x7fff;
  const I<W> sign = (bits & 0x8000) << 16;
  const F<W> finite = (F<W>)(magnitude << 13) * splat<W>(0x1p112f);
  const I<W> special = magnitude >= 0x7c00;
  const I<W> nan = magnitude > 0x7c00;
  const I<W> inf_bits = sign | 0x7f800000;
  I<W> result = sign | (I<W>)finite;
  result = (result & ~special) | (inf_bits & special & ~nan) | (0x7fffffff & nan);
  store<W>(out, (F<W>)result);
}

// Pairwise sums within each four-lane group: [a0+a1, a2+a3, b0+b1, b2+b3] per group (what
// SSE3/AVX haddps computes; plain shuffles and one addition here).
template <int W>
SIESTA_SIMD F<W> hadd(F<W> a, F<W> b) {
  if constexpr (W == 4) {
    return __builtin_shufflevector(a, b, 0, 2, 4, 6) + __builtin_shufflevector(a, b, 1, 3, 5, 7);
  } else {
    static_assert(W == 8);
    return __builtin_shufflevector(a, b, 0, 2, 8, 10, 4, 6, 12, 14) +
           __builtin_shufflevector(a, b, 1, 3, 9, 11, 5, 7, 13, 15);
  }
}

// The contract's combining tree for W outputs at once: p[o * (8 / W) + v] holds lanes
// v * W .. of output o's eight partial sums, and lane o of the result is
// ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7)) of output o: each level of the tree is one pairwise
// sum over vectors of outputs, so every addition is the tree's own.
template <int W>
SIESTA_SIMD F<W> tree8_of(const F<W> p[8]) {
  if constexpr (W == 4) {
    // p[2o] = (s0..s3), p[2o + 1] = (s4..s7) of output o.
    const F<4> low = hadd<4>(hadd<4>(p[0], p[2]), hadd<4>(p[4], p[6]));   // (s0+s1)+(s2+s3)
    const F<4> high = hadd<4>(hadd<4>(p[1], p[3]), hadd<4>(p[5], p[7]));  // (s4+s5)+(s6+s7)
    return low + high;
  } else {
    static_assert(W == 8);
    // p[o] = (s0..s7) of output o; after two levels, lanes 0-3 of g0 hold outputs 0-3's
    // (s0+s1)+(s2+s3) and lanes 4-7 their (s4+s5)+(s6+s7); g1 the same for outputs 4-7.
    const F<8> g0 = hadd<8>(hadd<8>(p[0], p[1]), hadd<8>(p[2], p[3]));
    const F<8> g1 = hadd<8>(hadd<8>(p[4], p[5]), hadd<8>(p[6], p[7]));
    return __builtin_shufflevector(g0, g1, 0, 1, 2, 3, 8, 9, 10, 11) +
           __builtin_shufflevector(g0, g1, 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

}  // namespace siesta::host_simd
