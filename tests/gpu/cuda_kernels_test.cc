// CudaKernels on a real device, memory from a CudaVmmBackend (as the engine gets it): every
// kernel against tests/support/reference_kernels.h within the tolerances stated below, two
// runs bit-identical, a captured graph equal to eager launches and still bit-identical after
// its memory was decommitted and committed again at the same address, and misuse refused.
// Every test skips, printing why, where CUDA is unavailable.
//
// Tolerances (inputs uniform in [-1, 1]; the reference accumulates in double):
//   exact          embed, add, kv_store f32/f16 bytes, int8 q and scales (a q may differ by 1
//                  only where x / scale lies within 1e-5 of a tie), argmax; matmul equals the
//                  host kernels' fixed-order "dot8" bit for bit
//   1 ulp          rope_table (the GPU's double cos/sin may differ from glibc's by an ulp)
//   1e-4 * sum|w_c x_c|   matmul (float sums in another order than the reference's)
//   abs 2e-6 + rel 1e-5   rms_norm, swiglu, rope, recurrent_update (expf/tanhf: 2 ulp)
//   abs 2e-5       attention (float scores, exp and weighted sums over up to 256 rows)
#include "backends/cuda_vmm/cuda_kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda_vmm/cuda_vmm_backend.h"
#include "tests/gpu/cuda_kernels_fixture.h"
#include "tests/support/reference_kernels.h"

namespace siesta {
namespace {

using test_util::bytes_of;
using test_util::Close;
using test_util::CudaKernelsTest;
using test_util::random_floats;
using test_util::SameBits;

TEST_F(CudaKernelsTest, NameAndTransfersRoundTrip) {
  EXPECT_EQ(kernels_->name(), "cuda");
  // Larger than both pinned upload buffers together, odd size and offset.
  std::vector<uint8_t> bytes(size_t{9} << 20 | 13);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + i / 7);
  const DeviceAddress at = alloc(bytes.size() + 3) + 3;
  write(at, bytes);
  EXPECT_EQ(get<uint8_t>(at, bytes.size()), bytes);
  EXPECT_TRUE(kernels_->upload({}, at).ok());
  EXPECT_TRUE(kernels_->download(at, {}).ok());
}

TEST_F(CudaKernelsTest, EmbedIsExact) {
  const uint32_t vocab = 300, dim = 777;
  const auto table = random_floats(size_t{vocab} * dim, 1);
  const DeviceAddress t = put(table), out = alloc(dim * 4);
  for (int32_t token : {0, 123, 299}) {
    ASSERT_TRUE(kernels_->embed(t, dim, put_params(token, 0), out).ok());
    EXPECT_EQ(get<float>(out, dim), ref::embed(table, dim, token)) << "token " << token;
  }
}

TEST_F(CudaKernelsTest, RmsNormMatchesReference) {
  for (uint32_t dim : {1u, 255u, 4096u, 5000u}) {
    const auto x = random_floats(dim, dim), w = random_floats(dim, dim + 1);
    const DeviceAddress dx = put(x), dw = put(w), out = alloc(dim * 4);
    ASSERT_TRUE(kernels_->rms_norm(dx, dw, dim, 1e-5f, out).ok());
    EXPECT_TRUE(Close(ref::rms_norm(x, w, 1e-5f), get<float>(out, dim), 2e-6, 1e-5)) << dim;
    ASSERT_TRUE(kernels_->rms_norm(dx, dw, dim, 1e-5f, dx).ok()) << "in place";
    EXPECT_TRUE(Close(ref::rms_norm(x, w, 1e-5f), get<float>(dx, dim), 2e-6, 1e-5)) << dim;
  }
}

// The host's fixed-order dot product ("dot8", compute/kernel_contract.h), which the CUDA
// matmul and attention scores reproduce bit for bit.
float host_dot8(const float* a, const float* b, uint32_t n) {
  float p[8] = {};
  for (uint32_t k = 0; k < n; ++k) p[k % 8] += a[k] * b[k];
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

TEST_F(CudaKernelsTest, MatmulMatchesReference) {
  for (auto [rows, cols] : {std::pair{1u, 1u}, {1000u, 777u}, {257u, 4096u}, {4096u, 64u}}) {
    const auto w = random_floats(size_t{rows} * cols, rows), x = random_floats(cols, cols);
    const DeviceAddress dw = put(w), dx = put(x), out = alloc(rows * 4);
    ASSERT_TRUE(kernels_->matmul(dw, dx, rows, cols, out).ok());
    const auto want = ref::matmul(w, x, rows, cols);
    const auto magnitude = ref::matmul_magnitude(w, x, rows, cols);
    const auto got = get<float>(out, rows);
    for (uint32_t r = 0; r < rows; ++r) {
      ASSERT_EQ(got[r], host_dot8(&w[size_t{r} * cols], x.data(), cols))
          << "the host's dot8, bit for bit: " << rows << "x" << cols << " row " << r;
      ASSERT_LE(std::fabs(double{want[r]} - got[r]), 1e-4 * magnitude[r] + 1e-30)
          << rows << "x" << cols << " row " << r;
    }
  }
}

TEST_F(CudaKernelsTest, ElementwiseOpsMatchReference) {
  const uint32_t n = 100003;
  const auto a = random_floats(n, 7), b = random_floats(n, 8), c = random_floats(n, 9, -4, 4);
  const DeviceAddress da = put(a), db = put(b), dc = put(c), out = alloc(n * 4);

  ASSERT_TRUE(kernels_->add(da, n, db).ok());
  EXPECT_EQ(get<float>(db, n), ref::add(a, b)) << "add is exact";
  write(db, b);

  ASSERT_TRUE(kernels_->swiglu(dc, db, n, out).ok());
  EXPECT_TRUE(Close(ref::swiglu(c, b), get<float>(out, n), 2e-6, 1e-5));
  ASSERT_TRUE(kernels_->swiglu(dc, db, n, dc).ok()) << "out == gate";
  EXPECT_TRUE(Close(ref::swiglu(c, b), get<float>(dc, n), 2e-6, 1e-5));
  write(dc, c);

  ASSERT_TRUE(kernels_->recurrent_update(da, dc, n, db).ok());
  EXPECT_TRUE(Close(ref::recurrent_update(a, c, b), get<float>(db, n), 2e-6, 1e-5));
}

TEST_F(CudaKernelsTest, RopeTableWithinOneUlpAndRopeMatches) {
  const uint32_t context = 4096, head_dim = 128, heads = 6;
  const auto want = ref::rope_table(context, head_dim, 10000.0f);
  const DeviceAddress table = alloc(want.size() * 4);
  ASSERT_TRUE(kernels_->rope_table(table, context, head_dim, 10000.0f).ok());
  const auto got = get<float>(table, want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t ulps = std::bit_cast<int32_t>(want[i]) - int64_t{std::bit_cast<int32_t>(got[i])};
    ASSERT_LE(std::abs(ulps), 1) << "entry " << i << ": " << want[i] << " vs " << got[i];
  }
  write(table, want);  // rope against the reference's own table
  const auto vec = random_floats(heads * head_dim, 3);
  const DeviceAddress dv = alloc(vec.size() * 4);
  for (int32_t position : {0, 1, 1000, 4095}) {
    write(dv, vec);
    ASSERT_TRUE(kernels_->rope(dv, heads, head_dim, table, put_params(0, position)).ok());
    EXPECT_TRUE(Close(ref::rope(vec, heads, head_dim, want, position), get<float>(dv, vec.size()),
                      2e-6, 1e-5))
        << "position " << position;
  }
}

// Values that exercise f16 rounding (ties, subnormals, overflow) and int8 ties and zeros.
std::vector<float> kv_row_values(uint32_t dim, uint32_t seed) {
  auto row = random_floats(dim, seed, -3, 3);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f + 1.0f / 2048,
                            1.0f + 3.0f / 2048,
                            65504.0f,
                            65519.0f,
                            65520.0f,
                            -1e6f,
                            5.96e-8f,
                            2.98e-8f,
                            1e-7f,
                            6.1e-5f,
                            std::numeric_limits<float>::infinity()};
  for (size_t i = 0; i < std::size(specials) && i < dim; ++i) row[i] = specials[i];
  if (dim >= 96) {
    for (uint32_t i = 32; i < 64; ++i) row[i] = 0.0f;  // an all-zero int8 block: scale 0
    row[64] = 127.0f;                                  // scale 1: x / scale = x exactly
    row[65] = 2.5f;                                    // a tie: away from zero gives 3
    row[66] = -2.5f;
    row[67] = 0.5f;
  }
  return row;
}

TEST_F(CudaKernelsTest, KvStoreMatchesTheStorageFormats) {
  const uint32_t dim = 256, context = 8;
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    auto k = kv_row_values(dim, 11), v = kv_row_values(dim, 12);
    if (type != KvType::kF16) {  // int8 blocks with inf are meaningless; f32 copies anything
      for (float& x : k) x = std::isinf(x) ? 1.0f : x;
      for (float& x : v) x = std::isinf(x) ? 1.0f : x;
    }
    const size_t row_bytes = kv_row_bytes(type, dim);
    const DeviceAddress kc = alloc(row_bytes * context), vc = alloc(row_bytes * context);
    ASSERT_TRUE(kernels_->kv_store(put(k), put(v), type, dim, kc, vc, put_params(0, 5)).ok());
    for (auto [cache, row] : {std::pair{kc, &k}, {vc, &v}}) {
      const auto want = ref::kv_encode(type, *row);
      const auto got = get<std::byte>(cache + 5 * row_bytes, row_bytes);
      if (type != KvType::kInt8) {
        EXPECT_TRUE(SameBits(want, got)) << kv_type_name(type);
        continue;
      }
      EXPECT_TRUE(SameBits(std::span(want).subspan(dim), std::span(got).subspan(dim)))
          << "int8 scales";
      for (uint32_t i = 0; i < dim; ++i) {
        const int q_want = static_cast<int8_t>(want[i]), q_got = static_cast<int8_t>(got[i]);
        if (q_want == q_got) continue;
        float scale;
        std::memcpy(&scale, want.data() + dim + (i / kKvInt8Block) * 4, 4);
        const float ratio = (*row)[i] / scale;
        EXPECT_LT(std::fabs(std::fabs(ratio - std::trunc(ratio)) - 0.5f), 1e-5f)
            << "value " << i << " (" << (*row)[i] << "): q " << q_got << ", want " << q_want;
      }
    }
  }
}

TEST_F(CudaKernelsTest, F16NanBecomesCanonical) {
  const std::vector<float> k(32, std::numeric_limits<float>::quiet_NaN());
  const DeviceAddress kc = alloc(64), vc = alloc(64);
  ASSERT_TRUE(kernels_->kv_store(put(k), put(k), KvType::kF16, 32, kc, vc, put_params(0, 0)).ok());
  EXPECT_TRUE(SameBits(ref::kv_encode(KvType::kF16, k), get<std::byte>(kc, 64)));
}

TEST_F(CudaKernelsTest, AttentionMatchesReferenceForEveryKvType) {
  const uint32_t heads = 4, head_dim = 64, dim = heads * head_dim, context = 300;
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    const size_t row_bytes = kv_row_bytes(type, dim);
    std::vector<std::byte> k_cache, v_cache;
    for (uint32_t t = 0; t < context; ++t) {
      const auto k = ref::kv_encode(type, random_floats(dim, 1000 + t, -2, 2));
      const auto v = ref::kv_encode(type, random_floats(dim, 5000 + t));
      k_cache.insert(k_cache.end(), k.begin(), k.end());
      v_cache.insert(v_cache.end(), v.begin(), v.end());
    }
    ASSERT_EQ(k_cache.size(), row_bytes * context);
    const auto q = random_floats(dim, 77, -2, 2);
    const DeviceAddress dk = put(k_cache), dv = put(v_cache), dq = put(q);
    const DeviceAddress out = alloc(dim * 4);
    for (int32_t position : {0, 1, 37, 255, 299}) {
      ASSERT_TRUE(
          kernels_
              ->attention(dq, dk, dv, type, heads, head_dim, context, put_params(0, position), out)
              .ok());
      EXPECT_TRUE(Close(ref::attention(q, k_cache, v_cache, type, heads, head_dim, position),
                        get<float>(out, dim), 2e-5, 0))
          << kv_type_name(type) << " position " << position;
    }
  }
}

TEST_F(CudaKernelsTest, ArgmaxTakesTheLowestIndexOnTies) {
  const uint32_t n = 50000;
  auto logits = random_floats(n, 5);
  logits[777] = logits[40000] = logits[49999] = 2.0f;  // a three-way tie for the maximum
  logits[10] = 3.0f;                                   // outside [100, n-1]
  const float nan = std::numeric_limits<float>::quiet_NaN();
  logits[20000] = nan;
  const DeviceAddress dl = put(logits), out = alloc(4);
  for (auto [first, last] : {std::pair{100u, n - 1},
                             {0u, n - 1},
                             {800u, 40000u},
                             {5u, 5u},
                             {41000u, 49998u},
                             {20000u, 20005u},
                             {19999u, 20005u}}) {
    ASSERT_TRUE(kernels_->argmax(dl, first, last, out).ok());
    EXPECT_EQ(get<int32_t>(out, 1)[0], ref::argmax(logits, first, last))
        << "[" << first << ", " << last << "]";
  }
  const std::vector<float> flat(1000, -std::numeric_limits<float>::infinity());
  ASSERT_TRUE(kernels_->argmax(put(flat), 3, 999, out).ok());
  EXPECT_EQ(get<int32_t>(out, 1)[0], 3);
}

}  // namespace
}  // namespace siesta
