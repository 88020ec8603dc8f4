// HostKernels: every kernel against the reference kernels (tests/support/reference_kernels.h)
// on a SimBackend with committed memory, the f16 conversions, the int8 rules, argument
// checks, and graphs: recorded not run, replayed bit for bit, replayed after the memory was
// released and re-committed at the same address, and faulting when it was only released.
//
// Random inputs come from one seed, printed by every test (SIESTA_KERNEL_SEED overrides it).
// Tolerances, host kernels vs the double-precision reference:
//   exact       embed, add, rope_table, argmax, kv_store bytes (f32/f16/int8)
//   matmul      |out - ref| <= 1e-5 * sum_c |w[r][c] * x[c]|
//   rms_norm    |out - ref| <= 1e-5 * |ref| + 1e-6
//   swiglu, recurrent_update, rope   |out - ref| <= 4e-6 * |ref| + 1e-6
//   attention   |out - ref| <= 2e-5 * max|V| + 1e-6 (K and V decoded identically by both)
#include "backends/sim/host_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compute/half_float.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/reference_kernels.h"

namespace siesta {
namespace {

using half_float::float_from_half;
using half_float::half_from_float;

// ---- Seeded inputs ----

uint64_t kernel_seed() {
  static const uint64_t seed = [] {
    const char* text = std::getenv("SIESTA_KERNEL_SEED");
    return text != nullptr ? std::strtoull(text, nullptr, 10) : uint64_t{20261130};
  }();
  return seed;
}

class Random {
 public:
  explicit Random(uint64_t salt) : engine_(kernel_seed() * 1000003u + salt) {}
  std::vector<float> floats(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> out(n);
    for (float& f : out) f = dist(engine_);
    return out;
  }

 private:
  std::mt19937_64 engine_;
};

void print_seed() {
  std::printf("kernel seed: %llu (set SIESTA_KERNEL_SEED to reproduce)\n",
              static_cast<unsigned long long>(kernel_seed()));
}

template <class T>
std::span<const std::byte> as_bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

// ---- A SimBackend with one committed arena and a bump allocator ----

// Small sizes (as tests/support/sim_backend_under_test.h uses): 64 KiB granules, 256 KiB
// chunks, so the 2 MiB arena is several chunks.
SimBackendOptions small_sim_options() {
  SimBackendOptions options;
  options.capacity_bytes = 64ull << 20;
  options.granularity = 64u << 10;
  options.max_chunk_bytes = 256u << 10;
  options.staging_buffer_bytes = 48u << 10;
  options.staging_buffer_count = 3;
  return options;
}

class HostKernelsTest : public ::testing::Test {
 protected:
  static constexpr size_t kArenaBytes = 2u << 20;

  void SetUp() override {
    print_seed();
    auto sim = SimBackend::create(small_sim_options());
    ASSERT_TRUE(sim.ok()) << sim.status().to_string();
    sim_ = std::move(sim).value();
    auto kernels = HostKernels::create(*sim_);
    ASSERT_TRUE(kernels.ok()) << kernels.status().to_string();
    kernels_ = std::move(kernels).value();
    auto range = ReservedRange::reserve(*sim_, kArenaBytes);
    ASSERT_TRUE(range.ok()) << range.status().to_string();
    arena_ = std::move(range).value();
    SIESTA_ASSERT_OK(sim_->commit(arena_.range()));
  }

  void TearDown() override {
    if (kernels_ != nullptr) SIESTA_EXPECT_OK(kernels_->synchronize());
  }

  DeviceAddress alloc(size_t bytes) {
    const size_t offset = next_;
    next_ = test_util::round_up(next_ + std::max<size_t>(bytes, 1), 256);
    EXPECT_LE(next_, kArenaBytes) << "test arena too small";
    return arena_.range().base + offset;
  }
  template <class T>
  DeviceAddress put(const std::vector<T>& values) {
    const DeviceAddress at = alloc(values.size() * sizeof(T));
    EXPECT_TRUE(kernels_->upload(as_bytes_of(values), at).ok());
    return at;
  }
  DeviceAddress put_params(int32_t token, int32_t position) {
    return put(std::vector<StepParams>{{token, position}});
  }
  std::vector<float> get(DeviceAddress at, size_t n) {
    std::vector<float> out(n);
    const Status s = kernels_->download(at, std::as_writable_bytes(std::span(out)));
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }
  std::vector<std::byte> get_bytes(DeviceAddress at, size_t n) {
    std::vector<std::byte> out(n);
    const Status s = kernels_->download(at, out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }
  int32_t get_int(DeviceAddress at) {
    int32_t v = -1;
    EXPECT_TRUE(kernels_->download(at, std::as_writable_bytes(std::span(&v, 1))).ok());
    return v;
  }

  std::unique_ptr<SimBackend> sim_;
  std::unique_ptr<HostKernels> kernels_;
  ReservedRange arena_;  // destroyed (unreserved) before the backend
  size_t next_ = 0;
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  double abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tolerance = rel * std::fabs(double{want[i]}) + abs;
    ASSERT_LE(std::fabs(double{got[i]} - want[i]), tolerance)
        << what << " at " << i << ": got " << got[i] << ", want " << want[i];
  }
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << what;
}

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

// ---- Each kernel against the reference ----

TEST_F(HostKernelsTest, NameIsHost) { EXPECT_EQ(kernels_->name(), "host"); }

TEST_F(HostKernelsTest, EmbedCopiesTheRowOfTheTokenReadAtRunTime) {
  Random rng(1);
  const uint32_t vocab = 7, dim = 40;
  const auto table = rng.floats(size_t{vocab} * dim);
  const DeviceAddress t = put(table);
  for (int32_t token : {0, 5, 6}) {
    const DeviceAddress params = put_params(token, 0);
    const DeviceAddress out = alloc(dim * 4);
    SIESTA_ASSERT_OK(kernels_->embed(t, dim, params, out));
    expect_same_bits(get(out, dim), ref::embed(table, dim, token), "embed");
  }
}

TEST_F(HostKernelsTest, RmsNormMatchesReferenceInPlaceToo) {
  Random rng(2);
  for (uint32_t dim : {1u, 7u, 96u, 101u}) {
    const auto x = rng.floats(dim, -3, 3);
    const auto w = rng.floats(dim, 0.5, 1.5);
    const DeviceAddress xa = put(x), wa = put(w), out = alloc(dim * 4);
    SIESTA_ASSERT_OK(kernels_->rms_norm(xa, wa, dim, 1e-5f, out));
    const auto want = ref::rms_norm(x, w, 1e-5f);
    expect_close(get(out, dim), want, 1e-5, 1e-6, "rms_norm dim " + std::to_string(dim));
    SIESTA_ASSERT_OK(kernels_->rms_norm(xa, wa, dim, 1e-5f, xa));  // out == x
    expect_same_bits(get(xa, dim), get(out, dim), "rms_norm in place");
  }
}

TEST_F(HostKernelsTest, MatmulMatchesDoubleReferenceWithinItsRoundingBound) {
  Random rng(3);
  const std::pair<uint32_t, uint32_t> shapes[] = {{1, 1}, {3, 7}, {5, 8}, {64, 129}, {256, 512}};
  for (auto [rows, cols] : shapes) {
    const auto w = rng.floats(size_t{rows} * cols);
    const auto x = rng.floats(cols, -2, 2);
    const DeviceAddress wa = put(w), xa = put(x), out = alloc(rows * 4);
    SIESTA_ASSERT_OK(kernels_->matmul(wa, xa, rows, cols, out));
    const auto got = get(out, rows);
    const auto want = ref::matmul(w, x, rows, cols);
    const auto magnitude = ref::matmul_magnitude(w, x, rows, cols);
    for (uint32_t r = 0; r < rows; ++r) {
      ASSERT_LE(std::fabs(double{got[r]} - want[r]), 1e-5 * magnitude[r] + 1e-30)
          << rows << "x" << cols << " row " << r;
    }
  }
}

TEST_F(HostKernelsTest, MatmulRowsDoNotDependOnTheirNeighbours) {
  // Rows are computed four at a time; each must still be the bits of the documented
  // single-row order (what a one-row matmul computes).
  Random rng(10);
  const uint32_t rows = 9, cols = 37;
  const auto w = rng.floats(size_t{rows} * cols), x = rng.floats(cols);
  const DeviceAddress wa = put(w), xa = put(x), all = alloc(rows * 4), one = alloc(rows * 4);
  SIESTA_ASSERT_OK(kernels_->matmul(wa, xa, rows, cols, all));
  for (uint32_t r = 0; r < rows; ++r) {
    SIESTA_ASSERT_OK(kernels_->matmul(wa + size_t{r} * cols * 4, xa, 1, cols, one + r * 4));
  }
  expect_same_bits(get(all, rows), get(one, rows), "4-row blocks vs single rows");
}

TEST_F(HostKernelsTest, AddIsExact) {
  Random rng(4);
  const uint32_t n = 77;
  const auto x = rng.floats(n), y = rng.floats(n, -100, 100);
  const DeviceAddress xa = put(x), ya = put(y);
  SIESTA_ASSERT_OK(kernels_->add(xa, n, ya));
  expect_same_bits(get(ya, n), ref::add(x, y), "add");
}

TEST_F(HostKernelsTest, SwigluMatchesReferenceAndMayWriteOverGate) {
  Random rng(5);
  const uint32_t n = 100;
  const auto g = rng.floats(n, -8, 8), u = rng.floats(n, -2, 2);
  const DeviceAddress ga = put(g), ua = put(u), out = alloc(n * 4);
  SIESTA_ASSERT_OK(kernels_->swiglu(ga, ua, n, out));
  const auto want = ref::swiglu(g, u);
  expect_close(get(out, n), want, 4e-6, 1e-6, "swiglu");
  SIESTA_ASSERT_OK(kernels_->swiglu(ga, ua, n, ga));
  expect_same_bits(get(ga, n), get(out, n), "swiglu out == gate");
}

TEST_F(HostKernelsTest, RecurrentUpdateMatchesReference) {
  Random rng(6);
  const uint32_t n = 50;
  const auto in = rng.floats(n, -3, 3), gate = rng.floats(n, -6, 6), state = rng.floats(n);
  const DeviceAddress ia = put(in), ga = put(gate), sa = put(state);
  SIESTA_ASSERT_OK(kernels_->recurrent_update(ia, ga, n, sa));
  expect_close(get(sa, n), ref::recurrent_update(in, gate, state), 4e-6, 1e-6, "recurrent");
}

TEST_F(HostKernelsTest, RopeTableIsTheDocumentedFormulaBitForBit) {
  for (auto [context, head_dim, theta] :
       {std::tuple{1u, 2u, 10000.0f}, std::tuple{64u, 16u, 10000.0f},
        std::tuple{300u, 64u, 500000.0f}}) {
    const DeviceAddress table = alloc(size_t{context} * head_dim * 4);
    SIESTA_ASSERT_OK(kernels_->rope_table(table, context, head_dim, theta));
    const auto got = get(table, size_t{context} * head_dim);
    expect_same_bits(got, ref::rope_table(context, head_dim, theta), "rope_table");
    EXPECT_EQ(got[0], 1.0f);  // position 0: the identity rotation
    EXPECT_EQ(got[1], 0.0f);
  }
}

TEST_F(HostKernelsTest, RopeRotatesAtTheRunTimePosition) {
  Random rng(7);
  const uint32_t heads = 3, head_dim = 8, context = 20;
  const auto table = ref::rope_table(context, head_dim, 10000.0f);
  const DeviceAddress ta = put(table);
  for (int32_t position : {0, 1, 19}) {
    const auto vec = rng.floats(heads * head_dim, -2, 2);
    const DeviceAddress va = put(vec);
    SIESTA_ASSERT_OK(kernels_->rope(va, heads, head_dim, ta, put_params(0, position)));
    const auto got = get(va, heads * head_dim);
    expect_close(got, ref::rope(vec, heads, head_dim, table, position), 4e-6, 1e-6,
                 "rope at " + std::to_string(position));
    if (position == 0) expect_same_bits(got, vec, "rope at 0 is the identity");
  }
}

TEST_F(HostKernelsTest, KvStoreWritesExactlyTheEncodedRowAtThePosition) {
  Random rng(8);
  const uint32_t dim = 64, context = 6;
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    SCOPED_TRACE(std::string(kv_type_name(type)));
    const size_t row = kv_row_bytes(type, dim);
    const auto before = test_util::make_pattern(row * context, 42);
    const DeviceAddress kc = put(before), vc = put(before);
    auto k = rng.floats(dim, -4, 4), v = rng.floats(dim, -4, 4);
    std::fill(v.begin() + 32, v.end(), 0.0f);  // an all-zero int8 block: scale 0, q 0
    const int32_t position = 3;
    SIESTA_ASSERT_OK(
        kernels_->kv_store(put(k), put(v), type, dim, kc, vc, put_params(9, position)));
    for (auto [cache, values] : {std::pair{kc, &k}, std::pair{vc, &v}}) {
      std::vector<std::byte> want = before;
      const auto encoded = ref::kv_encode(type, *values);
      std::copy(encoded.begin(), encoded.end(), want.begin() + position * row);
      EXPECT_EQ(test_util::first_difference(get_bytes(cache, want.size()), want), -1);
    }
  }
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

TEST_F(HostKernelsTest, KvStoreInt8FollowsTheQuantizationRules) {
  // The same rules through the kernel (bytes compared with the reference above).
  std::vector<float> row(32, 0.0f);
  const float values[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f};
  std::copy(std::begin(values), std::end(values), row.begin());
  const DeviceAddress kc = alloc(36), vc = alloc(36);
  SIESTA_ASSERT_OK(
      kernels_->kv_store(put(row), put(row), KvType::kInt8, 32, kc, vc, put_params(0, 0)));
  const auto got = get_bytes(kc, 36);
  EXPECT_EQ(test_util::first_difference(got, ref::kv_encode(KvType::kInt8, row)), -1);
  EXPECT_EQ(static_cast<int8_t>(got[2]), -3);
  EXPECT_EQ(static_cast<int8_t>(got[3]), 1);
}

void attention_case(HostKernelsTest& t, KvType type, uint32_t heads, uint32_t head_dim,
                    uint32_t context, uint64_t salt);

TEST_F(HostKernelsTest, AttentionMatchesReferenceForEveryKvTypeAtFirstSecondAndLastPosition) {
  uint64_t salt = 100;
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    attention_case(*this, type, 4, 32, 16, ++salt);
    if (type != KvType::kInt8) attention_case(*this, type, 3, 6, 5, ++salt);  // dim 18
  }
}

class HostKernelsAccess : public HostKernelsTest {
 public:
  using HostKernelsTest::alloc;
  using HostKernelsTest::get;
  using HostKernelsTest::kernels_;
  using HostKernelsTest::put;
  using HostKernelsTest::put_params;
};

void attention_case(HostKernelsTest& fixture, KvType type, uint32_t heads, uint32_t head_dim,
                    uint32_t context, uint64_t salt) {
  auto& t = static_cast<HostKernelsAccess&>(fixture);
  SCOPED_TRACE(std::string(kv_type_name(type)) + " heads " + std::to_string(heads) + " head_dim " +
               std::to_string(head_dim));
  Random rng(salt);
  const uint32_t dim = heads * head_dim;
  std::vector<std::byte> k_cache, v_cache;
  float max_v = 0;
  for (uint32_t row = 0; row < context; ++row) {
    const auto k = rng.floats(dim, -2, 2), v = rng.floats(dim, -3, 3);
    for (float f : v) max_v = std::max(max_v, std::fabs(f));
    const auto ke = ref::kv_encode(type, k), ve = ref::kv_encode(type, v);
    k_cache.insert(k_cache.end(), ke.begin(), ke.end());
    v_cache.insert(v_cache.end(), ve.begin(), ve.end());
  }
  const DeviceAddress kc = t.put(k_cache), vc = t.put(v_cache);
  for (int32_t position : {0, 1, static_cast<int32_t>(context) - 1}) {
    const auto q = rng.floats(dim, -2, 2);
    const DeviceAddress scores = t.alloc(size_t{heads} * context * 4), out = t.alloc(dim * 4);
    SIESTA_ASSERT_OK(t.kernels_->attention(t.put(q), kc, vc, type, heads, head_dim, context,
                                           t.put_params(0, position), scores, out));
    const auto want = ref::attention(q, k_cache, v_cache, type, heads, head_dim, position);
    expect_close(t.get(out, dim), want, 0, 2e-5 * max_v + 1e-6,
                 "attention at " + std::to_string(position));
  }
}

TEST_F(HostKernelsTest, ArgmaxTakesTheLowestIndexOnTiesWithinTheRange) {
  const std::vector<float> logits = {9, 1, 5, 7, 7, 2, 7, 9};
  const DeviceAddress la = put(logits);
  for (auto [first, last] : {std::pair{0u, 7u}, std::pair{1u, 6u}, std::pair{4u, 6u},
                             std::pair{2u, 2u}, std::pair{5u, 5u}, std::pair{1u, 7u}}) {
    const DeviceAddress out = alloc(4);
    SIESTA_ASSERT_OK(kernels_->argmax(la, first, last, out));
    EXPECT_EQ(get_int(out), ref::argmax(logits, first, last)) << first << ".." << last;
  }
  const DeviceAddress out = alloc(4);
  SIESTA_ASSERT_OK(kernels_->argmax(la, 1, 6, out));
  EXPECT_EQ(get_int(out), 3);
  SIESTA_ASSERT_OK(kernels_->argmax(la, 0, 7, out));
  EXPECT_EQ(get_int(out), 0);
}

TEST_F(HostKernelsTest, KernelsRunOnTheBackendStreamInOrderWithItsCopies) {
  // A read through the backend's own staging copies, with no kernel synchronize between,
  // sees the matmul's result: kernels and copies share the one stream.
  Random rng(9);
  const uint32_t rows = 128, cols = 256;
  const auto w = rng.floats(size_t{rows} * cols), x = rng.floats(cols);
  const DeviceAddress wa = put(w), xa = put(x), out = alloc(rows * 4);
  SIESTA_ASSERT_OK(kernels_->matmul(wa, xa, rows, cols, out));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto bytes, test_util::read_device(*sim_, out, rows * 4));
  std::vector<float> via_backend(rows);
  std::memcpy(via_backend.data(), bytes.data(), rows * 4);
  expect_same_bits(via_backend, get(out, rows), "matmul seen through backend copies");
  SIESTA_EXPECT_OK(sim_->synchronize());
}

// ---- Argument checks ----

TEST_F(HostKernelsTest, HostCheckableArgumentsAreRefusedAndNothingRuns) {
  const auto zeros = std::vector<float>(256, 0.0f);
  const DeviceAddress a = put(zeros), b = put(zeros), c = put(zeros), p = put_params(0, 0);
  const auto bad = StatusCode::kInvalidArgument;
  SIESTA_EXPECT_CODE(kernels_->embed(a, 0, p, b), bad);
  SIESTA_EXPECT_CODE(kernels_->embed(a, 4, 0, b), bad);
  SIESTA_EXPECT_CODE(kernels_->rms_norm(a, b, 0, 1e-5f, c), bad);
  SIESTA_EXPECT_CODE(kernels_->rms_norm(a, b, 4, -1.0f, c), bad);
  SIESTA_EXPECT_CODE(kernels_->rms_norm(a, b, 4, std::nanf(""), c), bad);
  SIESTA_EXPECT_CODE(kernels_->matmul(a, b, 0, 4, c), bad);
  SIESTA_EXPECT_CODE(kernels_->matmul(a, b, 4, 0, c), bad);
  SIESTA_EXPECT_CODE(kernels_->matmul(a, b, 4, 4, b + 8), bad);  // out overlaps x
  SIESTA_EXPECT_CODE(kernels_->matmul(a + 2, b, 4, 4, c), bad);  // misaligned
  SIESTA_EXPECT_CODE(kernels_->add(a, 0, b), bad);
  SIESTA_EXPECT_CODE(kernels_->swiglu(a, b, 0, c), bad);
  SIESTA_EXPECT_CODE(kernels_->rope_table(a, 4, 7, 10000.0f), bad);
  SIESTA_EXPECT_CODE(kernels_->rope_table(a, 0, 8, 10000.0f), bad);
  SIESTA_EXPECT_CODE(kernels_->rope_table(a, 4, 8, 0.0f), bad);
  SIESTA_EXPECT_CODE(kernels_->rope(a, 2, 5, b, p), bad);
  SIESTA_EXPECT_CODE(kernels_->rope(a, 0, 4, b, p), bad);
  SIESTA_EXPECT_CODE(kernels_->kv_store(a, b, KvType::kInt8, 33, c, c, p), bad);
  SIESTA_EXPECT_CODE(kernels_->kv_store(a, b, static_cast<KvType>(7), 32, c, c, p), bad);
  SIESTA_EXPECT_CODE(kernels_->kv_store(a, b, KvType::kF32, 0, c, c, p), bad);
  SIESTA_EXPECT_CODE(kernels_->kv_store(a, b, KvType::kF16, 4, c + 1, c, p), bad);
  SIESTA_EXPECT_CODE(kernels_->attention(a, b, b, KvType::kInt8, 3, 16, 4, p, c, c + 512), bad);
  SIESTA_EXPECT_CODE(kernels_->attention(a, b, b, KvType::kF32, 2, 4, 0, p, c, c + 512), bad);
  SIESTA_EXPECT_CODE(kernels_->attention(a, b, b, KvType::kF32, 2, 4, 4, p, c, a + 4), bad);
  SIESTA_EXPECT_CODE(kernels_->recurrent_update(a, b, 0, c), bad);
  SIESTA_EXPECT_CODE(kernels_->argmax(a, 5, 4, c), bad);
  SIESTA_EXPECT_CODE(kernels_->argmax(0, 0, 4, c), bad);
  // None of the refused calls ran: every operand still holds its zeros.
  for (DeviceAddress at : {a, b, c}) expect_same_bits(get(at, 256), zeros, "untouched");
}

// ---- Graphs ----

TEST_F(HostKernelsTest, OperationsRecordedWhileCapturingRunOnlyOnReplay) {
  const uint32_t n = 16;
  const std::vector<float> x(n, 1.5f), y(n, 10.0f);
  const DeviceAddress xa = put(x), ya = put(y);
  SIESTA_ASSERT_OK(kernels_->begin_capture());
  SIESTA_ASSERT_OK(kernels_->add(xa, n, ya));
  SIESTA_ASSERT_OK(kernels_->add(xa, n, ya));
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelGraph> graph, kernels_->end_capture());
  EXPECT_EQ(graph->operation_count(), 2u);
  SIESTA_ASSERT_OK(sim_->synchronize());
  expect_same_bits(get(ya, n), y, "nothing ran while recording");
  SIESTA_ASSERT_OK(kernels_->replay(*graph));
  expect_same_bits(get(ya, n), std::vector<float>(n, 13.0f), "first replay");
  SIESTA_ASSERT_OK(kernels_->replay(*graph));
  graph.reset();  // a graph may go away while its replay is still queued
  expect_same_bits(get(ya, n), std::vector<float>(n, 16.0f), "second replay");
}

TEST_F(HostKernelsTest, TransfersAndNestedCaptureAreRefusedWhileCapturing) {
  std::vector<float> buffer(4, 0.0f);
  const DeviceAddress a = put(buffer);
  SIESTA_ASSERT_OK(kernels_->begin_capture());
  const auto misuse = StatusCode::kFailedPrecondition;
  SIESTA_EXPECT_CODE(kernels_->upload(as_bytes_of(buffer), a), misuse);
  SIESTA_EXPECT_CODE(kernels_->download(a, std::as_writable_bytes(std::span(buffer))), misuse);
  SIESTA_EXPECT_CODE(kernels_->synchronize(), misuse);
  SIESTA_EXPECT_CODE(kernels_->begin_capture(), misuse);
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelGraph> graph, kernels_->end_capture());
  EXPECT_EQ(graph->operation_count(), 0u);  // the refused transfers did not poison it
  SIESTA_ASSERT_OK(kernels_->begin_capture());
  SIESTA_EXPECT_CODE(kernels_->replay(*graph), misuse);
  SIESTA_ASSERT_OK(kernels_->end_capture());
}

TEST_F(HostKernelsTest, EndCaptureWithoutBeginIsFailedPrecondition) {
  SIESTA_EXPECT_CODE(kernels_->end_capture(), StatusCode::kFailedPrecondition);
}

TEST_F(HostKernelsTest, AnOperationRefusedWhileRecordingFailsEndCaptureAndEndsIt) {
  const DeviceAddress a = put(std::vector<float>(8, 0.0f));
  SIESTA_ASSERT_OK(kernels_->begin_capture());
  SIESTA_EXPECT_CODE(kernels_->matmul(a, a + 64, 0, 4, a + 128), StatusCode::kInvalidArgument);
  SIESTA_ASSERT_OK(kernels_->add(a, 8, a));
  SIESTA_EXPECT_CODE(kernels_->end_capture(), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_OK(kernels_->synchronize());    // no longer capturing
  SIESTA_ASSERT_OK(kernels_->begin_capture());  // and a new capture starts clean
  SIESTA_ASSERT_OK(kernels_->add(a, 8, a));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto graph, kernels_->end_capture());
  EXPECT_EQ(graph->operation_count(), 1u);
}

TEST_F(HostKernelsTest, ReplayRefusesAGraphAnotherKernelsRecorded) {
  SIESTA_ASSERT_OK_AND_ASSIGN(auto other, HostKernels::create(*sim_));
  SIESTA_ASSERT_OK(other->begin_capture());
  SIESTA_ASSERT_OK_AND_ASSIGN(auto graph, other->end_capture());
  SIESTA_EXPECT_CODE(kernels_->replay(*graph), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_OK(other->replay(*graph));
}

// A decode-step-shaped graph over one arena: every kernel, reading token and position from
// StepParams at run time. Inputs are re-uploaded before each replay (the recurrent state and
// the KV caches change in place).
struct MiniStep {
  static constexpr uint32_t kVocab = 11, kHeads = 2, kHeadDim = 16, kDim = kHeads * kHeadDim,
                            kHidden = 48, kContext = 8;
  KvType type;
  std::vector<std::pair<DeviceAddress, std::vector<float>>> inputs;
  std::vector<std::byte> cache_bytes;
  DeviceAddress k_cache = 0, v_cache = 0, params = 0, rope = 0;
  DeviceAddress begin = 0, end = 0;  // the whole arena the step touches

  Status upload_inputs(Kernels& kernels, int32_t token, int32_t position) {
    for (auto& [at, values] : inputs) {
      SIESTA_RETURN_IF_ERROR(kernels.upload(std::as_bytes(std::span(values)), at));
    }
    SIESTA_RETURN_IF_ERROR(kernels.upload(cache_bytes, k_cache));
    SIESTA_RETURN_IF_ERROR(kernels.upload(cache_bytes, v_cache));
    const StepParams p{token, position};
    SIESTA_RETURN_IF_ERROR(kernels.upload(std::as_bytes(std::span(&p, 1)), params));
    // The constants region is re-initialised, not saved.
    return kernels.rope_table(rope, kContext, kHeadDim, 10000.0f);
  }
};

MiniStep make_mini_step(KvType type, DeviceAddress base, uint64_t salt) {
  MiniStep s;
  s.type = type;
  Random rng(salt);
  DeviceAddress next = base;
  auto alloc = [&](size_t bytes) {
    const DeviceAddress at = next;
    next += test_util::round_up(bytes, 256);
    return at;
  };
  auto input = [&](size_t n, float lo, float hi) {
    const DeviceAddress at = alloc(n * 4);
    s.inputs.emplace_back(at, rng.floats(n, lo, hi));
    return at;
  };
  using M = MiniStep;
  s.begin = base;
  s.params = alloc(sizeof(StepParams));
  s.rope = alloc(size_t{M::kContext} * M::kHeadDim * 4);
  const size_t cache = kv_row_bytes(type, M::kDim) * M::kContext;
  s.k_cache = alloc(cache);
  s.v_cache = alloc(cache);
  for (uint32_t r = 0; r < M::kContext; ++r) {
    const auto row = ref::kv_encode(type, rng.floats(M::kDim, -1, 1));
    s.cache_bytes.insert(s.cache_bytes.end(), row.begin(), row.end());
  }
  input(size_t{M::kVocab} * M::kDim, -1, 1);  // embedding table: inputs[0]
  input(M::kDim, 0.5f, 1.5f);                 // norm weight: inputs[1]
  for (int i = 0; i < 3; ++i) input(size_t{M::kDim} * M::kDim, -0.3f, 0.3f);  // wq wk wv
  input(size_t{M::kHidden} * M::kDim, -0.3f, 0.3f);                           // w_gate
  input(size_t{M::kHidden} * M::kDim, -0.3f, 0.3f);                           // w_up
  input(M::kHidden, -1, 1);                                                   // state
  input(size_t{M::kVocab} * M::kHidden, -0.5f, 0.5f);                         // w_out
  s.end = next;
  return s;
}

// Records the step into `kernels` (which must be capturing or not: it works either way).
Status record_mini_step(Kernels& k, const MiniStep& s, DeviceAddress scratch) {
  using M = MiniStep;
  DeviceAddress next = scratch;
  auto alloc = [&](size_t bytes) {
    const DeviceAddress at = next;
    next += test_util::round_up(bytes, 256);
    return at;
  };
  const DeviceAddress table = s.inputs[0].first, norm = s.inputs[1].first, wq = s.inputs[2].first,
                      wk = s.inputs[3].first, wv = s.inputs[4].first, w_gate = s.inputs[5].first,
                      w_up = s.inputs[6].first, state = s.inputs[7].first,
                      w_out = s.inputs[8].first;
  const DeviceAddress x = alloc(M::kDim * 4), xn = alloc(M::kDim * 4), q = alloc(M::kDim * 4),
                      kk = alloc(M::kDim * 4), vv = alloc(M::kDim * 4),
                      scores = alloc(M::kHeads * M::kContext * 4), att = alloc(M::kDim * 4),
                      gate = alloc(M::kHidden * 4), up = alloc(M::kHidden * 4),
                      logits = alloc(M::kVocab * 4), token = alloc(4);
  SIESTA_RETURN_IF_ERROR(k.embed(table, M::kDim, s.params, x));
  SIESTA_RETURN_IF_ERROR(k.rms_norm(x, norm, M::kDim, 1e-5f, xn));
  SIESTA_RETURN_IF_ERROR(k.matmul(wq, xn, M::kDim, M::kDim, q));
  SIESTA_RETURN_IF_ERROR(k.matmul(wk, xn, M::kDim, M::kDim, kk));
  SIESTA_RETURN_IF_ERROR(k.matmul(wv, xn, M::kDim, M::kDim, vv));
  SIESTA_RETURN_IF_ERROR(k.rope(q, M::kHeads, M::kHeadDim, s.rope, s.params));
  SIESTA_RETURN_IF_ERROR(k.rope(kk, M::kHeads, M::kHeadDim, s.rope, s.params));
  SIESTA_RETURN_IF_ERROR(k.kv_store(kk, vv, s.type, M::kDim, s.k_cache, s.v_cache, s.params));
  SIESTA_RETURN_IF_ERROR(k.attention(q, s.k_cache, s.v_cache, s.type, M::kHeads, M::kHeadDim,
                                     M::kContext, s.params, scores, att));
  SIESTA_RETURN_IF_ERROR(k.add(att, M::kDim, x));
  SIESTA_RETURN_IF_ERROR(k.matmul(w_gate, x, M::kHidden, M::kDim, gate));
  SIESTA_RETURN_IF_ERROR(k.matmul(w_up, x, M::kHidden, M::kDim, up));
  SIESTA_RETURN_IF_ERROR(k.swiglu(gate, up, M::kHidden, gate));
  SIESTA_RETURN_IF_ERROR(k.recurrent_update(gate, up, M::kHidden, state));
  SIESTA_RETURN_IF_ERROR(k.matmul(w_out, state, M::kVocab, M::kHidden, logits));
  return k.argmax(logits, 0, M::kVocab - 1, token);
}

constexpr size_t kStepScratchOffset = 512u << 10;  // inside the 2 MiB arena, past the inputs

TEST_F(HostKernelsTest, ReplayingTwiceGivesIdenticalBitsAndMatchesDirectExecution) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    SCOPED_TRACE(std::string(kv_type_name(type)));
    const DeviceAddress base = arena_.range().base;
    MiniStep step = make_mini_step(type, base, 200 + static_cast<int>(type));
    ASSERT_LT(step.end, base + kStepScratchOffset);
    const size_t bytes = kArenaBytes;
    // Direct execution, for comparison.
    SIESTA_ASSERT_OK(kernels_->upload(std::vector<std::byte>(bytes), base));
    SIESTA_ASSERT_OK(step.upload_inputs(*kernels_, 4, 5));
    SIESTA_ASSERT_OK(record_mini_step(*kernels_, step, base + kStepScratchOffset));
    const auto direct = get_bytes(base, bytes);

    SIESTA_ASSERT_OK(kernels_->begin_capture());
    SIESTA_ASSERT_OK(record_mini_step(*kernels_, step, base + kStepScratchOffset));
    SIESTA_ASSERT_OK_AND_ASSIGN(auto graph, kernels_->end_capture());
    EXPECT_EQ(graph->operation_count(), 16u);
    std::vector<std::byte> replays[2];
    for (auto& out : replays) {
      SIESTA_ASSERT_OK(kernels_->upload(std::vector<std::byte>(bytes), base));
      SIESTA_ASSERT_OK(step.upload_inputs(*kernels_, 4, 5));
      SIESTA_ASSERT_OK(kernels_->replay(*graph));
      out = get_bytes(base, bytes);
    }
    EXPECT_EQ(test_util::first_difference(replays[0], replays[1]), -1);
    EXPECT_EQ(test_util::first_difference(replays[0], direct), -1);
    // And the token read at run time matters: another token changes the result.
    SIESTA_ASSERT_OK(step.upload_inputs(*kernels_, 7, 5));
    SIESTA_ASSERT_OK(kernels_->replay(*graph));
    EXPECT_NE(test_util::first_difference(get_bytes(base, bytes), replays[0]), -1);
  }
}

TEST_F(HostKernelsTest, GraphReplayedAfterDecommitAndCommitAtTheSameAddressGivesTheSameBits) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    SCOPED_TRACE(std::string(kv_type_name(type)));
    const DeviceAddress base = arena_.range().base;
    MiniStep step = make_mini_step(type, base, 300 + static_cast<int>(type));
    SIESTA_ASSERT_OK(kernels_->begin_capture());
    SIESTA_ASSERT_OK(record_mini_step(*kernels_, step, base + kStepScratchOffset));
    SIESTA_ASSERT_OK_AND_ASSIGN(auto graph, kernels_->end_capture());

    SIESTA_ASSERT_OK(kernels_->upload(std::vector<std::byte>(kArenaBytes), base));
    SIESTA_ASSERT_OK(step.upload_inputs(*kernels_, 2, 7));  // the last position of the context
    SIESTA_ASSERT_OK(kernels_->replay(*graph));
    const auto before = get_bytes(base, kArenaBytes);

    SIESTA_ASSERT_OK(sim_->decommit(arena_.range()));
    SIESTA_ASSERT_OK(sim_->commit(arena_.range()));  // fresh memory, same address
    SIESTA_ASSERT_OK(kernels_->upload(std::vector<std::byte>(kArenaBytes), base));
    SIESTA_ASSERT_OK(step.upload_inputs(*kernels_, 2, 7));
    SIESTA_ASSERT_OK(kernels_->replay(*graph));
    EXPECT_EQ(test_util::first_difference(get_bytes(base, kArenaBytes), before), -1);
  }
}

// Runs in the death test's child (so the simulator's stream thread is the child's own):
// records a graph over committed memory, releases the memory, replays. Any other way out
// exits with a message and a code the death test does not accept.
[[noreturn]] void fail_setup(const char* what) {
  std::fprintf(stderr, "setup failed: %s\n", what);
  std::_Exit(3);
}

void replay_after_decommit() {
  auto sim = SimBackend::create(small_sim_options());
  if (!sim.ok()) fail_setup("create backend");
  auto kernels = HostKernels::create(**sim);
  if (!kernels.ok()) fail_setup("create kernels");
  auto range = (*sim)->reserve(64u << 10);
  if (!range.ok() || !(*sim)->commit(*range).ok()) fail_setup("reserve/commit");
  if (!(*kernels)->begin_capture().ok()) fail_setup("begin_capture");
  if (!(*kernels)->add(range->base, 16, range->base + 1024).ok()) fail_setup("add");
  auto graph = (*kernels)->end_capture();
  if (!graph.ok()) fail_setup("end_capture");
  if (!(*kernels)->replay(**graph).ok() || !(*kernels)->synchronize().ok()) {
    fail_setup("replay over committed memory");
  }
  if (!(*sim)->decommit(*range).ok()) fail_setup("decommit");
  (void)(*kernels)->replay(**graph);
  (void)(*kernels)->synchronize();  // the replay faults on the PROT_NONE pages before this returns
  std::fprintf(stderr, "replay over released memory did not fault\n");
  std::_Exit(0);
}

TEST(HostKernelsDeathTest, ReplayingAGraphOverDecommittedMemoryFaults) {
  print_seed();
#ifdef SIESTA_SANITIZERS
  // AddressSanitizer reports the SEGV itself and exits non-zero.
  EXPECT_DEATH(replay_after_decommit(), "SEGV");
#else
  EXPECT_EXIT(replay_after_decommit(), ::testing::KilledBySignal(SIGSEGV), "");
#endif
}

}  // namespace
}  // namespace siesta
