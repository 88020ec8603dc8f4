// Causal attention on CUDA, in the contract's tiles and chunks (compute/kernel_contract.h), so
// that every value has the host's bits: the scores are dot8 (group8 partial chains, the same
// tree), the softmax uses kernel_math::exp_f32 and max_f32, every sum runs in the contract's
// order, and nothing is fused (--fmad=false).
//
//   attention (one token, the decode graph): one block per head, as the kernel before it. For
//       each chunk, each tile of 64 rows: 32 groups of eight lanes compute the 64 scores,
//       warp 0 takes the tile's max, the exponentials and their sum8, then a thread per
//       output value adds its 64 rows in order; the chunk is folded into the running state.
//   attention_block (a prefill block): the chunks of a long history in parallel. A block per
//       (16 queries, head, chunk) decodes each tile's K and V rows into shared memory once for
//       its 16 queries, computes the 16 x 64 scores as register tiles (four queries by eight
//       rows a group, dot8's partial j on lane j), the softmax step with 16 threads a query,
//       and the weighted sums with a thread per (four queries, value); it writes each query's
//       chunk state (m, l, acc) to the scratch. A second kernel folds the chunks of each
//       query in ascending order and divides.
// Both run the same scalar steps per (query, head, value), so a token's output is the same
// whether it came in a block or alone.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda_vmm/cuda_kernel_device.h"
#include "backends/cuda_vmm/cuda_kernel_ops.h"

namespace siesta::cuda_ops {
namespace {

namespace km = kernel_math;
constexpr uint32_t kTile = km::kAttentionTile;
constexpr uint32_t kChunk = km::kAttentionChunk;
constexpr uint32_t kQueries = 16;  // per block of attention_partials_kernel
constexpr uint32_t kMaxPairs = 4;  // (kQueries / 4) * head_dim <= kMaxPairs * kThreads

__device__ inline float minus_infinity() { return km::bits_to_float(0xff800000u); }

template <KvType type>
__global__ void attention_token_kernel(const float* q, const void* k_cache, const void* v_cache,
                                       uint32_t heads, uint32_t head_dim, uint32_t context,
                                       const StepParams* params, float* out) {
  extern __shared__ float shared[];  // q_h [head_dim], then the tile's scores [kTile]
  __shared__ float tile_state[3];    // the chunk's m and l after this tile, and its alpha
  float* qs = shared;
  float* s = shared + head_dim;
  const uint32_t h = blockIdx.x;
  const uint32_t dim = heads * head_dim;
  const uint64_t row_bytes = kv_row_bytes_device(type, dim);
  // A position past the caches is clamped rather than read past them.
  const int32_t position = params->position;
  const uint32_t p =
      position < 0 ? 0u
                   : (static_cast<uint32_t>(position) >= context ? context - 1
                                                                 : static_cast<uint32_t>(position));
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  const uint32_t base = h * head_dim;
  for (uint32_t d = threadIdx.x; d < head_dim; d += kThreads) qs[d] = q[base + d];
  __syncthreads();

  const uint32_t warp = threadIdx.x / kWarp;
  const uint32_t lane = threadIdx.x % kWarp;
  const uint32_t group = threadIdx.x / 8;
  const uint32_t d = threadIdx.x;  // this thread's output value, when below head_dim
  km::SoftmaxState folded = km::softmax_start();
  float big = 0.0f;
  for (uint32_t c0 = 0; c0 <= p; c0 += kChunk) {
    const uint32_t c_end = min(p, c0 + kChunk - 1);
    float m = minus_infinity();  // warp 0's copy of the chunk state
    float l = 0.0f;
    float acc = 0.0f;
    for (uint32_t t0 = c0; t0 <= c_end; t0 += kTile) {
      const uint32_t rows = min(c_end, t0 + kTile - 1) - t0 + 1;
      // Every warp runs both rounds, so the shuffles inside are full-warp.
      for (uint32_t r = group; r < kTile; r += kThreads / 8) {
        const bool active = r < rows;
        const char* row = kv_row(k_cache, active ? t0 + r : 0, row_bytes);
        const float dot = group8_dot8(active ? head_dim : 0, [&](uint32_t k) {
          return qs[k] * kv_load(row, type, dim, base + k);
        });
        if (active && threadIdx.x % 8 == 0) s[r] = dot * scale;
      }
      __syncthreads();
      if (warp == 0) {
        const float s0 = lane < rows ? s[lane] : minus_infinity();
        const float s1 = lane + 32 < rows ? s[lane + 32] : minus_infinity();
        float mt = km::max_f32(s0, s1);
        for (int o = 16; o > 0; o /= 2) mt = km::max_f32(mt, __shfl_xor_sync(kFullMask, mt, o));
        const float m_new = km::max_f32(m, mt);
        const float alpha = km::exp_f32(m - m_new);
        s[lane] = lane < rows ? km::exp_f32(s0 - m_new) : 0.0f;
        s[lane + 32] = lane + 32 < rows ? km::exp_f32(s1 - m_new) : 0.0f;
        __syncwarp();
        // sum8 of the 64 exponentials (zeros past the rows add nothing): partial j on lane j.
        float part = 0.0f;
        for (uint32_t i = 0; i < kTile / 8; ++i) part = part + s[lane % 8 + 8 * i];
        l = l * alpha + tree8_of_group(part);
        m = m_new;
        if (lane == 0) {
          tile_state[0] = m;
          tile_state[1] = l;
          tile_state[2] = alpha;
        }
      }
      __syncthreads();
      if (d < head_dim) {
        acc = acc * tile_state[2];
        const char* row = kv_row(v_cache, t0, row_bytes);
#pragma unroll 16
        for (uint32_t t = 0; t < rows; ++t) {
          acc = acc + s[t] * kv_load(row, type, dim, base + d);
          row += row_bytes;
        }
      }
      __syncthreads();  // s and tile_state are written again by the next tile
    }
    // Every thread folds the same chunk state, so every thread's copy of `folded` agrees.
    const km::FoldFactors f = km::softmax_fold(folded, {tile_state[0], tile_state[1]});
    big = big * f.fa + acc * f.fb;
  }
  if (d < head_dim) out[base + d] = big / folded.l;
}

// One chunk's softmax state for up to kQueries queries of one head (see the file comment).
// partials: per (query, head, chunk) m, l, then head_dim acc values; chunks: its chunk count.
template <KvType type>
__global__ void attention_partials_kernel(const float* q, const void* k_cache, const void* v_cache,
                                          uint32_t heads, uint32_t head_dim, uint32_t chunks,
                                          uint32_t position, uint32_t count, float* partials) {
  extern __shared__ float shared[];
  const uint32_t hd = head_dim;
  float* qs = shared;                       // [kQueries][hd]
  float* ks = qs + kQueries * hd;           // [kTile][hd + 1] (padded: no conflicts)
  float* vs = ks + kTile * (hd + 1);        // [kTile][hd]
  float* es = vs + kTile * hd;              // [kQueries][kTile + 1]: scores, then e
  float* st = es + kQueries * (kTile + 1);  // [kQueries][3]: m, l, alpha
  const uint32_t q0 = blockIdx.x * kQueries;
  const uint32_t h = blockIdx.y;
  const uint32_t c = blockIdx.z;
  const uint32_t nq = min(kQueries, count - q0);
  const uint32_t c0 = c * kChunk;
  const uint32_t last = position + q0 + nq - 1;  // this block's last query position
  if (last < c0) return;                         // no query of it sees this chunk
  const uint32_t c_end = min(last, c0 + kChunk - 1);
  const uint32_t dim = heads * hd;
  const uint64_t row_bytes = kv_row_bytes_device(type, dim);
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const uint32_t base = h * hd;

  for (uint32_t e = threadIdx.x; e < kQueries * hd; e += kThreads) {
    const uint32_t qi = e / hd;
    qs[e] = qi < nq ? q[uint64_t{q0 + qi} * dim + base + e % hd] : 0.0f;
  }
  if (threadIdx.x < kQueries) {
    st[threadIdx.x * 3] = minus_infinity();
    st[threadIdx.x * 3 + 1] = 0.0f;
    st[threadIdx.x * 3 + 2] = 0.0f;
  }
  float acc[kMaxPairs][4];
#pragma unroll
  for (uint32_t u = 0; u < kMaxPairs; ++u) {
#pragma unroll
    for (uint32_t a = 0; a < 4; ++a) acc[u][a] = 0.0f;
  }
  const uint32_t pairs = (kQueries / 4) * hd;
  const uint32_t j = threadIdx.x % 8;
  const uint32_t qb = threadIdx.x / 64;     // scores: queries qb * 4 ..
  const uint32_t tb = threadIdx.x / 8 % 8;  // and rows tb * 8 .. of the tile
  const uint32_t sq = threadIdx.x / 16;     // softmax step: this thread's query
  const uint32_t sub = threadIdx.x % 16;    // and its place among the query's 16 threads
  __syncthreads();

  for (uint32_t t0 = c0; t0 <= c_end; t0 += kTile) {
    const uint32_t rows = min(c_end, t0 + kTile - 1) - t0 + 1;
    for (uint32_t e = threadIdx.x; e < kTile * hd; e += kThreads) {
      const uint32_t t = e / hd;
      const uint32_t d = e % hd;
      float kv = 0.0f;
      float vv = 0.0f;
      if (t < rows) {
        kv = kv_load(kv_row(k_cache, t0 + t, row_bytes), type, dim, base + d);
        vv = kv_load(kv_row(v_cache, t0 + t, row_bytes), type, dim, base + d);
      }
      ks[t * (hd + 1) + d] = kv;
      vs[t * hd + d] = vv;
    }
    __syncthreads();

    // Scores: lane j keeps partial j of 4 x 8 dot products (k = j, j + 8, ... ascending).
    float sc[4][8];
#pragma unroll
    for (uint32_t a = 0; a < 4; ++a) {
#pragma unroll
      for (uint32_t b = 0; b < 8; ++b) sc[a][b] = 0.0f;
    }
    for (uint32_t k = j; k < hd; k += 8) {
      float qv[4];
      float kv[8];
#pragma unroll
      for (uint32_t a = 0; a < 4; ++a) qv[a] = qs[(qb * 4 + a) * hd + k];
#pragma unroll
      for (uint32_t b = 0; b < 8; ++b) kv[b] = ks[(tb * 8 + b) * (hd + 1) + k];
#pragma unroll
      for (uint32_t a = 0; a < 4; ++a) {
#pragma unroll
        for (uint32_t b = 0; b < 8; ++b) sc[a][b] = sc[a][b] + qv[a] * kv[b];
      }
    }
#pragma unroll
    for (uint32_t a = 0; a < 4; ++a) {
#pragma unroll
      for (uint32_t b = 0; b < 8; ++b) {
        const float total = tree8_of_group(sc[a][b]);
        if (b == j) es[(qb * 4 + a) * (kTile + 1) + tb * 8 + b] = total * scale;
      }
    }
    __syncthreads();

    // The softmax step of query sq: 16 threads, four rows each.
    {
      const uint32_t p = position + q0 + sq;
      const bool active = sq < nq && p >= t0;
      const uint32_t n = active ? min(rows, p - t0 + 1) : 0;
      float* e_row = es + sq * (kTile + 1);
      float v[4];
      float mt = minus_infinity();
#pragma unroll
      for (uint32_t u = 0; u < 4; ++u) {
        const uint32_t t = sub + 16 * u;
        v[u] = t < n ? e_row[t] : minus_infinity();
        mt = km::max_f32(mt, v[u]);
      }
      for (int o = 8; o > 0; o /= 2) mt = km::max_f32(mt, __shfl_xor_sync(kFullMask, mt, o));
      const float m_old = st[sq * 3];
      const float l_old = st[sq * 3 + 1];
      const float m_new = km::max_f32(m_old, mt);
      const float alpha = km::exp_f32(m_old - m_new);
#pragma unroll
      for (uint32_t u = 0; u < 4; ++u) {
        const uint32_t t = sub + 16 * u;
        e_row[t] = t < n ? km::exp_f32(v[u] - m_new) : 0.0f;
      }
      __syncwarp();
      float part = 0.0f;
      for (uint32_t i = 0; i < kTile / 8; ++i) part = part + e_row[sub % 8 + 8 * i];
      const float tile_sum = tree8_of_group(part);
      __syncwarp();
      if (sub == 0 && active) {
        st[sq * 3] = m_new;
        st[sq * 3 + 1] = l_old * alpha + tile_sum;
        st[sq * 3 + 2] = alpha;
      }
    }
    __syncthreads();

    // Weighted sums: this thread's (four queries, value) pairs, rows in ascending order.
#pragma unroll
    for (uint32_t u = 0; u < kMaxPairs; ++u) {
      const uint32_t pair = threadIdx.x + kThreads * u;
      if (pair < pairs) {
        const uint32_t qg = pair / hd;
        const uint32_t d = pair % hd;
        uint32_t n[4];
        uint32_t n_max = 0;
#pragma unroll
        for (uint32_t a = 0; a < 4; ++a) {
          const uint32_t qi = qg * 4 + a;
          const uint32_t p = position + q0 + qi;
          const bool active = qi < nq && p >= t0;
          n[a] = active ? min(rows, p - t0 + 1) : 0;
          n_max = max(n_max, n[a]);
          if (active) acc[u][a] = acc[u][a] * st[qi * 3 + 2];
        }
        for (uint32_t t = 0; t < n_max; ++t) {
          const float vv = vs[t * hd + d];
#pragma unroll
          for (uint32_t a = 0; a < 4; ++a) {
            if (t < n[a]) acc[u][a] = acc[u][a] + es[(qg * 4 + a) * (kTile + 1) + t] * vv;
          }
        }
      }
    }
    __syncthreads();  // the next tile writes ks, vs, es and alpha again
  }

  const uint64_t stride = hd + 2;
  auto state_of = [&](uint32_t qi) {
    return partials + ((uint64_t{q0 + qi} * heads + h) * chunks + c) * stride;
  };
#pragma unroll
  for (uint32_t u = 0; u < kMaxPairs; ++u) {
    const uint32_t pair = threadIdx.x + kThreads * u;
    if (pair < pairs) {
#pragma unroll
      for (uint32_t a = 0; a < 4; ++a) {
        const uint32_t qi = pair / hd * 4 + a;
        if (qi < nq && position + q0 + qi >= c0) state_of(qi)[2 + pair % hd] = acc[u][a];
      }
    }
  }
  if (threadIdx.x < nq && position + q0 + threadIdx.x >= c0) {
    state_of(threadIdx.x)[0] = st[threadIdx.x * 3];
    state_of(threadIdx.x)[1] = st[threadIdx.x * 3 + 1];
  }
}

// Folds the chunk states of query blockIdx.x, head blockIdx.y in ascending order.
__global__ void attention_fold_kernel(const float* partials, uint32_t heads, uint32_t head_dim,
                                      uint32_t chunks, uint32_t position, float* out) {
  const uint32_t i = blockIdx.x;
  const uint32_t h = blockIdx.y;
  const uint32_t p = position + i;
  const uint64_t stride = head_dim + 2;
  const float* states = partials + (uint64_t{i} * heads + h) * chunks * stride;
  for (uint32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    km::SoftmaxState folded = km::softmax_start();
    float big = 0.0f;
    for (uint32_t c = 0; c <= p / kChunk; ++c) {
      const float* part = states + c * stride;
      const km::FoldFactors f = km::softmax_fold(folded, {part[0], part[1]});
      big = big * f.fa + part[2 + d] * f.fb;
    }
    out[uint64_t{i} * heads * head_dim + uint64_t{h} * head_dim + d] = big / folded.l;
  }
}

size_t partials_shared_bytes(uint32_t head_dim) {
  return (size_t{kQueries} * head_dim + size_t{kTile} * (head_dim + 1) + size_t{kTile} * head_dim +
          size_t{kQueries} * (kTile + 1) + size_t{kQueries} * 3) *
         sizeof(float);
}

template <KvType type>
cudaError_t launch_token(cudaStream_t stream, const float* q, const void* k_cache,
                         const void* v_cache, uint32_t heads, uint32_t head_dim, uint32_t context,
                         const StepParams* params, float* out) {
  const size_t shared = (size_t{head_dim} + kTile) * sizeof(float);
  attention_token_kernel<type><<<heads, kThreads, shared, stream>>>(q, k_cache, v_cache, heads,
                                                                    head_dim, context, params, out);
  return cudaGetLastError();
}

template <KvType type>
cudaError_t launch_block(cudaStream_t stream, const float* q, const void* k_cache,
                         const void* v_cache, uint32_t heads, uint32_t head_dim, uint32_t context,
                         uint32_t position, uint32_t count, float* scratch, float* out) {
  const size_t shared = partials_shared_bytes(head_dim);
  if (shared > 48u * 1024) {
    const cudaError_t set =
        cudaFuncSetAttribute(attention_partials_kernel<type>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    if (set != cudaSuccess) return set;
  }
  const uint32_t chunks = (context + kChunk - 1) / kChunk;
  const uint32_t used_chunks = (position + count - 1) / kChunk + 1;
  const dim3 grid((count + kQueries - 1) / kQueries, heads, used_chunks);
  attention_partials_kernel<type><<<grid, kThreads, shared, stream>>>(
      q, k_cache, v_cache, heads, head_dim, chunks, position, count, scratch);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  const unsigned fold_threads = head_dim >= 128 ? 128 : (head_dim + 31) / 32 * 32;
  attention_fold_kernel<<<dim3(count, heads), fold_threads, 0, stream>>>(scratch, heads, head_dim,
                                                                         chunks, position, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention(cudaStream_t stream, const float* q, const void* k_cache, const void* v_cache,
                      KvType type, uint32_t heads, uint32_t head_dim, uint32_t context,
                      const StepParams* params, float* out) {
  switch (type) {
    case KvType::kF32:
      return launch_token<KvType::kF32>(stream, q, k_cache, v_cache, heads, head_dim, context,
                                        params, out);
    case KvType::kF16:
      return launch_token<KvType::kF16>(stream, q, k_cache, v_cache, heads, head_dim, context,
                                        params, out);
    case KvType::kInt8:
      return launch_token<KvType::kInt8>(stream, q, k_cache, v_cache, heads, head_dim, context,
                                         params, out);
  }
  return cudaErrorInvalidValue;
}

cudaError_t attention_block(cudaStream_t stream, const float* q, const void* k_cache,
                            const void* v_cache, KvType type, uint32_t heads, uint32_t head_dim,
                            uint32_t context, uint32_t position, uint32_t count, float* scratch,
                            float* out) {
  switch (type) {
    case KvType::kF32:
      return launch_block<KvType::kF32>(stream, q, k_cache, v_cache, heads, head_dim, context,
                                        position, count, scratch, out);
    case KvType::kF16:
      return launch_block<KvType::kF16>(stream, q, k_cache, v_cache, heads, head_dim, context,
                                        position, count, scratch, out);
    case KvType::kInt8:
      return launch_block<KvType::kInt8>(stream, q, k_cache, v_cache, heads, head_dim, context,
                                         position, count, scratch, out);
  }
  return cudaErrorInvalidValue;
}

}  // namespace siesta::cuda_ops
