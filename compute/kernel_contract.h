// The arithmetic contract of the Kernels seam (compute/kernels.h): the formula and the
// summation order of every operation, written once. HostKernels (backends/sim) computes exactly
// this, so the same inputs give the same bits on every run, at every vector width and thread
// count; CudaKernels (backends/cuda_vmm) follows the same formulas and orders (no fused
// multiply-add, no atomics) and agrees with the host within the tolerances its tests state
// (bit for bit where they say so). A kernel that changes an order changes the bits of every
// generation: change this page with it.
//
// Floats are f32 with IEEE semantics (no fast-math). "dot8" is the fixed-order dot product:
//   dot8(a, b, n): eight partial sums s[j] = sum over k = j, j+8, j+16... (ascending) of
//     a[k]*b[k], each starting from +0; result ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7)).
//     (For k >= n - n%8 this is the "tail added to s[k%8] in ascending order" of the vector
//     loops: the same partial sums.) kernel_math::dot8 is the reference.
//   sum8(a, n): dot8 with a[k] in place of a[k]*b[k].
//   exp_f32: the contract's own e^x (compute/kernel_math.h, shared by every backend): the
//     Cephes reduction and polynomial in plain f32 steps; 0 below -87, +inf above 88.
//   max_f32(a, b): a < b ? b : a.
//   matmul     out[r] = dot8(w[r], x, cols).
//   rms_norm   ss = dot8(x, x, dim); inv = 1.0f / std::sqrt(ss / (float)dim + eps);
//              out[i] = (x[i] * inv) * weight[i].
//   add        inout[i] = inout[i] + x[i].
//   swiglu     out[i] = (g / (1.0f + std::exp(-g))) * up[i], g = gate[i].
//   rope_table for p < context, i < head_dim/2, in double then rounded to float:
//                inv_freq = std::pow((double)theta, -2.0 * (double)i / (double)head_dim)
//                a        = (float)((double)p * inv_freq)
//                table[(p * head_dim/2 + i) * 2 + 0] = (float)std::cos((double)a)
//                table[(p * head_dim/2 + i) * 2 + 1] = (float)std::sin((double)a)
//   rope       x0' = x0*c - x1*s, x1' = x0*s + x1*c (f32, each product rounded).
//   kv_store   f32: the floats. f16: half_float::half_from_float (round to nearest even,
//              compute/half_float.h). int8, per block of kKvInt8Block values:
//              m = max |x| (f32); scale = m / 127.0f; if scale == 0 every q = 0, else
//              q = clamp(std::lround(x / scale), -127, 127) (x / scale an f32 division;
//              lround rounds half away from zero). Decoding: x = (float)q * scale;
//              f16: half_float::float_from_half.
//   attention  one query at position p, per head h, over the rows t <= p, K and V decoded
//              from the cache type. The rows are read in chunks of kAttentionChunk (1024)
//              positions, each in tiles of kAttentionTile (64), both aligned at multiples of
//              their size, so the grouping depends on p alone, never on how the prompt was
//              cut into blocks. Within chunk c, starting from m = -inf, l = 0, acc[d] = 0, for
//              each tile in ascending order (its rows t0..t1, t1 <= p):
//                s_t = dot8(q_h, K_t,h, head_dim) * (1.0f / std::sqrt((float)head_dim))
//                mt  = the largest s_t of the tile;  m' = max_f32(m, mt)
//                a   = exp_f32(m - m');  e_t = exp_f32(s_t - m')
//                l   = l * a + sum8(e_t0..e_t1)
//                acc[d] = acc[d] * a, then acc[d] = acc[d] + e_t * V_t,h[d] for t ascending
//                m = m'
//              Then the chunks are folded in ascending order into (M, L, A), which starts at
//              (-inf, 0, 0) (kernel_math::softmax_fold):
//                M' = max_f32(M, m); fa = exp_f32(M - M'); fb = exp_f32(m - M')
//                L = L * fa + l * fb;  A[d] = A[d] * fa + acc[d] * fb;  M = M'
//              out_h[d] = A[d] / L. (NaN scores are outside the contract.)
//   recurrent  g = 1.0f / (1.0f + std::exp(-gate[i]));
//              state[i] = g * state[i] + (1.0f - g) * std::tanh(input[i]).
//   argmax     ascending scan, strictly greater replaces: ties keep the lowest index; a NaN
//              never wins (unless at `first` and nothing compares greater).
//
// Block operations (the prefill: a block of tokens at positions position .. position+count-1)
// compute row i exactly as the single-token operation computes the token at position + i:
// embed_block, rms_norm_block, matmul_block (out[i][r] = dot8(w[r], x[i], cols)), rope_block,
// kv_store_block and attention_block are the formulas above row by row; recurrent_scan applies
// the recurrent update for row 0, then row 1, ... and keeps every intermediate state. So a
// prompt gives the same bits however it is cut into blocks, one token at a time included.
#pragma once

#include <cstdint>

namespace siesta {

// This page's version. A snapshot's fingerprint binds it with the kernels' name (a state that
// CudaKernels computed is restored only under CudaKernels: they agree with the host within
// tolerances, not bit for bit), so a snapshot kept across a restart is never continued by
// arithmetic other than the one that made it. Raise it with any change of a formula or order.
inline constexpr uint32_t kKernelContractVersion = 1;

}  // namespace siesta
