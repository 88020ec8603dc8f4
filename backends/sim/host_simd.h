// Fixed-width float vectors for the host kernels (GCC/Clang vector extensions): element-wise
// IEEE f32 arithmetic, so a loop over W lanes computes exactly the bits of W scalar chains --
// which is how the contract's eight dot8 partial sums become vector registers. W = 4 is one
// SSE register (the x86-64 baseline, no -march flag needed); W = 8 is two of them there, or
// one AVX register where a translation unit is built for it.
//
// Everything is a template on W, and only the instantiations a translation unit asks for are
// compiled there, so code built for a wider instruction set can never be linked in place of
// the baseline's.
//
// Thread rule: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "compute/kernel_math.h"

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
inline F<W> load(const float* p) {
  F<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int W>
inline void store(float* p, F<W> v) {
  std::memcpy(p, &v, sizeof v);
}
template <int W>
inline F<W> splat(float x) {
  F<W> v;
  for (int i = 0; i < W; ++i) v[i] = x;
  return v;
}
template <int W>
inline F<W> zero() {
  return F<W>{};
}
// Lane-wise mask ? a : b (mask lanes all-ones or all-zeros, as comparisons give).
template <int W>
inline F<W> select(I<W> mask, F<W> a, F<W> b) {
  return (F<W>)(((I<W>)a & mask) | ((I<W>)b & ~mask));
}

// kernel_math::exp_f32 on every lane: the same steps, so the same bits.
template <int W>
inline F<W> exp_f32(F<W> x) {
  namespace km = kernel_math;
  const I<W> nan = x != x;
  const I<W> low = x < splat<W>(km::kExpLowest);
  const I<W> high = x > splat<W>(km::kExpHighest);
  const I<W> special = nan | low | high;
  const F<W> xs = select<W>(special, zero<W>(), x);
  const F<W> n = (xs * splat<W>(km::kLog2e) + splat<W>(km::kRoundMagic)) - splat<W>(km::kRoundMagic);
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

// The contract's combining tree for W outputs at once: p[o * (8 / W) + v] holds lanes
// v * W .. of output o's eight partial sums, and lane o of the result is
// ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7)) of output o: the partial sums transposed into vectors
// over outputs, then added in the tree's order.
template <int W>
inline F<W> tree8_of(const F<W> p[8]) {
  if constexpr (W == 4) {
    auto transpose = [](F<4> a, F<4> b, F<4> c, F<4> d, F<4> out[4]) {
      const F<4> t0 = __builtin_shufflevector(a, b, 0, 4, 1, 5);
      const F<4> t1 = __builtin_shufflevector(a, b, 2, 6, 3, 7);
      const F<4> t2 = __builtin_shufflevector(c, d, 0, 4, 1, 5);
      const F<4> t3 = __builtin_shufflevector(c, d, 2, 6, 3, 7);
      out[0] = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
      out[1] = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
      out[2] = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
      out[3] = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
    };
    F<4> lo[4], hi[4];
    transpose(p[0], p[2], p[4], p[6], lo);  // partials 0..3 of outputs 0..3
    transpose(p[1], p[3], p[5], p[7], hi);  // partials 4..7
    return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
  } else {
    static_assert(W == 8);
    F<8> t[8];
    for (int j = 0; j < 8; ++j) {
      for (int o = 0; o < 8; ++o) t[j][o] = p[o][j];
    }
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
  }
}

}  // namespace siesta::host_simd
