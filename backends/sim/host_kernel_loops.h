// The inner loops of the host kernels that carry nearly all of their arithmetic: many dot8
// products at once (matmul, attention scores) and one head of causal attention over a block
// of queries. Each computes exactly the contract's formulas and orders
// (compute/kernel_contract.h); they differ from a plain loop only in how many independent
// chains they keep in vector registers, so every result has the bits of
// kernel_math::dot8 / the contract's attention, whatever the vector width.
//
// host_loops() picks the widest implementation this processor runs, once: eight lanes (AVX2)
// where the build and the processor have it, else four (the x86-64 baseline's SSE2; also
// when the environment sets SIESTA_HOST_LOOPS=sse, for measuring one against the other).
// Every implementation gives the same bits (the tests compare them).
//
// Thread rule: pure functions over the caller's memory; calls on disjoint outputs may run on
// any threads at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/kernels.h"

namespace siesta {

// One head's view of a block of attention queries: query row i (at position + i) at
// q + i * dim + head * head_dim, its output at out + the same offset; the caches as
// compute/kernels.h stores them (rows of kv_row_bytes(type, dim) bytes).
struct AttentionRows {
  const float* q = nullptr;
  const std::byte* k_cache = nullptr;
  const std::byte* v_cache = nullptr;
  KvType type = KvType::kF32;
  uint32_t heads = 0;
  uint32_t head_dim = 0;
  uint32_t position = 0;  // of query row 0
  float* out = nullptr;
};

struct HostLoops {
  // out[j * out_stride + i] = dot8(a + i * a_stride, b + j * b_stride, n), i < na, j < nb.
  // Strides in floats.
  void (*dot8_tile)(const float* a, size_t a_stride, uint32_t na, const float* b, size_t b_stride,
                    uint32_t nb, uint32_t n, float* out, size_t out_stride);
  // Attention of query rows [q_begin, q_end) for `head`: writes their out values of that head.
  void (*attend)(const AttentionRows& rows, uint32_t head, uint32_t q_begin, uint32_t q_end);
  const char* name;  // "sse" (4 lanes), "avx2" (8 lanes)
};

const HostLoops& host_loops();
const HostLoops& host_loops_baseline();
// Null when this build or processor has no AVX2.
const HostLoops* host_loops_avx2();

}  // namespace siesta
