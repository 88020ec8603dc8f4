// The block operations of CudaKernels (a prefill block of `count` tokens), each computing row i
// with the same scalar steps as its single-token kernel (cuda_kernel_ops.cu), so that a token
// gets the same bits in a block as alone:
//   embed, rope, kv_store, recurrent  the single-token bodies over count rows
//   rms_norm                          one block per row, the single-token kernel's reduction
//   matmul                            a shared-memory tiled product, 32 rows of w by 32 tokens
//                                     a block: each group of eight lanes holds the dot8 partial
//                                     sums of 4 x 8 outputs (lane j: k = j, j + 8, ...), so w
//                                     and x are read once per tile for all of them; the same
//                                     tree as the single-token matmul makes the bits equal
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda_vmm/cuda_kernel_device.h"
#include "backends/cuda_vmm/cuda_kernel_ops.h"

namespace siesta::cuda_ops {
namespace {

__global__ void embed_block_kernel(const float* table, uint32_t dim, const int32_t* tokens,
                                   uint32_t count, float* out) {
  const uint64_t total = uint64_t{count} * dim;
  for (uint64_t e = blockIdx.x * uint64_t{kThreads} + threadIdx.x; e < total;
       e += uint64_t{gridDim.x} * kThreads) {
    const uint64_t i = e / dim;
    out[e] = table[static_cast<int64_t>(tokens[i]) * dim + e % dim];
  }
}

__global__ void rms_norm_block_kernel(const float* x, const float* weight, uint32_t dim, float eps,
                                      float* out) {
  __shared__ float shared[kThreads];
  const uint64_t row = uint64_t{blockIdx.x} * dim;
  rms_norm_row(x + row, weight, dim, eps, out + row, shared);
}

constexpr uint32_t kTileRows = 32;        // rows of w per block
constexpr uint32_t kTileTokens = 32;      // tokens per block
constexpr uint32_t kTileK = 32;           // values of a row per shared-memory step
constexpr uint32_t kStride = kTileK + 2;  // padded: the 4 row groups of a warp hit 4 bank octets

__global__ void matmul_block_kernel(const float* w, const float* x, uint32_t rows, uint32_t cols,
                                    uint32_t count, float* out) {
  __shared__ float ws[kTileRows * kStride];
  __shared__ float xs[kTileTokens * kStride];
  const uint32_t r0 = blockIdx.x * kTileRows;
  const uint32_t i0 = blockIdx.y * kTileTokens;
  const uint32_t j = threadIdx.x % 8;
  const uint32_t rg = threadIdx.x / 8 % 8;  // rows r0 + rg * 4 ..
  const uint32_t tg = threadIdx.x / 64;     // tokens i0 + tg * 8 ..
  float acc[4][8];
#pragma unroll
  for (uint32_t a = 0; a < 4; ++a) {
#pragma unroll
    for (uint32_t b = 0; b < 8; ++b) acc[a][b] = 0.0f;
  }
  for (uint32_t k0 = 0; k0 < cols; k0 += kTileK) {
    // Zeros past the edges: a product 0 * 0 adds +0 to a partial that is never -0, so the
    // partial keeps its bits.
    for (uint32_t e = threadIdx.x; e < kTileRows * kTileK; e += kThreads) {
      const uint32_t r = e / kTileK;
      const uint32_t k = e % kTileK;
      const bool in_w = r0 + r < rows && k0 + k < cols;
      ws[r * kStride + k] = in_w ? w[uint64_t{r0 + r} * cols + k0 + k] : 0.0f;
      const bool in_x = i0 + r < count && k0 + k < cols;
      xs[r * kStride + k] = in_x ? x[uint64_t{i0 + r} * cols + k0 + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (uint32_t m = 0; m < kTileK / 8; ++m) {
      const uint32_t k = 8 * m + j;
      float wv[4];
      float xv[8];
#pragma unroll
      for (uint32_t a = 0; a < 4; ++a) wv[a] = ws[(rg * 4 + a) * kStride + k];
#pragma unroll
      for (uint32_t b = 0; b < 8; ++b) xv[b] = xs[(tg * 8 + b) * kStride + k];
#pragma unroll
      for (uint32_t a = 0; a < 4; ++a) {
#pragma unroll
        for (uint32_t b = 0; b < 8; ++b) acc[a][b] = acc[a][b] + wv[a] * xv[b];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (uint32_t a = 0; a < 4; ++a) {
#pragma unroll
    for (uint32_t b = 0; b < 8; ++b) {
      const float total = tree8_of_group(acc[a][b]);
      const uint32_t r = r0 + rg * 4 + a;
      const uint32_t i = i0 + tg * 8 + b;
      if (b == j && r < rows && i < count) out[uint64_t{i} * rows + r] = total;
    }
  }
}

__global__ void rope_block_kernel(float* vec, uint32_t heads, uint32_t head_dim, const float* table,
                                  uint32_t position, uint32_t count) {
  const uint32_t half = head_dim / 2;
  const uint64_t pairs = uint64_t{heads} * half;
  const uint64_t total = pairs * count;
  for (uint64_t e = blockIdx.x * uint64_t{kThreads} + threadIdx.x; e < total;
       e += uint64_t{gridDim.x} * kThreads) {
    const uint64_t i = e / pairs;
    const float* angles = table + (uint64_t{position} + i) * half * 2;
    rope_pair(vec + i * heads * head_dim, e % pairs, half, angles);
  }
}

// blockIdx.y: k (0) or v (1); blockIdx.z: the row.
__global__ void kv_store_block_kernel(const float* k, const float* v, KvType type, uint32_t dim,
                                      void* k_cache, void* v_cache, uint32_t position) {
  const uint64_t i = blockIdx.x * uint64_t{kThreads} + threadIdx.x;
  if (i >= dim) return;  // a whole warp leaves (or stays): dim is a multiple of 32 for int8
  const uint32_t r = blockIdx.z;
  const float* src = (blockIdx.y == 0 ? k : v) + uint64_t{r} * dim;
  char* row = const_cast<char*>(kv_row(blockIdx.y == 0 ? k_cache : v_cache, uint64_t{position} + r,
                                       kv_row_bytes_device(type, dim)));
  kv_store_value(type, dim, static_cast<uint32_t>(i), src[i], row);
}

__global__ void recurrent_scan_kernel(const float* input, const float* gate, uint32_t n,
                                      uint32_t count, float* state, float* states) {
  for (uint64_t e = blockIdx.x * uint64_t{kThreads} + threadIdx.x; e < n;
       e += uint64_t{gridDim.x} * kThreads) {
    float s = state[e];
    for (uint32_t i = 0; i < count; ++i) {
      const uint64_t at = uint64_t{i} * n + e;
      s = recurrent_value(s, input[at], gate[at]);
      states[at] = s;
    }
    state[e] = s;
  }
}

}  // namespace

cudaError_t embed_block(cudaStream_t stream, const float* table, uint32_t dim,
                        const int32_t* tokens, uint32_t count, float* out) {
  embed_block_kernel<<<grid_for(uint64_t{count} * dim), kThreads, 0, stream>>>(table, dim, tokens,
                                                                               count, out);
  return cudaGetLastError();
}

cudaError_t rms_norm_block(cudaStream_t stream, const float* x, const float* weight, uint32_t dim,
                           float eps, uint32_t count, float* out) {
  rms_norm_block_kernel<<<count, kThreads, 0, stream>>>(x, weight, dim, eps, out);
  return cudaGetLastError();
}

cudaError_t matmul_block(cudaStream_t stream, const float* w, const float* x, uint32_t rows,
                         uint32_t cols, uint32_t count, float* out) {
  const dim3 grid((rows + kTileRows - 1) / kTileRows, (count + kTileTokens - 1) / kTileTokens);
  matmul_block_kernel<<<grid, kThreads, 0, stream>>>(w, x, rows, cols, count, out);
  return cudaGetLastError();
}

cudaError_t rope_block(cudaStream_t stream, float* vec, uint32_t heads, uint32_t head_dim,
                       const float* table, uint32_t position, uint32_t count) {
  rope_block_kernel<<<grid_for(uint64_t{heads} * (head_dim / 2) * count), kThreads, 0, stream>>>(
      vec, heads, head_dim, table, position, count);
  return cudaGetLastError();
}

cudaError_t kv_store_block(cudaStream_t stream, const float* k, const float* v, KvType type,
                           uint32_t dim, void* k_cache, void* v_cache, uint32_t position,
                           uint32_t count) {
  const dim3 grid((dim + kThreads - 1) / kThreads, 2, count);
  kv_store_block_kernel<<<grid, kThreads, 0, stream>>>(k, v, type, dim, k_cache, v_cache, position);
  return cudaGetLastError();
}

cudaError_t recurrent_scan(cudaStream_t stream, const float* input, const float* gate, uint32_t n,
                           uint32_t count, float* state, float* states) {
  recurrent_scan_kernel<<<grid_for(n), kThreads, 0, stream>>>(input, gate, n, count, state, states);
  return cudaGetLastError();
}

}  // namespace siesta::cuda_ops
