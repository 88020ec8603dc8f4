// HostKernels' block operations (the prefill): row i of every block result has exactly the bits
// of the single-token operation at position + i, for every block length (1 included), every
// KV type, blocks that cross an attention tile (64 rows) or chunk (1024 rows), and any thread
// count; and the vector loops equal the contract's scalar reference (kernel_math) bit for bit.
// Random inputs from the kernel seed (printed; SIESTA_KERNEL_SEED overrides it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/sim/host_kernel_loops.h"
#include "backends/sim/host_kernels.h"
#include "backends/sim/host_simd.h"
#include "compute/half_float.h"
#include "compute/kernel_math.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/host_kernels_fixture.h"
#include "tests/support/reference_kernels.h"

namespace siesta {
namespace {

using kernel_test::expect_close;
using kernel_test::expect_same_bits;
using kernel_test::HostKernelsTest;
using kernel_test::Random;

// ---- The vector loops against the scalar contract ----

TEST(HostLoopsTest, Dot8TileIsTheScalarDot8ForEveryShape) {
  kernel_test::print_seed();
  Random rng(300);
  for (uint32_t n : {1u, 7u, 8u, 9u, 31u, 64u, 100u}) {
    for (auto [na, nb] : {std::pair{1u, 1u}, std::pair{2u, 2u}, std::pair{3u, 5u},
                          std::pair{7u, 2u}, std::pair{8u, 9u}, std::pair{33u, 3u}}) {
      const auto a = rng.floats(size_t{na} * n + 3), b = rng.floats(size_t{nb} * n + 5);
      std::vector<float> got(size_t{nb} * na, -1.0f), want(got.size());
      host_loops().dot8_tile(a.data(), n + 0, na, b.data(), n, nb, n, got.data(), na);
      for (uint32_t j = 0; j < nb; ++j) {
        for (uint32_t i = 0; i < na; ++i) {
          want[j * na + i] = kernel_math::dot8(a.data() + i * n, b.data() + j * n, n);
        }
      }
      expect_same_bits(
          got, want,
          "n " + std::to_string(n) + " " + std::to_string(na) + "x" + std::to_string(nb));
    }
  }
}

// The 4-lane (baseline) and 8-lane (AVX2) loops on the same inputs: the same bits.
TEST(HostLoopsTest, EveryWidthGivesTheSameBits) {
  const HostLoops* wide = host_loops_avx2();
  if (wide == nullptr) GTEST_SKIP() << "no AVX2 here: only the baseline loops run";
  const HostLoops& base = host_loops_baseline();
  std::printf("comparing %s with %s; host_loops() is %s\n", base.name, wide->name,
              host_loops().name);
  Random rng(306);
  for (uint32_t n : {5u, 32u, 67u}) {
    const uint32_t na = 13, nb = 11;
    const auto a = rng.floats(size_t{na} * n), b = rng.floats(size_t{nb} * n);
    std::vector<float> x(size_t{na} * nb), y(x.size());
    base.dot8_tile(a.data(), n, na, b.data(), n, nb, n, x.data(), na);
    wide->dot8_tile(a.data(), n, na, b.data(), n, nb, n, y.data(), na);
    expect_same_bits(y, x, "dot8_tile n " + std::to_string(n));
  }
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    const uint32_t heads = 2, head_dim = 32, dim = heads * head_dim, rows = 1100, count = 21;
    std::vector<std::byte> k_cache, v_cache;
    for (uint32_t t = 0; t < rows; ++t) {
      const auto k = ref::kv_encode(type, rng.floats(dim, -2, 2));
      const auto v = ref::kv_encode(type, rng.floats(dim, -3, 3));
      k_cache.insert(k_cache.end(), k.begin(), k.end());
      v_cache.insert(v_cache.end(), v.begin(), v.end());
    }
    const auto q = rng.floats(size_t{count} * dim, -2, 2);
    std::vector<float> x(size_t{count} * dim), y(x.size());
    const uint32_t position = rows - count;
    for (uint32_t h = 0; h < heads; ++h) {
      base.attend(
          {q.data(), k_cache.data(), v_cache.data(), type, heads, head_dim, position, x.data()}, h,
          0, count);
      wide->attend(
          {q.data(), k_cache.data(), v_cache.data(), type, heads, head_dim, position, y.data()}, h,
          0, count);
    }
    expect_same_bits(y, x, std::string("attend ") + std::string(kv_type_name(type)));
  }
}

TEST(HostLoopsTest, VectorExpIsTheScalarExpOnEveryLane) {
  std::vector<float> xs = {0.0f,  -0.0f,     -87.0f,   -87.00001f,    88.0f,  88.00001f, -1e30f,
                           1e30f, -INFINITY, INFINITY, std::nanf(""), 1e-30f, -1e-30f};
  for (float x = -100.0f; x < 100.0f; x += 0.00731f) xs.push_back(x);
  while (xs.size() % 4 != 0) xs.push_back(0.5f);
  for (size_t i = 0; i < xs.size(); i += 4) {
    const host_simd::F<4> v = host_simd::exp_f32<4>(host_simd::load<4>(xs.data() + i));
    for (int lane = 0; lane < 4; ++lane) {
      const float want = kernel_math::exp_f32(xs[i + lane]);
      const float got = v[lane];
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "exp of " << xs[i + lane];
    }
  }
}

// ---- Block operations against the single-token ones ----

class HostBlockKernelsTest : public HostKernelsTest {
 protected:
  // Runs `single` for every row and `block` once, on copies of the same inputs, and compares.
  void expect_rows_equal(const std::vector<float>& single, const std::vector<float>& block,
                         const std::string& what) {
    expect_same_bits(block, single, what);
  }
};

TEST_F(HostBlockKernelsTest, MatmulBlockRowsAreSingleTokenMatmuls) {
  Random rng(301);
  for (auto [rows, cols] :
       {std::pair{1u, 1u}, std::pair{9u, 37u}, std::pair{64u, 128u}, std::pair{33u, 256u}}) {
    for (uint32_t count : {1u, 2u, 5u, 17u}) {
      const auto w = rng.floats(size_t{rows} * cols), x = rng.floats(size_t{count} * cols, -2, 2);
      const DeviceAddress wa = put(w), xa = put(x), out = alloc(size_t{count} * rows * 4);
      SIESTA_ASSERT_OK(kernels_->matmul_block(wa, xa, rows, cols, count, out));
      const auto block = get(out, size_t{count} * rows);
      std::vector<float> single;
      for (uint32_t i = 0; i < count; ++i) {
        const DeviceAddress one = alloc(rows * 4);
        SIESTA_ASSERT_OK(kernels_->matmul(wa, xa + size_t{i} * cols * 4, rows, cols, one));
        const auto row = get(one, rows);
        single.insert(single.end(), row.begin(), row.end());
      }
      expect_rows_equal(
          single, block,
          std::to_string(rows) + "x" + std::to_string(cols) + " count " + std::to_string(count));
    }
  }
}

TEST_F(HostBlockKernelsTest, NormEmbedRopeAndScanRowsAreSingleTokenOperations) {
  Random rng(302);
  const uint32_t dim = 24, heads = 3, head_dim = 8, vocab = 11, count = 6, position = 5;
  const auto table = rng.floats(size_t{vocab} * dim), weight = rng.floats(dim, 0.5f, 1.5f);
  const auto rope = ref::rope_table(32, head_dim, 10000.0f);
  const std::vector<int32_t> tokens = {3, 0, 10, 3, 7, 1};
  const DeviceAddress ta = put(table), wa = put(weight), ra = put(rope), tk = put(tokens);

  const DeviceAddress xb = alloc(count * dim * 4);
  SIESTA_ASSERT_OK(kernels_->embed_block(ta, dim, tk, count, xb));
  SIESTA_ASSERT_OK(kernels_->rms_norm_block(xb, wa, dim, 1e-5f, count, xb));
  SIESTA_ASSERT_OK(kernels_->rope_block(xb, heads, head_dim, ra, position, count));
  std::vector<float> single;
  for (uint32_t i = 0; i < count; ++i) {
    const DeviceAddress x = alloc(dim * 4), p = put_params(tokens[i], position + i);
    SIESTA_ASSERT_OK(kernels_->embed(ta, dim, p, x));
    SIESTA_ASSERT_OK(kernels_->rms_norm(x, wa, dim, 1e-5f, x));
    SIESTA_ASSERT_OK(kernels_->rope(x, heads, head_dim, ra, p));
    const auto row = get(x, dim);
    single.insert(single.end(), row.begin(), row.end());
  }
  expect_rows_equal(single, get(xb, count * dim), "embed + rms_norm + rope");

  const auto in = rng.floats(count * dim, -3, 3), gate = rng.floats(count * dim, -6, 6);
  const auto state0 = rng.floats(dim);
  const DeviceAddress ia = put(in), ga = put(gate), sb = put(state0), ss = alloc(count * dim * 4);
  SIESTA_ASSERT_OK(kernels_->recurrent_scan(ia, ga, dim, count, sb, ss));
  const DeviceAddress s1 = put(state0);
  std::vector<float> states;
  for (uint32_t i = 0; i < count; ++i) {
    SIESTA_ASSERT_OK(kernels_->recurrent_update(ia + i * dim * 4, ga + i * dim * 4, dim, s1));
    const auto row = get(s1, dim);
    states.insert(states.end(), row.begin(), row.end());
  }
  expect_rows_equal(states, get(ss, count * dim), "recurrent_scan states");
  expect_same_bits(get(sb, dim), get(s1, dim), "recurrent_scan final state");
}

TEST_F(HostBlockKernelsTest, KvStoreBlockWritesTheRowsOfSingleStores) {
  Random rng(303);
  const uint32_t dim = 64, context = 12, count = 5, position = 6;
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    SCOPED_TRACE(std::string(kv_type_name(type)));
    const size_t row = kv_row_bytes(type, dim);
    const auto before = test_util::make_pattern(row * context, 7);
    const auto k = rng.floats(count * dim, -4, 4), v = rng.floats(count * dim, -4, 4);
    const DeviceAddress ka = put(k), va = put(v);
    const DeviceAddress kb = put(before), vb = put(before), k1 = put(before), v1 = put(before);
    SIESTA_ASSERT_OK(kernels_->kv_store_block(ka, va, type, dim, kb, vb, position, count));
    for (uint32_t i = 0; i < count; ++i) {
      SIESTA_ASSERT_OK(kernels_->kv_store(ka + i * dim * 4, va + i * dim * 4, type, dim, k1, v1,
                                          put_params(0, position + i)));
    }
    EXPECT_EQ(
        test_util::first_difference(get_bytes(kb, row * context), get_bytes(k1, row * context)),
        -1);
    EXPECT_EQ(
        test_util::first_difference(get_bytes(vb, row * context), get_bytes(v1, row * context)),
        -1);
  }
}

// A KV cache of `rows` random rows of `type` and the queries of a block.
struct AttentionCase {
  KvType type;
  uint32_t heads, head_dim, rows;
  std::vector<std::byte> k_cache, v_cache;
  float max_v = 0;
};

AttentionCase make_cache(Random& rng, KvType type, uint32_t heads, uint32_t head_dim,
                         uint32_t rows) {
  AttentionCase c{type, heads, head_dim, rows, {}, {}, 0};
  const uint32_t dim = heads * head_dim;
  for (uint32_t t = 0; t < rows; ++t) {
    const auto k = rng.floats(dim, -2, 2), v = rng.floats(dim, -3, 3);
    for (float f : v) c.max_v = std::max(c.max_v, std::fabs(f));
    const auto ke = ref::kv_encode(type, k), ve = ref::kv_encode(type, v);
    c.k_cache.insert(c.k_cache.end(), ke.begin(), ke.end());
    c.v_cache.insert(c.v_cache.end(), ve.begin(), ve.end());
  }
  return c;
}

TEST_F(HostBlockKernelsTest, AttentionBlockRowsAreSingleTokenAttentionAcrossTilesAndChunks) {
  Random rng(304);
  // Blocks that start and end inside a tile, cross tile (64) and chunk (1024) boundaries.
  struct Block {
    uint32_t position, count;
  };
  const Block blocks[] = {{0, 1}, {0, 5}, {60, 9}, {1020, 9}, {1023, 2}, {1080, 40}};
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    const uint32_t heads = 2, head_dim = type == KvType::kInt8 ? 16 : 6;
    const uint32_t dim = heads * head_dim, context = 1120;
    const AttentionCase c = make_cache(rng, type, heads, head_dim, context);
    const DeviceAddress kc = put(c.k_cache), vc = put(c.v_cache);
    const DeviceAddress scratch = alloc(attention_scratch_bytes(64, heads, head_dim, context));
    for (const Block& b : blocks) {
      SCOPED_TRACE(std::string(kv_type_name(type)) + " block at " + std::to_string(b.position) +
                   " of " + std::to_string(b.count));
      const auto q = rng.floats(size_t{b.count} * dim, -2, 2);
      const DeviceAddress qa = put(q), out = alloc(size_t{b.count} * dim * 4);
      SIESTA_ASSERT_OK(kernels_->attention_block(qa, kc, vc, type, heads, head_dim, context,
                                                 b.position, b.count, scratch, out));
      const auto block = get(out, size_t{b.count} * dim);
      std::vector<float> single;
      for (uint32_t i = 0; i < b.count; ++i) {
        const DeviceAddress one = alloc(dim * 4);
        SIESTA_ASSERT_OK(kernels_->attention(qa + size_t{i} * dim * 4, kc, vc, type, heads,
                                             head_dim, context, put_params(0, b.position + i),
                                             one));
        const auto row = get(one, dim);
        single.insert(single.end(), row.begin(), row.end());
        // And each against the double-precision reference, and the contract's own steps.
        const std::vector<float> qi(q.begin() + size_t{i} * dim, q.begin() + size_t{i + 1} * dim);
        expect_close(row,
                     ref::attention(qi, c.k_cache, c.v_cache, type, heads, head_dim,
                                    static_cast<int32_t>(b.position + i)),
                     0, 2e-5 * c.max_v + 1e-6, "against the reference");
        if (i == 0 || i + 1 == b.count) {  // the scalar contract is slow: the block's ends
          expect_same_bits(row,
                           ref::contract_attention(qi, c.k_cache, c.v_cache, type, heads, head_dim,
                                                   b.position + i),
                           "against the contract's steps");
        }
      }
      expect_rows_equal(single, block, "attention_block");
    }
  }
}

TEST_F(HostBlockKernelsTest, ThreadCountChangesNoBit) {
  Random rng(305);
  SIESTA_ASSERT_OK_AND_ASSIGN(auto one, HostKernels::create(*sim_, {.threads = 1}));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto three, HostKernels::create(*sim_, {.threads = 3}));
  ASSERT_EQ(one->threads(), 1u);
  ASSERT_EQ(three->threads(), 3u);
  const uint32_t heads = 4, head_dim = 16, dim = heads * head_dim, context = 1100;
  const uint32_t count = 37, position = 1000, rows = 70;
  const AttentionCase c = make_cache(rng, KvType::kF16, heads, head_dim, context);
  const DeviceAddress kc = put(c.k_cache), vc = put(c.v_cache);
  const auto q = rng.floats(size_t{count} * dim, -2, 2), w = rng.floats(size_t{rows} * dim);
  const DeviceAddress qa = put(q), wa = put(w);
  const DeviceAddress scratch = alloc(attention_scratch_bytes(count, heads, head_dim, context));
  std::vector<float> results[2];
  int i = 0;
  for (HostKernels* k : {one.get(), three.get()}) {
    const DeviceAddress att = alloc(size_t{count} * dim * 4), mm = alloc(size_t{count} * rows * 4);
    SIESTA_ASSERT_OK(k->attention_block(qa, kc, vc, KvType::kF16, heads, head_dim, context,
                                        position, count, scratch, att));
    SIESTA_ASSERT_OK(k->matmul_block(wa, qa, rows, dim, count, mm));
    results[i] = get(att, size_t{count} * dim);
    const auto m = get(mm, size_t{count} * rows);
    results[i].insert(results[i].end(), m.begin(), m.end());
    ++i;
  }
  expect_same_bits(results[1], results[0], "3 threads vs 1");
}

TEST_F(HostBlockKernelsTest, BlockArgumentsAreCheckedAndNothingRuns) {
  const auto zeros = std::vector<float>(256, 0.0f);
  const DeviceAddress a = put(zeros), b = put(zeros), c = put(zeros);
  const auto bad = StatusCode::kInvalidArgument;
  SIESTA_EXPECT_CODE(kernels_->embed_block(a, 4, b, 0, c), bad);
  SIESTA_EXPECT_CODE(kernels_->embed_block(a, 4, b + 2, 1, c), bad);
  SIESTA_EXPECT_CODE(kernels_->rms_norm_block(a, b, 4, 1e-5f, 0, c), bad);
  SIESTA_EXPECT_CODE(kernels_->matmul_block(a, b, 4, 4, 0, c), bad);
  SIESTA_EXPECT_CODE(kernels_->matmul_block(a, b, 4, 4, 2, b + 16), bad);  // out overlaps x
  SIESTA_EXPECT_CODE(kernels_->rope_block(a, 2, 5, b, 0, 1), bad);
  SIESTA_EXPECT_CODE(kernels_->kv_store_block(a, b, KvType::kInt8, 33, c, c, 0, 1), bad);
  SIESTA_EXPECT_CODE(kernels_->attention_block(a, b, b, KvType::kF32, 2, 4, 4, 0, 0, c, c + 512),
                     bad);
  SIESTA_EXPECT_CODE(kernels_->attention_block(a, b, b, KvType::kF32, 2, 4, 4, 0, 2, c, a + 32),
                     bad);  // out overlaps q's two rows
  SIESTA_EXPECT_CODE(kernels_->attention_block(a, b, b, KvType::kF32, 2, 4, 4, 0, 1, 0, c), bad);
  SIESTA_EXPECT_CODE(kernels_->recurrent_scan(a, b, 4, 0, c, c + 64), bad);
  for (DeviceAddress at : {a, b, c}) expect_same_bits(get(at, 256), zeros, "untouched");
}

}  // namespace
}  // namespace siesta
