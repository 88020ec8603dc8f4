// The kernels of CudaKernels. Shapes (why each is deterministic and reasonably fast):
//   elementwise ops      one thread per element (grid-stride loop)
//   rms_norm, argmax     one block of kThreads: strided per-thread pass in index order, then a
//                        shared-memory tree of fixed width
//   matmul               four rows per warp, eight lanes per row, in the host's dot8 order
//                        (group8_dot8): bit-identical to the host; w read once, coalesced
//   kv_store int8        one warp per 32-value block: the block max by shuffles (max is exact
//                        in any order), then each lane quantises its own value
// Attention is in cuda_kernel_attention.cu, the block operations in cuda_kernel_block_ops.cu;
// the pieces a single-token kernel shares with its block counterpart in cuda_kernel_device.h.
// The target is built with --fmad=false (backends/cuda_vmm/CMakeLists.txt): without fused
// multiply-adds the elementwise ops round like the host's plain C++ loops.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "backends/cuda_vmm/cuda_kernel_device.h"
#include "backends/cuda_vmm/cuda_kernel_ops.h"

namespace siesta::cuda_ops {
namespace {

__global__ void embed_kernel(const float* table, uint32_t dim, const StepParams* params,
                             float* out) {
  const float* row = table + static_cast<int64_t>(params->token) * dim;
  for (uint64_t i = blockIdx.x * uint64_t{kThreads} + threadIdx.x; i < dim;
       i += uint64_t{gridDim.x} * kThreads) {
    out[i] = row[i];
  }
}

__global__ void rms_norm_kernel(const float* x, const float* weight, uint32_t dim, float eps,
                                float* out) {
  __shared__ float shared[kThreads];
  rms_norm_row(x, weight, dim, eps, out, shared);
}

// Four rows per warp, a group of eight lanes per row (group8_dot8): each group reads 32
// consecutive bytes of its row per step, a full sector, so w streams at close to full
// bandwidth, and the result is the host's dot8, bit for bit.
__global__ void matmul_kernel(const float* w, const float* x, uint32_t rows, uint32_t cols,
                              float* out) {
  const uint64_t row = (uint64_t{blockIdx.x} * (blockDim.x / kWarp) + threadIdx.x / kWarp) * 4 +
                       (threadIdx.x % kWarp) / 8;
  const bool active = row < rows;  // inactive groups still join the shuffles
  const float* w_row = w + (active ? row : 0) * cols;
  const float sum = group8_dot8(active ? cols : 0, [&](uint32_t c) { return w_row[c] * x[c]; });
  if (active && threadIdx.x % 8 == 0) out[row] = sum;
}

__global__ void add_kernel(const float* x, uint32_t n, float* inout) {
  for (uint64_t i = blockIdx.x * uint64_t{kThreads} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * kThreads) {
    inout[i] += x[i];
  }
}

__global__ void swiglu_kernel(const float* gate, const float* up, uint32_t n, float* out) {
  for (uint64_t i = blockIdx.x * uint64_t{kThreads} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * kThreads) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// The host's formula exactly (compute/kernel_contract.h): frequency in double, the angle
// rounded to float, cos/sin in double, rounded to float. CUDA's double cos/sin are within an
// ulp of glibc's, so entries match the host's or differ by an ulp after rounding.
__global__ void rope_table_kernel(float* table, uint32_t context, uint32_t head_dim, float theta) {
  const uint32_t half = head_dim / 2;
  const uint64_t total = uint64_t{context} * half;
  for (uint64_t k = blockIdx.x * uint64_t{kThreads} + threadIdx.x; k < total;
       k += uint64_t{gridDim.x} * kThreads) {
    const uint64_t p = k / half;
    const uint64_t i = k % half;
    const double inv_freq =
        pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
    const float a = static_cast<float>(static_cast<double>(p) * inv_freq);
    table[2 * k] = static_cast<float>(cos(static_cast<double>(a)));
    table[2 * k + 1] = static_cast<float>(sin(static_cast<double>(a)));
  }
}

__global__ void rope_kernel(float* vec, uint32_t heads, uint32_t head_dim, const float* table,
                            const StepParams* params) {
  const uint32_t half = head_dim / 2;
  const uint64_t pairs = uint64_t{heads} * half;
  const float* angles = table + static_cast<uint64_t>(params->position) * half * 2;
  for (uint64_t k = blockIdx.x * uint64_t{kThreads} + threadIdx.x; k < pairs;
       k += uint64_t{gridDim.x} * kThreads) {
    rope_pair(vec, k, half, angles);
  }
}

// blockIdx.y selects k (0) or v (1); threads cover the row's dim values.
__global__ void kv_store_kernel(const float* k, const float* v, KvType type, uint32_t dim,
                                void* k_cache, void* v_cache, const StepParams* params) {
  const float* src = blockIdx.y == 0 ? k : v;
  char* row = const_cast<char*>(kv_row(blockIdx.y == 0 ? k_cache : v_cache,
                                       static_cast<uint64_t>(params->position),
                                       kv_row_bytes_device(type, dim)));
  const uint64_t i = blockIdx.x * uint64_t{kThreads} + threadIdx.x;
  if (i >= dim) return;  // a whole warp leaves (or stays): dim is a multiple of 32 for int8
  kv_store_value(type, dim, static_cast<uint32_t>(i), src[i], row);
}

__global__ void recurrent_update_kernel(const float* input, const float* gate, uint32_t n,
                                        float* state) {
  for (uint64_t i = blockIdx.x * uint64_t{kThreads} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * kThreads) {
    state[i] = recurrent_value(state[i], input[i], gate[i]);
  }
}

// (value, index) pairs: the larger value wins, the lower index on ties. As the host's
// ascending scan ("strictly greater replaces", starting from `first`): a NaN never wins,
// except a NaN at `first`, which nothing compares greater than.
__global__ void argmax_kernel(const float* logits, uint32_t first, uint32_t last, int32_t* out) {
  __shared__ float values[kThreads];
  __shared__ uint32_t indices[kThreads];
  constexpr uint32_t kNone = 0xffffffffu;
  float best = -INFINITY;
  uint32_t best_index = kNone;
  for (uint64_t i = uint64_t{first} + threadIdx.x; i <= last; i += kThreads) {
    const float value = logits[i];
    // Each thread visits its indices in increasing order, so '>' keeps the lowest on ties;
    // the first visited value is taken even when it is -inf.
    if (value > best || (best_index == kNone && !isnan(value))) {
      best = value;
      best_index = static_cast<uint32_t>(i);
    }
  }
  values[threadIdx.x] = best;
  indices[threadIdx.x] = best_index;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      const float other = values[threadIdx.x + stride];
      const uint32_t other_index = indices[threadIdx.x + stride];
      const float mine = values[threadIdx.x];
      const uint32_t my_index = indices[threadIdx.x];
      const bool take = other_index != kNone && (my_index == kNone || other > mine ||
                                                 (other == mine && other_index < my_index));
      if (take) {
        values[threadIdx.x] = other;
        indices[threadIdx.x] = other_index;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const bool first_wins = indices[0] == kNone || isnan(logits[first]);
    *out = static_cast<int32_t>(first_wins ? first : indices[0]);
  }
}

}  // namespace

cudaError_t embed(cudaStream_t stream, const float* table, uint32_t dim, const StepParams* params,
                  float* out) {
  embed_kernel<<<grid_for(dim), kThreads, 0, stream>>>(table, dim, params, out);
  return cudaGetLastError();
}

cudaError_t rms_norm(cudaStream_t stream, const float* x, const float* weight, uint32_t dim,
                     float eps, float* out) {
  rms_norm_kernel<<<1, kThreads, 0, stream>>>(x, weight, dim, eps, out);
  return cudaGetLastError();
}

cudaError_t matmul(cudaStream_t stream, const float* w, const float* x, uint32_t rows,
                   uint32_t cols, float* out) {
  // Small blocks (two warps, eight rows): a 4096-row matmul still spreads over every SM.
  constexpr unsigned kMatmulThreads = 64;
  constexpr unsigned kRowsPerBlock = kMatmulThreads / kWarp * 4;
  const unsigned blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  matmul_kernel<<<blocks, kMatmulThreads, 0, stream>>>(w, x, rows, cols, out);
  return cudaGetLastError();
}

cudaError_t add(cudaStream_t stream, const float* x, uint32_t n, float* inout) {
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, inout);
  return cudaGetLastError();
}

cudaError_t swiglu(cudaStream_t stream, const float* gate, const float* up, uint32_t n,
                   float* out) {
  swiglu_kernel<<<grid_for(n), kThreads, 0, stream>>>(gate, up, n, out);
  return cudaGetLastError();
}

cudaError_t rope_table(cudaStream_t stream, float* table, uint32_t context, uint32_t head_dim,
                       float theta) {
  rope_table_kernel<<<grid_for(uint64_t{context} * (head_dim / 2)), kThreads, 0, stream>>>(
      table, context, head_dim, theta);
  return cudaGetLastError();
}

cudaError_t rope(cudaStream_t stream, float* vec, uint32_t heads, uint32_t head_dim,
                 const float* table, const StepParams* params) {
  rope_kernel<<<grid_for(uint64_t{heads} * (head_dim / 2)), kThreads, 0, stream>>>(
      vec, heads, head_dim, table, params);
  return cudaGetLastError();
}

cudaError_t kv_store(cudaStream_t stream, const float* k, const float* v, KvType type, uint32_t dim,
                     void* k_cache, void* v_cache, const StepParams* params) {
  const dim3 grid((dim + kThreads - 1) / kThreads, 2);
  kv_store_kernel<<<grid, kThreads, 0, stream>>>(k, v, type, dim, k_cache, v_cache, params);
  return cudaGetLastError();
}

cudaError_t recurrent_update(cudaStream_t stream, const float* input, const float* gate, uint32_t n,
                             float* state) {
  recurrent_update_kernel<<<grid_for(n), kThreads, 0, stream>>>(input, gate, n, state);
  return cudaGetLastError();
}

cudaError_t argmax(cudaStream_t stream, const float* logits, uint32_t first, uint32_t last,
                   int32_t* out) {
  argmax_kernel<<<1, kThreads, 0, stream>>>(logits, first, last, out);
  return cudaGetLastError();
}

}  // namespace siesta::cuda_ops
