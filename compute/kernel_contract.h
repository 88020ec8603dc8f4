// The arithmetic contract of the Kernels seam (compute/kernels.h): the formula and the
// summation order of every operation, written once. HostKernels (backends/sim) computes exactly
// this, so the same inputs give the same bits on every run; CudaKernels (backends/cuda_vmm)
// follows the same formulas and orders (no fused multiply-add, no atomics) and agrees with the
// host within the tolerances its tests state. A kernel that changes an order changes the bits
// of every generation: change this page with it.
//
// Floats are f32 with IEEE semantics (no fast-math). "dot8" is the fixed-order dot product:
//   dot8(a, b, n): eight partial sums s[j] = sum over k = j, j+8, j+16... (ascending) of
//     a[k]*b[k], for k < n - n%8; the tail k >= n - n%8 is then added to s[k%8] in ascending
//     order; result ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7)).
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
//   attention  per head h: s_t = dot8(q_h, K_t,h, head_dim) * (1.0f / std::sqrt((float)
//              head_dim)); m = max_t s_t; e_t = std::exp(s_t - m) (f32, stored in scores);
//              sum = e_0 + e_1 + ... in ascending t (f32); p_t = e_t / sum;
//              out_h[d] = sum over ascending t of p_t * V_t,h[d] (f32, starting from 0).
//   recurrent  g = 1.0f / (1.0f + std::exp(-gate[i]));
//              state[i] = g * state[i] + (1.0f - g) * std::tanh(input[i]).
//   argmax     ascending scan, strictly greater replaces: ties keep the lowest index; a NaN
//              never wins (unless at `first` and nothing compares greater).
#pragma once
