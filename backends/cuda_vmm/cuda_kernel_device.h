// Device code shared by the CUDA kernel files (cuda_kernel_ops.cu, cuda_kernel_block_ops.cu,
// cuda_kernel_attention.cu): the reduction shapes and per-element formulas that a single-token
// kernel and its block counterpart must share so that they give the same bits. Included only
// by .cu files (it is CUDA C++).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "compute/kernel_math.h"
#include "compute/kernels.h"

namespace siesta::cuda_ops {

constexpr int kThreads = 256;  // every block-level kernel; the reduction trees assume it
constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr unsigned kFullMask = 0xffffffffu;

inline unsigned grid_for(uint64_t n) {
  const uint64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

// Sum of `value` over the block, in a fixed tree; every thread gets the result.
// REQUIRES: blockDim.x == kThreads, called by every thread of the block.
__device__ inline float block_sum(float value, float* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();  // `shared` may be reused by the caller
  return total;
}

// The dot8 tree over the eight lanes of each group (lane j holding partial j).
__device__ inline float tree8_of_group(float p) {
  p += __shfl_xor_sync(kFullMask, p, 1);
  p += __shfl_xor_sync(kFullMask, p, 2);
  p += __shfl_xor_sync(kFullMask, p, 4);
  return p;
}

// The host's fixed-order dot product ("dot8", compute/kernel_contract.h) on a group of
// eight lanes: lane j of the group sums the products of k = j, j + 8, j + 16... in ascending
// order (the host's partial j), then three butterfly steps give every lane
// ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)), the host's combining tree (float
// addition is commutative, so p1 + p0 on lane 1 has the bits of p0 + p1). With --fmad=false
// each product is rounded before it is added, as on the host: the result is the host's, bit
// for bit. `product(k)` returns a[k] * b[k]; a lane with nothing to sum passes n = 0.
// REQUIRES: called by all 32 lanes of the warp (the shuffles are full-mask).
template <class Product>
__device__ inline float group8_dot8(uint32_t n, Product product) {
  const uint32_t j = threadIdx.x % 8;
  float p = 0.0f;
  // A counted loop: with `k += 8; k < n` the compiler must allow for k wrapping around and
  // cannot unroll it.
  const uint32_t steps = n > j ? (n - j + 7) / 8 : 0;
#pragma unroll 16
  for (uint32_t i = 0; i < steps; ++i) p += product(j + 8 * i);
  return tree8_of_group(p);
}

// rms_norm of one row by the whole block (strided per-thread sums, then block_sum's tree):
// the single-token kernel and every row of the block kernel run exactly this.
__device__ inline void rms_norm_row(const float* x, const float* weight, uint32_t dim, float eps,
                                    float* out, float* shared) {
  float sum = 0.0f;
  for (uint32_t i = threadIdx.x; i < dim; i += kThreads) sum += x[i] * x[i];
  const float mean = block_sum(sum, shared) / static_cast<float>(dim);
  const float scale = 1.0f / sqrtf(mean + eps);
  // Each thread rewrites only the elements it read, so out may equal x.
  for (uint32_t i = threadIdx.x; i < dim; i += kThreads) out[i] = x[i] * scale * weight[i];
}

__device__ inline float recurrent_value(float state, float input, float gate) {
  const float g = 1.0f / (1.0f + expf(-gate));
  return g * state + (1.0f - g) * tanhf(input);
}

__device__ inline uint64_t kv_row_bytes_device(KvType type, uint32_t dim) {
  switch (type) {
    case KvType::kF32: return uint64_t{dim} * 4;
    case KvType::kF16: return uint64_t{dim} * 2;
    case KvType::kInt8: return uint64_t{dim} + uint64_t{dim / kKvInt8Block} * 4;
  }
  return 0;
}

// One KV row's address: row `position` of a cache of `row_bytes`-byte rows.
__device__ inline const char* kv_row(const void* cache, uint64_t position, uint64_t row_bytes) {
  return static_cast<const char*>(cache) + position * row_bytes;
}

// Value j of a decoded cache row.
__device__ inline float kv_load(const char* row, KvType type, uint32_t dim, uint32_t j) {
  switch (type) {
    case KvType::kF32: return reinterpret_cast<const float*>(row)[j];
    case KvType::kF16: return __half2float(reinterpret_cast<const __half*>(row)[j]);
    case KvType::kInt8:
      return static_cast<float>(reinterpret_cast<const int8_t*>(row)[j]) *
             reinterpret_cast<const float*>(row + dim)[j / kKvInt8Block];
  }
  return 0.0f;
}

// Stores value i of a row of `dim` values, converted to `type`. For int8, every lane of the
// warp must call it with its own value of one 32-value block (the block's max is taken by
// shuffles): dim is a multiple of 32 and blocks hold whole warps, so a warp is one block.
__device__ inline void kv_store_value(KvType type, uint32_t dim, uint32_t i, float x, char* row) {
  if (type == KvType::kInt8) {
    float amax = fabsf(x);
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
    }
    const float scale = amax / 127.0f;
    int q = 0;
    if (scale != 0.0f) q = static_cast<int>(fminf(fmaxf(roundf(x / scale), -127.0f), 127.0f));
    reinterpret_cast<int8_t*>(row)[i] = static_cast<int8_t>(q);
    if (i % kKvInt8Block == 0) reinterpret_cast<float*>(row + dim)[i / kKvInt8Block] = scale;
  } else if (type == KvType::kF16) {
    reinterpret_cast<__half*>(row)[i] = __float2half_rn(x);
  } else {
    reinterpret_cast<float*>(row)[i] = x;
  }
}

__device__ inline void rope_pair(float* vec, uint64_t k, uint32_t half, const float* angles) {
  const uint64_t i = k % half;  // pair index within its head
  const float c = angles[2 * i];
  const float s = angles[2 * i + 1];
  const float x0 = vec[2 * k];  // head h's pair i is at h * head_dim + 2i = 2k
  const float x1 = vec[2 * k + 1];
  vec[2 * k] = x0 * c - x1 * s;
  vec[2 * k + 1] = x0 * s + x1 * c;
}

}  // namespace siesta::cuda_ops
