// The kernels of CudaKernels. Shapes (why each is deterministic and reasonably fast):
//   elementwise ops      one thread per element (grid-stride loop)
//   rms_norm, argmax     one block of kThreads: strided per-thread pass in index order, then a
//                        shared-memory tree of fixed width
//   matmul               four rows per warp, eight lanes per row, in the host's dot8 order
//                        (group8_dot8): bit-identical to the host; w read once, coalesced
//   kv_store int8        one warp per 32-value block: the block max by shuffles (max is exact
//                        in any order), then each lane quantises its own value
//   attention            one block per head: eight lanes per cache row compute its score (in
//                        the host's dot8 order), then block max, exp, block sum, p = e / sum,
//                        and a thread per output value sums p_t V_t over t in ascending order
// The target is built with --fmad=false (backends/cuda_vmm/CMakeLists.txt): without fused
// multiply-adds the elementwise ops round like the host's plain C++ loops.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "backends/cuda_vmm/cuda_kernel_ops.h"

namespace siesta::cuda_ops {
namespace {

constexpr int kThreads = 256;  // every block-level kernel; the reduction trees assume it
constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr unsigned kFullMask = 0xffffffffu;

unsigned grid_for(uint64_t n) {
  const uint64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

// Sum of `value` over the block, in a fixed tree; every thread gets the result.
// REQUIRES: blockDim.x == kThreads, called by every thread of the block.
__device__ float block_sum(float value, float* shared) {
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

__device__ float block_max(float value, float* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();
  return result;
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
__device__ float group8_dot8(uint32_t n, Product product) {
  const uint32_t j = threadIdx.x % 8;
  float p = 0.0f;
  // A counted loop: with `k += 8; k < n` the compiler must allow for k wrapping around and
  // cannot unroll it.
  const uint32_t steps = n > j ? (n - j + 7) / 8 : 0;
#pragma unroll 16
  for (uint32_t i = 0; i < steps; ++i) p += product(j + 8 * i);
  p += __shfl_xor_sync(kFullMask, p, 1);
  p += __shfl_xor_sync(kFullMask, p, 2);
  p += __shfl_xor_sync(kFullMask, p, 4);
  return p;
}

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
  float sum = 0.0f;
  for (uint32_t i = threadIdx.x; i < dim; i += kThreads) sum += x[i] * x[i];
  const float mean = block_sum(sum, shared) / static_cast<float>(dim);
  const float scale = 1.0f / sqrtf(mean + eps);
  // Each thread rewrites only the elements it read, so out may equal x.
  for (uint32_t i = threadIdx.x; i < dim; i += kThreads) out[i] = x[i] * scale * weight[i];
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
    const uint64_t i = k % half;  // pair index within its head
    const float c = angles[2 * i];
    const float s = angles[2 * i + 1];
    const float x0 = vec[2 * k];  // head h's pair i is at h * head_dim + 2i = 2k
    const float x1 = vec[2 * k + 1];
    vec[2 * k] = x0 * c - x1 * s;
    vec[2 * k + 1] = x0 * s + x1 * c;
  }
}

// One KV row's address: row `position` of a cache of `row_bytes`-byte rows.
__device__ inline const char* kv_row(const void* cache, int32_t position, uint64_t row_bytes) {
  return static_cast<const char*>(cache) + static_cast<uint64_t>(position) * row_bytes;
}

__device__ inline uint64_t kv_row_bytes_device(KvType type, uint32_t dim) {
  switch (type) {
    case KvType::kF32: return uint64_t{dim} * 4;
    case KvType::kF16: return uint64_t{dim} * 2;
    case KvType::kInt8: return uint64_t{dim} + uint64_t{dim / kKvInt8Block} * 4;
  }
  return 0;
}

// blockIdx.y selects k (0) or v (1); threads cover the row's dim values.
__global__ void kv_store_kernel(const float* k, const float* v, KvType type, uint32_t dim,
                                void* k_cache, void* v_cache, const StepParams* params) {
  const float* src = blockIdx.y == 0 ? k : v;
  char* row = const_cast<char*>(kv_row(blockIdx.y == 0 ? k_cache : v_cache, params->position,
                                       kv_row_bytes_device(type, dim)));
  const uint64_t i = blockIdx.x * uint64_t{kThreads} + threadIdx.x;
  if (type == KvType::kInt8) {
    // dim is a multiple of 32 and blocks hold whole warps, so a warp is exactly one int8
    // block and leaves (or stays) as a whole.
    if (i >= dim) return;
    const float x = src[i];
    float amax = fabsf(x);
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
    }
    const float scale = amax / 127.0f;
    int q = 0;
    if (scale != 0.0f) q = static_cast<int>(fminf(fmaxf(roundf(x / scale), -127.0f), 127.0f));
    reinterpret_cast<int8_t*>(row)[i] = static_cast<int8_t>(q);
    if (i % kKvInt8Block == 0) reinterpret_cast<float*>(row + dim)[i / kKvInt8Block] = scale;
    return;
  }
  if (i >= dim) return;
  if (type == KvType::kF16) {
    reinterpret_cast<__half*>(row)[i] = __float2half_rn(src[i]);
  } else {
    reinterpret_cast<float*>(row)[i] = src[i];
  }
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

// Instantiated per KV type: a run-time switch inside the row loops keeps the compiler from
// batching the loads of the unrolled iterations (measured on the H200: about 2x slower at 4096
// rows).
template <KvType type>
__global__ void attention_kernel(const float* q, const void* k_cache, const void* v_cache,
                                 uint32_t heads, uint32_t head_dim, uint32_t context,
                                 const StepParams* params, float* scores, float* out) {
  __shared__ float shared[kThreads];
  const uint32_t h = blockIdx.x;
  const uint32_t dim = heads * head_dim;
  const uint64_t row_bytes = kv_row_bytes_device(type, dim);
  // Rows [0, position]; a position past the scratch is clamped rather than written past it.
  const int32_t position = params->position;
  const uint32_t count =
      position < 0 ? 1u : (static_cast<uint32_t>(position) >= context ? context : position + 1u);
  const float* q_h = q + uint64_t{h} * head_dim;
  float* s = scores + uint64_t{h} * context;
  const float inv_root = 1.0f / sqrtf(static_cast<float>(head_dim));

  // Four cache rows per warp, a group of eight lanes per row: coalesced reads, and the
  // host's dot8 order (group8_dot8), so the scores are the host's bit for bit.
  const uint32_t base = h * head_dim;
  const uint32_t warp = threadIdx.x / kWarp;
  const uint32_t group = (threadIdx.x % kWarp) / 8;
  for (uint32_t t0 = warp * 4; t0 < count; t0 += kWarpsPerBlock * 4) {  // uniform per warp
    const uint32_t t = t0 + group;
    const bool active = t < count;
    const char* row = kv_row(k_cache, static_cast<int32_t>(active ? t : 0), row_bytes);
    const float dot = group8_dot8(active ? head_dim : 0, [&](uint32_t d) {
      return q_h[d] * kv_load(row, type, dim, base + d);
    });
    if (active && threadIdx.x % 8 == 0) s[t] = dot * inv_root;
  }
  __syncthreads();

  float local_max = -INFINITY;
  for (uint32_t t = threadIdx.x; t < count; t += kThreads) local_max = fmaxf(local_max, s[t]);
  const float max = block_max(local_max, shared);
  float local_sum = 0.0f;
  for (uint32_t t = threadIdx.x; t < count; t += kThreads) {
    const float e = expf(s[t] - max);
    s[t] = e;
    local_sum += e;
  }
  const float sum = block_sum(local_sum, shared);  // its barrier also publishes every s[t] = e
  for (uint32_t t = threadIdx.x; t < count; t += kThreads) s[t] = s[t] / sum;
  __syncthreads();

  // A thread per output value, summing over t in ascending order as the host does; the
  // unrolling lets 32 rows' loads be in flight at once (without it each iteration waits a
  // full memory latency), and does not change the order of the additions.
  for (uint32_t d = threadIdx.x; d < head_dim; d += kThreads) {
    float acc = 0.0f;
    const char* row = static_cast<const char*>(v_cache);
#pragma unroll 32
    for (uint32_t t = 0; t < count; ++t) {
      acc += s[t] * kv_load(row, type, dim, h * head_dim + d);
      row += row_bytes;
    }
    out[uint64_t{h} * head_dim + d] = acc;
  }
}

__global__ void recurrent_update_kernel(const float* input, const float* gate, uint32_t n,
                                        float* state) {
  for (uint64_t i = blockIdx.x * uint64_t{kThreads} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * kThreads) {
    const float g = 1.0f / (1.0f + expf(-gate[i]));
    state[i] = g * state[i] + (1.0f - g) * tanhf(input[i]);
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

cudaError_t attention(cudaStream_t stream, const float* q, const void* k_cache, const void* v_cache,
                      KvType type, uint32_t heads, uint32_t head_dim, uint32_t context,
                      const StepParams* params, float* scores, float* out) {
  switch (type) {
    case KvType::kF32:
      attention_kernel<KvType::kF32><<<heads, kThreads, 0, stream>>>(
          q, k_cache, v_cache, heads, head_dim, context, params, scores, out);
      break;
    case KvType::kF16:
      attention_kernel<KvType::kF16><<<heads, kThreads, 0, stream>>>(
          q, k_cache, v_cache, heads, head_dim, context, params, scores, out);
      break;
    case KvType::kInt8:
      attention_kernel<KvType::kInt8><<<heads, kThreads, 0, stream>>>(
          q, k_cache, v_cache, heads, head_dim, context, params, scores, out);
      break;
  }
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
