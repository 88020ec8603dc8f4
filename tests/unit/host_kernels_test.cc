// HostKernels: every kernel against the reference kernels (tests/support/reference_kernels.h)
// on a SimBackend with committed memory, the order of kernels and copies on the stream, and
// the argument checks. (Graphs: host_kernel_graph_test.cc; number formats:
// kernel_numerics_test.cc.)
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
#include <string>
#include <vector>

#include "tests/support/backend_test_util.h"
#include "tests/support/host_kernels_fixture.h"
#include "tests/support/reference_kernels.h"

namespace siesta {
namespace {

using kernel_test::expect_close;
using kernel_test::expect_same_bits;
using kernel_test::HostKernelsTest;
using kernel_test::Random;

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
    const DeviceAddress out = t.alloc(dim * 4);
    SIESTA_ASSERT_OK(t.kernels_->attention(t.put(q), kc, vc, type, heads, head_dim, context,
                                           t.put_params(0, position), out));
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

TEST_F(HostKernelsTest, KernelsAreOrderedWithTheBackendsCopiesOnlyBySynchronize) {
  // As on a GPU, the kernels' stream and the backend's copy stream are not ordered: a copy
  // enqueued after a kernel without a synchronize between reads the bytes from before it
  // (the simulator runs the kernel only once something waits for it); after synchronize()
  // it reads the kernel's result.
  Random rng(9);
  const uint32_t rows = 128, cols = 256;
  const auto w = rng.floats(size_t{rows} * cols), x = rng.floats(cols);
  const std::vector<float> before(rows, 7.0f);
  const DeviceAddress wa = put(w), xa = put(x), out = put(before);
  SIESTA_ASSERT_OK(kernels_->synchronize());
  SIESTA_ASSERT_OK(kernels_->matmul(wa, xa, rows, cols, out));
  auto read_through_backend = [&] {
    std::vector<float> seen(rows);
    Result<std::vector<std::byte>> bytes = test_util::read_device(*sim_, out, rows * 4);
    EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
    if (bytes.ok()) std::memcpy(seen.data(), bytes->data(), rows * 4);
    return seen;
  };
  expect_same_bits(read_through_backend(), before, "a copy not ordered after the matmul");
  SIESTA_ASSERT_OK(sim_->synchronize());
  const std::vector<float> after = read_through_backend();
  expect_same_bits(after, get(out, rows), "a copy after synchronize()");
  EXPECT_NE(std::memcmp(after.data(), before.data(), rows * 4), 0);
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
  SIESTA_EXPECT_CODE(kernels_->attention(a, b, b, KvType::kInt8, 3, 16, 4, p, c + 512), bad);
  SIESTA_EXPECT_CODE(kernels_->attention(a, b, b, KvType::kF32, 2, 4, 0, p, c + 512), bad);
  SIESTA_EXPECT_CODE(kernels_->attention(a, b, b, KvType::kF32, 2, 4, 4, p, a + 4), bad);
  SIESTA_EXPECT_CODE(kernels_->recurrent_update(a, b, 0, c), bad);
  SIESTA_EXPECT_CODE(kernels_->argmax(a, 5, 4, c), bad);
  SIESTA_EXPECT_CODE(kernels_->argmax(0, 0, 4, c), bad);
  // None of the refused calls ran: every operand still holds its zeros.
  for (DeviceAddress at : {a, b, c}) expect_same_bits(get(at, 256), zeros, "untouched");
}

}  // namespace
}  // namespace siesta
