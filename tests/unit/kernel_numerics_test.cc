// The arithmetic contract's number formats (compute/kernel_contract.h, compute/half_float.h,
// compute/kernel_math.h): KvType names, every f16 conversion against an independent
// computation (and the host kernels' vector conversion against the scalar one), the int8
// rules of the reference encoder the kernels are compared with, and the contract's exp.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/sim/host_simd.h"
#include "compute/half_float.h"
#include "compute/kernel_math.h"
#include "compute/kernels.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/host_kernels_fixture.h"
#include "tests/support/reference_kernels.h"

namespace siesta {
namespace {

using half_float::float_from_half;
using half_float::half_from_float;
using kernel_test::print_seed;

// ---- KvType names ----

TEST(KvTypeTest, NamesRoundTripAndUnknownNamesListTheAcceptedOnes) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    Result<KvType> parsed = parse_kv_type(kv_type_name(type));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, type);
  }
  EXPECT_EQ(kv_type_name(KvType::kInt8), "int8");
  Result<KvType> bad = parse_kv_type("F16");
  SIESTA_EXPECT_CODE(bad, StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("f32, f16, int8"), std::string::npos)
      << bad.status().to_string();
  SIESTA_EXPECT_CODE(parse_kv_type(""), StatusCode::kInvalidArgument);
}

// ---- f16 conversions ----

// The value of a half computed independently, in double.
double half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// The half RNE picks for a finite float, found by search; the code past 65504 (0x7c00) is
// treated as 2^16 for rounding, which is what overflowing to infinity means.
uint16_t nearest_even_half(float f) {
  const double m = std::fabs(double{f});
  auto magnitude = [](uint16_t code) { return code == 0x7c00 ? 65536.0 : half_value(code); };
  uint16_t lo = 0;
  uint16_t hi = 0x7c00;
  if (m >= 65536.0) {
    lo = 0x7c00;
  } else {
    while (hi - lo > 1) {  // invariant: magnitude(lo) <= m < magnitude(hi)
      const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
      (magnitude(mid) <= m ? lo : hi) = mid;
    }
    const double below = m - magnitude(lo);
    const double above = magnitude(hi) - m;
    if (above < below || (above == below && (hi & 1) == 0)) lo = hi;
  }
  return static_cast<uint16_t>((std::signbit(f) ? 0x8000 : 0) | lo);
}

static_assert(half_from_float(1.0f) == 0x3c00);
static_assert(half_from_float(-2.0f) == 0xc000);
static_assert(float_from_half(0x3555) == 0.333251953125f);
static_assert(half_from_float(65520.0f) == 0x7c00);
static_assert(half_from_float(65519.996f) == 0x7bff);

TEST(HalfFloatTest, EveryHalfConvertsExactlyAndRoundTrips) {
  int nans = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f = float_from_half(h);
    const bool is_nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
    if (is_nan) {
      ++nans;
      ASSERT_EQ(std::bit_cast<uint32_t>(f), 0x7fffffffu) << "half " << bits;
      ASSERT_EQ(half_from_float(f), 0x7fff) << "half " << bits;
      continue;
    }
    if (((h >> 10) & 0x1f) == 0x1f) {
      ASSERT_TRUE(std::isinf(f)) << "half " << bits;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
    } else {
      ASSERT_EQ(double{f}, half_value(h)) << "half " << bits;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << "half " << bits;  // -0 too
    }
    ASSERT_EQ(half_from_float(f), h) << "half " << bits;
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(HalfFloatTest, FloatsRoundToNearestEvenIncludingSubnormalsAndOverflow) {
  print_seed();
  size_t checked = 0;
  auto check = [&](float f) {
    if (std::isnan(f)) {
      ASSERT_EQ(half_from_float(f), 0x7fff) << std::bit_cast<uint32_t>(f);
      return;
    }
    if (std::isinf(f)) {
      ASSERT_EQ(half_from_float(f), f > 0 ? 0x7c00 : 0xfc00);
      return;
    }
    ASSERT_EQ(half_from_float(f), nearest_even_half(f))
        << "float bits 0x" << std::hex << std::bit_cast<uint32_t>(f) << " = " << f;
    ++checked;
  };
  // A sweep over every float bit pattern with a stride prime to everything interesting.
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 1021) {
    check(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }
  // Every tie between adjacent halves (exact in float: 12 significant bits), and the floats
  // just either side of it, for both signs: subnormals, normals and the overflow boundary.
  for (uint16_t code = 0; code < 0x7c00; ++code) {
    const double upper = code == 0x7bff ? 65536.0 : half_value(static_cast<uint16_t>(code + 1));
    const float tie = static_cast<float>((half_value(code) + upper) / 2);
    ASSERT_EQ(double{tie}, (half_value(code) + upper) / 2);
    for (float f : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 1e9f), -tie}) check(f);
  }
  EXPECT_GT(checked, 4000000u);
}

TEST(HalfFloatTest, SpecialValues) {
  EXPECT_EQ(half_from_float(0.0f), 0x0000);
  EXPECT_EQ(half_from_float(-0.0f), 0x8000);
  EXPECT_EQ(half_from_float(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(half_from_float(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(half_from_float(-std::numeric_limits<float>::quiet_NaN()), 0x7fff);
  EXPECT_EQ(half_from_float(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(half_from_float(std::ldexp(1.0f, -25)), 0x0000);  // tie: to even (zero)
  EXPECT_EQ(half_from_float(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(half_from_float(std::ldexp(3.0f, -25)), 0x0002);  // tie 1.5 ulp: to even (2)
  EXPECT_EQ(half_from_float(1e-30f), 0x0000);
  EXPECT_EQ(half_from_float(1e30f), 0x7c00);
  EXPECT_EQ(std::bit_cast<uint32_t>(float_from_half(0xfe01)), 0x7fffffffu);
}

TEST(HalfFloatTest, TheVectorConversionIsTheScalarOneForEveryHalf) {
  for (uint32_t first = 0; first <= 0xffff; first += 4) {
    uint16_t h[4];
    for (uint32_t i = 0; i < 4; ++i) h[i] = static_cast<uint16_t>(first + i);
    float got[4];
    host_simd::halves_to_floats<4>(reinterpret_cast<const std::byte*>(h), got);
    for (uint32_t i = 0; i < 4; ++i) {
      const float want = float_from_half(h[i]);
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want)) << "half " << h[i];
    }
  }
}

// ---- The contract's exp ----

// Distance in units in the last place between two finite floats of the same sign.
int64_t ulps(float a, float b) {
  return std::llabs(static_cast<int64_t>(std::bit_cast<int32_t>(a)) -
                    static_cast<int64_t>(std::bit_cast<int32_t>(b)));
}

TEST(ExpF32Test, WithinTwoUlpOfExpAndExactAtTheEdges) {
  using kernel_math::exp_f32;
  int64_t worst = 0;
  float worst_at = 0;
  // Every 97th float in [-87, 88] (both signs of the reduced argument, every binade).
  for (uint32_t bits = std::bit_cast<uint32_t>(88.0f); bits > 0; bits -= 97) {
    for (float x : {std::bit_cast<float>(bits), -std::bit_cast<float>(bits)}) {
      if (x < -87.0f || x > 88.0f) continue;
      const float want = static_cast<float>(std::exp(static_cast<double>(x)));
      const int64_t d = ulps(exp_f32(x), want);
      if (d > worst) {
        worst = d;
        worst_at = x;
      }
    }
  }
  std::printf("exp_f32: worst %lld ulp at %.9g\n", static_cast<long long>(worst), worst_at);
  EXPECT_LE(worst, 2) << "at " << worst_at;
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-0.0f), 1.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(exp_f32(-87.5f)), 0u);  // +0, never -0
  EXPECT_EQ(std::bit_cast<uint32_t>(exp_f32(-INFINITY)), 0u);
  EXPECT_EQ(exp_f32(88.5f), INFINITY);
  EXPECT_TRUE(std::isnan(exp_f32(std::nanf(""))));
  EXPECT_GT(exp_f32(-87.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(exp_f32(88.0f)));
}

TEST(KvInt8Test, QuantizationRules) {
  // max |x| = 127 gives scale 1 exactly, so q is x rounded half away from zero.
  std::vector<float> row(32, 0.0f);
  const float values[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.49f, -126.5f, 0.0f};
  std::copy(std::begin(values), std::end(values), row.begin());
  std::vector<float> zeros(32, 0.0f);
  row.insert(row.end(), zeros.begin(), zeros.end());  // second block: all zero
  const auto bytes = ref::kv_encode(KvType::kInt8, row);
  ASSERT_EQ(bytes.size(), 64u + 8u);
  const int8_t want_q[] = {127, 3, -3, 1, -1, 1, -127, 0};
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(static_cast<int8_t>(bytes[i]), want_q[i]) << i;
  float scale0, scale1;
  std::memcpy(&scale0, bytes.data() + 64, 4);
  std::memcpy(&scale1, bytes.data() + 68, 4);
  EXPECT_EQ(scale0, 1.0f);
  EXPECT_EQ(scale1, 0.0f);
  for (size_t i = 32; i < 64; ++i) EXPECT_EQ(static_cast<int8_t>(bytes[i]), 0);
  const auto decoded = ref::kv_decode(KvType::kInt8, bytes, 64);
  EXPECT_EQ(decoded[1], 3.0f);
  EXPECT_EQ(decoded[6], -127.0f);
  EXPECT_EQ(decoded[40], 0.0f);
}

}  // namespace
}  // namespace siesta
