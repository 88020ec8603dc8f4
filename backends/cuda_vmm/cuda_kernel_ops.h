// The CUDA kernels behind CudaKernels, one launcher per operation of compute/kernels.h.
//
// Internal to backends/cuda_vmm (it includes the CUDA runtime headers). Each launcher
// enqueues one kernel on `stream` and returns cudaGetLastError() of the launch: a launch
// refused by the device is reported here, faults of the running kernel surface at the next
// synchronisation. Arguments are trusted: CudaKernels checks everything it can on the host
// (sizes, alignment, int8 block) before calling.
//
// Determinism: every reduction has a shape fixed by the sizes alone (a per-thread strided
// loop in index order, then a shared-memory or warp-shuffle tree of fixed width), so the same
// inputs give the same bits on every run. No atomics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "compute/kernels.h"

namespace siesta::cuda_ops {

cudaError_t embed(cudaStream_t stream, const float* table, uint32_t dim, const StepParams* params,
                  float* out);
cudaError_t rms_norm(cudaStream_t stream, const float* x, const float* weight, uint32_t dim,
                     float eps, float* out);
cudaError_t matmul(cudaStream_t stream, const float* w, const float* x, uint32_t rows,
                   uint32_t cols, float* out);
cudaError_t add(cudaStream_t stream, const float* x, uint32_t n, float* inout);
cudaError_t swiglu(cudaStream_t stream, const float* gate, const float* up, uint32_t n, float* out);
cudaError_t rope_table(cudaStream_t stream, float* table, uint32_t context, uint32_t head_dim,
                       float theta);
cudaError_t rope(cudaStream_t stream, float* vec, uint32_t heads, uint32_t head_dim,
                 const float* table, const StepParams* params);
cudaError_t kv_store(cudaStream_t stream, const float* k, const float* v, KvType type, uint32_t dim,
                     void* k_cache, void* v_cache, const StepParams* params);
// REQUIRES (both attentions): head_dim <= kMaxAttentionHeadDim.
inline constexpr uint32_t kMaxAttentionHeadDim = 256;
cudaError_t attention(cudaStream_t stream, const float* q, const void* k_cache, const void* v_cache,
                      KvType type, uint32_t heads, uint32_t head_dim, uint32_t context,
                      const StepParams* params, float* out);
cudaError_t recurrent_update(cudaStream_t stream, const float* input, const float* gate, uint32_t n,
                             float* state);
cudaError_t argmax(cudaStream_t stream, const float* logits, uint32_t first, uint32_t last,
                   int32_t* out);

// Block operations (cuda_kernel_block_ops.cu, cuda_kernel_attention.cu): rows [0, count) at
// positions [position, position + count).
cudaError_t embed_block(cudaStream_t stream, const float* table, uint32_t dim,
                        const int32_t* tokens, uint32_t count, float* out);
cudaError_t rms_norm_block(cudaStream_t stream, const float* x, const float* weight, uint32_t dim,
                           float eps, uint32_t count, float* out);
cudaError_t matmul_block(cudaStream_t stream, const float* w, const float* x, uint32_t rows,
                         uint32_t cols, uint32_t count, float* out);
cudaError_t rope_block(cudaStream_t stream, float* vec, uint32_t heads, uint32_t head_dim,
                       const float* table, uint32_t position, uint32_t count);
cudaError_t kv_store_block(cudaStream_t stream, const float* k, const float* v, KvType type,
                           uint32_t dim, void* k_cache, void* v_cache, uint32_t position,
                           uint32_t count);
// scratch: attention_scratch_bytes(count, heads, head_dim, context) bytes.
cudaError_t attention_block(cudaStream_t stream, const float* q, const void* k_cache,
                            const void* v_cache, KvType type, uint32_t heads, uint32_t head_dim,
                            uint32_t context, uint32_t position, uint32_t count, float* scratch,
                            float* out);
cudaError_t recurrent_scan(cudaStream_t stream, const float* input, const float* gate, uint32_t n,
                           uint32_t count, float* state, float* states);

}  // namespace siesta::cuda_ops
