// The scalar pieces of the arithmetic contract (compute/kernel_contract.h) that every backend
// must compute identically, written once: compiled for the host by HostKernels and the tests,
// and for the device by nvcc (CudaKernels), so that the two agree bit for bit where the
// contract says they do. Only IEEE f32 additions, multiplications, comparisons and integer
// operations, each rounded on its own: built without fused multiply-adds (host: no FMA in the
// x86-64 baseline, and -ffp-contract=off; CUDA: --fmad=false) they give the same bits on every
// machine and at every vector width.
//
// Thread rule: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SIESTA_HOST_DEVICE __host__ __device__
#else
#define SIESTA_HOST_DEVICE
#endif

namespace siesta::kernel_math {

// Attention reads its rows in tiles of kAttentionTile positions and tiles in chunks of
// kAttentionChunk positions, both aligned at multiples of their size from position 0, so the
// grouping of every sum depends on the positions alone (compute/kernel_contract.h).
inline constexpr uint32_t kAttentionTile = 64;
inline constexpr uint32_t kAttentionChunk = 1024;

// exp_f32's constants (Cephes' expf): the range reduction x = n ln 2 + r with ln 2 split in a
// short exact part and a correction, then a degree-5 polynomial for e^r on |r| <= ln(2) / 2.
inline constexpr float kExpLowest = -87.0f;  // below: 0 (e^-87 is still a normal float)
inline constexpr float kExpHighest = 88.0f;  // above: +inf (e^88 is still finite)
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: (t + M) - M rounds t to even
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpP0 = 1.9875691500e-4f;
inline constexpr float kExpP1 = 1.3981999507e-3f;
inline constexpr float kExpP2 = 8.3334519073e-3f;
inline constexpr float kExpP3 = 4.1665795894e-2f;
inline constexpr float kExpP4 = 1.6666665459e-1f;
inline constexpr float kExpP5 = 5.0000001201e-1f;

SIESTA_HOST_DEVICE inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// e^x for the attention softmax, the contract's own exponential: within 2 ulp of e^x for
// x in [-87, 88] (tests/unit/kernel_numerics_test.cc measures it), exactly 1 at 0, +0 below
// -87 (-inf included), +inf above 88, NaN for NaN. Never -0.
SIESTA_HOST_DEVICE inline float exp_f32(float x) {
  if (x != x) return x;
  if (x < kExpLowest) return 0.0f;
  if (x > kExpHighest) return bits_to_float(0x7f800000u);
  const float n = (x * kLog2e + kRoundMagic) - kRoundMagic;
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float y = kExpP0;
  y = y * r + kExpP1;
  y = y * r + kExpP2;
  y = y * r + kExpP3;
  y = y * r + kExpP4;
  y = y * r + kExpP5;
  y = (y * (r * r) + r) + 1.0f;
  // n is an integer in [-126, 127] here, so 2^n is a normal float.
  const uint32_t exponent = static_cast<uint32_t>(static_cast<int32_t>(n) + 127);
  return y * bits_to_float(exponent << 23);
}

// The contract's max: the second operand when it is greater, else the first (with no NaN
// among the scores, every maximum of a set is then the same whatever the order).
SIESTA_HOST_DEVICE inline float max_f32(float a, float b) { return a < b ? b : a; }

// The dot8 combining tree over eight partial sums (compute/kernel_contract.h).
SIESTA_HOST_DEVICE inline float tree8(const float p[8]) {
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

// The reference dot8 of the contract, one product at a time (the kernels vectorise it; the
// tests compare them with this).
SIESTA_HOST_DEVICE inline float dot8(const float* a, const float* b, uint32_t n) {
  float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t k = 0; k < n; ++k) p[k % 8] = p[k % 8] + a[k] * b[k];
  return tree8(p);
}

// sum8: dot8 without the products (the attention tiles' sums of exponentials).
SIESTA_HOST_DEVICE inline float sum8(const float* a, uint32_t n) {
  float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t k = 0; k < n; ++k) p[k % 8] = p[k % 8] + a[k];
  return tree8(p);
}

// One query's running softmax over the rows read so far: the largest score m, the sum l of
// e^(s - m), and (kept by the caller, one per output value) acc = sum of e^(s - m) * v.
struct SoftmaxState {
  float m;
  float l;
};

// The fresh state: no rows read. (-inf as bits: this header is also compiled for the device.)
SIESTA_HOST_DEVICE inline SoftmaxState softmax_start() {
  return {bits_to_float(0xff800000u), 0.0f};
}

// Folds a state (m_b, l_b) computed over later rows into `a`; returns the factors acc_a and
// acc_b are multiplied by (acc = acc_a * fa + acc_b * fb, in that order).
struct FoldFactors {
  float fa;
  float fb;
};
SIESTA_HOST_DEVICE inline FoldFactors softmax_fold(SoftmaxState& a, SoftmaxState b) {
  const float m = max_f32(a.m, b.m);
  const FoldFactors f{exp_f32(a.m - m), exp_f32(b.m - m)};
  a.l = a.l * f.fa + b.l * f.fb;
  a.m = m;
  return f;
}

}  // namespace siesta::kernel_math
