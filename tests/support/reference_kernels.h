// Reference kernels: the Kernels operations (compute/kernels.h) written the obvious way on
// std::vector<float>, one loop per formula, accumulating in double, so the host and CUDA
// kernel tests have one thing to compare against. Speed is no concern here.
//
// Exact parts (a backend must match them bit for bit): embed, add, kv_encode / kv_decode
// (the storage formats, f16 via compute/half_float.h and int8 per compute/kernels.h),
// argmax, and rope_table (it is the formula documented in compute/kernel_contract.h, in
// double; a GPU's double cos/sin may differ by an ulp before rounding to float).
// Everything else is computed in double and rounded to float once at the end; the tests
// state how far a backend may be from it. contract_attention is the exception: the contract's
// own attention (compute/kernel_contract.h) one scalar step at a time, which HostKernels and
// CudaKernels must equal bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "compute/half_float.h"
#include "compute/kernel_math.h"
#include "compute/kernels.h"

namespace siesta::ref {

// table: [vocab][dim]; the row of `token`.
inline std::vector<float> embed(const std::vector<float>& table, uint32_t dim, int32_t token) {
  const auto begin = table.begin() + static_cast<ptrdiff_t>(token) * dim;
  return std::vector<float>(begin, begin + dim);
}

inline std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& weight,
                                   float eps) {
  double ss = 0;
  for (float v : x) ss += double{v} * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i] * inv * weight[i]);
  return out;
}

// w: [rows][cols].
inline std::vector<float> matmul(const std::vector<float>& w, const std::vector<float>& x,
                                 uint32_t rows, uint32_t cols) {
  std::vector<float> out(rows);
  for (uint32_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (uint32_t c = 0; c < cols; ++c) sum += double{w[size_t{r} * cols + c]} * x[c];
    out[r] = static_cast<float>(sum);
  }
  return out;
}

// Sum over c of |w[r][c] * x[c]|: the scale a float matmul's rounding error is relative to.
inline std::vector<double> matmul_magnitude(const std::vector<float>& w,
                                            const std::vector<float>& x, uint32_t rows,
                                            uint32_t cols) {
  std::vector<double> out(rows);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t c = 0; c < cols; ++c) out[r] += std::fabs(double{w[size_t{r} * cols + c]} * x[c]);
  }
  return out;
}

// inout + x.
inline std::vector<float> add(const std::vector<float>& x, const std::vector<float>& inout) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(double{inout[i]} + x[i]);
  return out;
}

inline std::vector<float> swiglu(const std::vector<float>& gate, const std::vector<float>& up) {
  std::vector<float> out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
  return out;
}

// [context][head_dim/2] pairs {cos a, sin a}, exactly the documented formula.
inline std::vector<float> rope_table(uint32_t context, uint32_t head_dim, float theta) {
  const uint32_t half = head_dim / 2;
  std::vector<float> table(size_t{context} * half * 2);
  for (uint32_t p = 0; p < context; ++p) {
    for (uint32_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(double{theta}, -2.0 * i / head_dim);
      const float a = static_cast<float>(p * inv_freq);
      table[(size_t{p} * half + i) * 2] = static_cast<float>(std::cos(double{a}));
      table[(size_t{p} * half + i) * 2 + 1] = static_cast<float>(std::sin(double{a}));
    }
  }
  return table;
}

inline std::vector<float> rope(const std::vector<float>& vec, uint32_t heads, uint32_t head_dim,
                               const std::vector<float>& table, int32_t position) {
  const uint32_t half = head_dim / 2;
  std::vector<float> out = vec;
  for (uint32_t h = 0; h < heads; ++h) {
    for (uint32_t i = 0; i < half; ++i) {
      const size_t at = size_t{h} * head_dim + 2 * i;
      const double c = table[(size_t(position) * half + i) * 2];
      const double s = table[(size_t(position) * half + i) * 2 + 1];
      out[at] = static_cast<float>(vec[at] * c - vec[at + 1] * s);
      out[at + 1] = static_cast<float>(vec[at] * s + vec[at + 1] * c);
    }
  }
  return out;
}

// One KV row in the storage format of `type` (kv_row_bytes(type, row.size()) bytes).
inline std::vector<std::byte> kv_encode(KvType type, const std::vector<float>& row) {
  const size_t dim = row.size();
  std::vector<std::byte> out(kv_row_bytes(type, static_cast<uint32_t>(dim)));
  if (type == KvType::kF32) {
    std::memcpy(out.data(), row.data(), dim * 4);
  } else if (type == KvType::kF16) {
    for (size_t i = 0; i < dim; ++i) {
      const uint16_t h = half_float::half_from_float(row[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else {
    for (size_t b = 0; b < dim / kKvInt8Block; ++b) {
      float max_abs = 0;
      for (size_t i = 0; i < kKvInt8Block; ++i) {
        max_abs = std::max(max_abs, std::fabs(row[b * kKvInt8Block + i]));
      }
      const float scale = max_abs / 127.0f;
      for (size_t i = 0; i < kKvInt8Block; ++i) {
        long q = 0;
        if (scale != 0) q = std::lround(row[b * kKvInt8Block + i] / scale);  // half away from 0
        q = std::min(127L, std::max(-127L, q));
        out[b * kKvInt8Block + i] = static_cast<std::byte>(static_cast<int8_t>(q));
      }
      std::memcpy(out.data() + dim + b * 4, &scale, 4);
    }
  }
  return out;
}

// The `dim` values a row of `type` holds.
inline std::vector<float> kv_decode(KvType type, std::span<const std::byte> row, uint32_t dim) {
  std::vector<float> out(dim);
  for (uint32_t i = 0; i < dim; ++i) {
    if (type == KvType::kF32) {
      std::memcpy(&out[i], row.data() + size_t{i} * 4, 4);
    } else if (type == KvType::kF16) {
      uint16_t h;
      std::memcpy(&h, row.data() + size_t{i} * 2, 2);
      out[i] = half_float::float_from_half(h);
    } else {
      float scale;
      std::memcpy(&scale, row.data() + dim + size_t{i / kKvInt8Block} * 4, 4);
      out[i] = static_cast<float>(static_cast<int8_t>(row[i])) * scale;
    }
  }
  return out;
}

// Attention of q over rows [0, position] of caches in the format of `type` (each cache is
// rows of kv_row_bytes(type, heads * head_dim) bytes).
inline std::vector<float> attention(const std::vector<float>& q,
                                    const std::vector<std::byte>& k_cache,
                                    const std::vector<std::byte>& v_cache, KvType type,
                                    uint32_t heads, uint32_t head_dim, int32_t position) {
  const uint32_t dim = heads * head_dim;
  const size_t row_bytes = kv_row_bytes(type, dim);
  const size_t rows = static_cast<size_t>(position) + 1;
  std::vector<std::vector<float>> k(rows), v(rows);
  for (size_t t = 0; t < rows; ++t) {
    k[t] = kv_decode(type, std::span(k_cache).subspan(t * row_bytes, row_bytes), dim);
    v[t] = kv_decode(type, std::span(v_cache).subspan(t * row_bytes, row_bytes), dim);
  }
  std::vector<float> out(dim);
  for (uint32_t h = 0; h < heads; ++h) {
    const size_t o = size_t{h} * head_dim;
    std::vector<double> s(rows);
    for (size_t t = 0; t < rows; ++t) {
      for (uint32_t d = 0; d < head_dim; ++d) s[t] += double{q[o + d]} * k[t][o + d];
      s[t] /= std::sqrt(static_cast<double>(head_dim));
    }
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& e : s) sum += (e = std::exp(e - m));
    for (uint32_t d = 0; d < head_dim; ++d) {
      double acc = 0;
      for (size_t t = 0; t < rows; ++t) acc += s[t] / sum * v[t][o + d];
      out[o + d] = static_cast<float>(acc);
    }
  }
  return out;
}

// The contract's attention of q at `position`, written as the contract reads: chunks, tiles,
// dot8, exp_f32, sum8 and the folds, in f32, one value at a time.
inline std::vector<float> contract_attention(const std::vector<float>& q,
                                             const std::vector<std::byte>& k_cache,
                                             const std::vector<std::byte>& v_cache, KvType type,
                                             uint32_t heads, uint32_t head_dim, uint32_t position) {
  namespace km = kernel_math;
  const uint32_t dim = heads * head_dim;
  const size_t row_bytes = kv_row_bytes(type, dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<std::vector<float>> k_rows, v_rows;
  for (uint32_t t = 0; t <= position; ++t) {
    k_rows.push_back(kv_decode(type, std::span(k_cache).subspan(t * row_bytes, row_bytes), dim));
    v_rows.push_back(kv_decode(type, std::span(v_cache).subspan(t * row_bytes, row_bytes), dim));
  }
  std::vector<float> out(dim);
  for (uint32_t h = 0; h < heads; ++h) {
    const float* qh = q.data() + size_t{h} * head_dim;
    km::SoftmaxState folded = km::softmax_start();
    std::vector<float> big(head_dim, 0.0f);
    for (uint32_t c0 = 0; c0 <= position; c0 += km::kAttentionChunk) {
      const uint32_t c_end = std::min(position, c0 + km::kAttentionChunk - 1);
      km::SoftmaxState chunk = km::softmax_start();
      std::vector<float> acc(head_dim, 0.0f);
      for (uint32_t t0 = c0; t0 <= c_end; t0 += km::kAttentionTile) {
        const uint32_t t1 = std::min(c_end, t0 + km::kAttentionTile - 1);
        std::vector<float> s, e;
        for (uint32_t t = t0; t <= t1; ++t) {
          s.push_back(km::dot8(qh, k_rows[t].data() + size_t{h} * head_dim, head_dim) * scale);
        }
        float mt = s[0];
        for (float x : s) mt = km::max_f32(mt, x);
        const float m = km::max_f32(chunk.m, mt);
        const float a = km::exp_f32(chunk.m - m);
        for (float x : s) e.push_back(km::exp_f32(x - m));
        chunk.l = chunk.l * a + km::sum8(e.data(), static_cast<uint32_t>(e.size()));
        chunk.m = m;
        for (uint32_t d = 0; d < head_dim; ++d) {
          acc[d] = acc[d] * a;
          for (size_t t = 0; t < e.size(); ++t) {
            acc[d] = acc[d] + e[t] * v_rows[t0 + t][size_t{h} * head_dim + d];
          }
        }
      }
      const km::FoldFactors f = km::softmax_fold(folded, chunk);
      for (uint32_t d = 0; d < head_dim; ++d) big[d] = big[d] * f.fa + acc[d] * f.fb;
    }
    for (uint32_t d = 0; d < head_dim; ++d) out[size_t{h} * head_dim + d] = big[d] / folded.l;
  }
  return out;
}

// The new state.
inline std::vector<float> recurrent_update(const std::vector<float>& input,
                                           const std::vector<float>& gate,
                                           const std::vector<float>& state) {
  std::vector<float> out(state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    const double g = 1.0 / (1.0 + std::exp(-double{gate[i]}));
    out[i] = static_cast<float>(g * state[i] + (1.0 - g) * std::tanh(double{input[i]}));
  }
  return out;
}

// Index of the largest of logits[first..last], the lowest on ties.
inline int32_t argmax(const std::vector<float>& logits, uint32_t first, uint32_t last) {
  uint32_t best = first;
  for (uint32_t i = first; i <= last; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace siesta::ref
