// CudaKernels' block operations (the prefill) on a device: row i of every block result has
// exactly the bits of the single-token kernel at position + i (blocks of 1 to 128 rows, tiles
// and chunks crossed, every KV type), and attention and matmul equal the contract's scalar
// steps (tests/support/reference_kernels.h: contract_attention, kernel_math::dot8) bit for
// bit, as the host kernels do. Skips, printing why, where CUDA is unavailable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "compute/kernel_math.h"
#include "tests/gpu/cuda_kernels_fixture.h"
#include "tests/support/reference_kernels.h"

namespace siesta {
namespace {

using test_util::Close;
using test_util::random_floats;
using test_util::SameBits;

// Its own suite name (the test binaries find a suite's labels by its file).
class CudaBlockKernelsTest : public test_util::CudaKernelsTest {};

template <class T>
::testing::AssertionResult same(const std::vector<T>& want, const std::vector<T>& got) {
  return SameBits(std::as_bytes(std::span(want)), std::as_bytes(std::span(got)));
}

TEST_F(CudaBlockKernelsTest, MatmulBlockRowsAreTheHostsDot8) {
  uint32_t seed = 400;
  for (auto [rows, cols] : {std::pair{1u, 1u}, std::pair{37u, 45u}, std::pair{512u, 512u},
                            std::pair{256u, 1024u}, std::pair{1000u, 128u}}) {
    for (uint32_t count : {1u, 7u, 32u, 33u, 128u}) {
      const auto w = random_floats(size_t{rows} * cols, ++seed);
      const auto x = random_floats(size_t{count} * cols, ++seed, -2, 2);
      const DeviceAddress wa = put(w), xa = put(x), out = alloc(size_t{count} * rows * 4);
      ASSERT_TRUE(kernels_->matmul_block(wa, xa, rows, cols, count, out).ok());
      const auto got = get<float>(out, size_t{count} * rows);
      std::vector<float> want(got.size());
      for (uint32_t i = 0; i < count; ++i) {
        for (uint32_t r = 0; r < rows; ++r) {
          want[size_t{i} * rows + r] =
              kernel_math::dot8(w.data() + size_t{r} * cols, x.data() + size_t{i} * cols, cols);
        }
      }
      ASSERT_TRUE(same(want, got)) << rows << "x" << cols << " count " << count;
      // The single-token kernel gives the same bits for row 0.
      const DeviceAddress one = alloc(rows * 4);
      ASSERT_TRUE(kernels_->matmul(wa, xa, rows, cols, one).ok());
      ASSERT_TRUE(
          same(std::vector<float>(want.begin(), want.begin() + rows), get<float>(one, rows)));
    }
  }
}

TEST_F(CudaBlockKernelsTest, ElementwiseBlockRowsAreSingleTokenKernels) {
  const uint32_t heads = 4, head_dim = 32, dim = heads * head_dim, vocab = 50;
  const uint32_t count = 40, position = 100;
  const auto table = random_floats(size_t{vocab} * dim, 410);
  const auto weight = random_floats(dim, 411, 0.5f, 1.5f);
  std::vector<int32_t> tokens(count);
  for (uint32_t i = 0; i < count; ++i) tokens[i] = static_cast<int32_t>((i * 17) % vocab);
  const DeviceAddress ta = put(table), wa = put(weight), tk = put(tokens);
  const DeviceAddress rope = alloc(size_t{256} * head_dim * 4);
  ASSERT_TRUE(kernels_->rope_table(rope, 256, head_dim, 10000.0f).ok());
  const DeviceAddress xb = alloc(size_t{count} * dim * 4);
  ASSERT_TRUE(kernels_->embed_block(ta, dim, tk, count, xb).ok());
  ASSERT_TRUE(kernels_->rms_norm_block(xb, wa, dim, 1e-5f, count, xb).ok());
  ASSERT_TRUE(kernels_->rope_block(xb, heads, head_dim, rope, position, count).ok());
  const auto in = random_floats(size_t{count} * dim, 412, -3, 3);
  const auto gate = random_floats(size_t{count} * dim, 413, -6, 6);
  const auto state0 = random_floats(dim, 414);
  const DeviceAddress ia = put(in), ga = put(gate), sb = put(state0);
  const DeviceAddress ss = alloc(size_t{count} * dim * 4);
  ASSERT_TRUE(kernels_->recurrent_scan(ia, ga, dim, count, sb, ss).ok());

  std::vector<float> rows, states;
  const DeviceAddress s1 = put(state0);
  for (uint32_t i = 0; i < count; ++i) {
    const DeviceAddress x = alloc(dim * 4), p = put_params(tokens[i], position + i);
    ASSERT_TRUE(kernels_->embed(ta, dim, p, x).ok());
    ASSERT_TRUE(kernels_->rms_norm(x, wa, dim, 1e-5f, x).ok());
    ASSERT_TRUE(kernels_->rope(x, heads, head_dim, rope, p).ok());
    const auto row = get<float>(x, dim);
    rows.insert(rows.end(), row.begin(), row.end());
    ASSERT_TRUE(
        kernels_->recurrent_update(ia + size_t{i} * dim * 4, ga + size_t{i} * dim * 4, dim, s1)
            .ok());
    const auto st = get<float>(s1, dim);
    states.insert(states.end(), st.begin(), st.end());
  }
  EXPECT_TRUE(same(rows, get<float>(xb, size_t{count} * dim))) << "embed, rms_norm, rope";
  EXPECT_TRUE(same(states, get<float>(ss, size_t{count} * dim))) << "recurrent_scan states";
  EXPECT_TRUE(same(get<float>(s1, dim), get<float>(sb, dim))) << "recurrent_scan final state";
}

TEST_F(CudaBlockKernelsTest, KvStoreBlockWritesTheRowsOfSingleStores) {
  const uint32_t dim = 128, context = 90, count = 70, position = 10;
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    const size_t row = kv_row_bytes(type, dim);
    const auto k = random_floats(size_t{count} * dim, 420, -4, 4);
    const auto v = random_floats(size_t{count} * dim, 421, -4, 4);
    const DeviceAddress ka = put(k), va = put(v);
    const std::vector<std::byte> zeros(row * context);
    const DeviceAddress kb = put(zeros), vb = put(zeros), k1 = put(zeros), v1 = put(zeros);
    ASSERT_TRUE(kernels_->kv_store_block(ka, va, type, dim, kb, vb, position, count).ok());
    for (uint32_t i = 0; i < count; ++i) {
      ASSERT_TRUE(kernels_
                      ->kv_store(ka + size_t{i} * dim * 4, va + size_t{i} * dim * 4, type, dim, k1,
                                 v1, put_params(0, position + i))
                      .ok());
    }
    EXPECT_TRUE(SameBits(get<std::byte>(k1, row * context), get<std::byte>(kb, row * context)))
        << kv_type_name(type);
    EXPECT_TRUE(SameBits(get<std::byte>(v1, row * context), get<std::byte>(vb, row * context)))
        << kv_type_name(type);
  }
}

// Attention over a random cache: every block row equals the single-token kernel, and both
// equal the contract's scalar steps and (within 2e-5 of the largest |V|) the double reference.
TEST_F(CudaBlockKernelsTest, AttentionBlockRowsAreTheContractsAttention) {
  struct Block {
    uint32_t position, count;
  };
  const Block blocks[] = {{0, 1}, {0, 64}, {60, 9}, {1000, 100}, {2040, 128}, {2500, 3}};
  uint32_t seed = 430;
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    for (uint32_t head_dim : {32u, 64u}) {
      const uint32_t heads = 4, dim = heads * head_dim, context = 2600;
      std::vector<std::byte> k_cache, v_cache;
      for (uint32_t t = 0; t < context; ++t) {
        const auto k = ref::kv_encode(type, random_floats(dim, ++seed, -2, 2));
        const auto v = ref::kv_encode(type, random_floats(dim, ++seed, -3, 3));
        k_cache.insert(k_cache.end(), k.begin(), k.end());
        v_cache.insert(v_cache.end(), v.begin(), v.end());
      }
      const DeviceAddress kc = put(k_cache), vc = put(v_cache);
      const DeviceAddress scratch = alloc(attention_scratch_bytes(128, heads, head_dim, context));
      for (const Block& b : blocks) {
        const std::string where = std::string(kv_type_name(type)) + " head_dim " +
                                  std::to_string(head_dim) + " block at " +
                                  std::to_string(b.position) + " of " + std::to_string(b.count);
        const auto q = random_floats(size_t{b.count} * dim, ++seed, -2, 2);
        const DeviceAddress qa = put(q), out = alloc(size_t{b.count} * dim * 4);
        ASSERT_TRUE(kernels_
                        ->attention_block(qa, kc, vc, type, heads, head_dim, context, b.position,
                                          b.count, scratch, out)
                        .ok());
        const auto block = get<float>(out, size_t{b.count} * dim);
        for (uint32_t i : {0u, b.count / 2, b.count - 1}) {
          const DeviceAddress one = alloc(dim * 4);
          ASSERT_TRUE(kernels_
                          ->attention(qa + size_t{i} * dim * 4, kc, vc, type, heads, head_dim,
                                      context, put_params(0, b.position + i), one)
                          .ok());
          const auto single = get<float>(one, dim);
          const std::vector<float> row(block.begin() + size_t{i} * dim,
                                       block.begin() + size_t{i + 1} * dim);
          EXPECT_TRUE(same(single, row)) << where << " row " << i << ": block vs single";
          const std::vector<float> qi(q.begin() + size_t{i} * dim, q.begin() + size_t{i + 1} * dim);
          EXPECT_TRUE(same(
              ref::contract_attention(qi, k_cache, v_cache, type, heads, head_dim, b.position + i),
              single))
              << where << " row " << i << ": against the contract's steps";
          EXPECT_TRUE(Close(ref::attention(qi, k_cache, v_cache, type, heads, head_dim,
                                           static_cast<int32_t>(b.position + i)),
                            single, 2e-5 * 3, 0))
              << where << " row " << i << ": against the double reference";
        }
      }
    }
  }
}

TEST_F(CudaBlockKernelsTest, BlockArgumentsAreCheckedBeforeTheDevice) {
  const DeviceAddress a = alloc(4096), b = alloc(4096);
  const auto bad = StatusCode::kInvalidArgument;
  EXPECT_EQ(kernels_->matmul_block(a, b, 4, 4, 0, a + 2048).code(), bad);
  EXPECT_EQ(kernels_->matmul_block(a, b, 4, 4, 2, b + 16).code(), bad) << "out overlaps x";
  EXPECT_EQ(kernels_->embed_block(a, 4, b + 2, 1, a).code(), bad);
  EXPECT_EQ(kernels_->attention_block(a, b, b, KvType::kF32, 2, 512, 4, 0, 1, a, b).code(), bad)
      << "head_dim above the CUDA kernels' limit";
  EXPECT_EQ(kernels_->attention_block(a, b, b, KvType::kF32, 2, 4, 4, 0, 1, 0, a + 1024).code(),
            bad)
      << "no scratch";
  EXPECT_EQ(kernels_->recurrent_scan(a, b, 4, 0, a, b).code(), bad);
  EXPECT_TRUE(kernels_->synchronize().ok()) << "nothing reached the device";
}

}  // namespace
}  // namespace siesta
