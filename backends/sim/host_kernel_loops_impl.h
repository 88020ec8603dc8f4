// The templates behind host_kernel_loops.h, for W float lanes. Included by the translation
// units that instantiate them, each for its own instruction set (host_kernel_loops.cc: W = 4,
// the baseline; host_kernel_loops_avx2.cc: W = 8, SIESTA_SIMD_TARGET set first, see
// host_simd.h); nothing else should include it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "backends/sim/host_kernel_loops.h"
#include "backends/sim/host_simd.h"
#include "compute/half_float.h"
#include "compute/kernel_math.h"

namespace siesta::host_loops_impl {

using host_simd::F;
using host_simd::load;
using host_simd::splat;
using host_simd::store;

// RA x RB dot8 products at once (RA * RB == W): every pair (x, y) keeps its eight partial
// sums in 8 / W vectors, fed in the contract's order, and the tree runs for all W outputs at
// once (host_simd::tree8_of), output (x, y) in lane y * RA + x, so each y's RA results are
// stored together. out[y * os + x] = dot8(a + x * as, b + y * bs, n).
template <int W, int RA, int RB>
SIESTA_SIMD void dot8_micro(const float* a, size_t as, const float* b, size_t bs, uint32_t n,
                            float* out, size_t os) {
  static_assert(RA * RB == W);
  constexpr int kNv = 8 / W;
  F<W> acc[RA * RB * kNv] = {};
  const uint32_t whole = n - n % 8;
  for (uint32_t k = 0; k < whole; k += 8) {
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) {
      F<W> av[RA], bv[RB];
#pragma GCC unroll 8
      for (int x = 0; x < RA; ++x) av[x] = load<W>(a + x * as + k + v * W);
#pragma GCC unroll 8
      for (int y = 0; y < RB; ++y) bv[y] = load<W>(b + y * bs + k + v * W);
#pragma GCC unroll 8
      for (int y = 0; y < RB; ++y) {
#pragma GCC unroll 8
        for (int x = 0; x < RA; ++x) acc[(y * RA + x) * kNv + v] += av[x] * bv[y];
      }
    }
  }
  for (uint32_t k = whole; k < n; ++k) {
    const uint32_t j = k % 8;
#pragma GCC unroll 8
    for (int y = 0; y < RB; ++y) {
#pragma GCC unroll 8
      for (int x = 0; x < RA; ++x) {
        acc[(y * RA + x) * kNv + j / W][j % W] += a[x * as + k] * b[y * bs + k];
      }
    }
  }
  const F<W> total = host_simd::tree8_of<W>(acc);
  float lanes[W];
  std::memcpy(lanes, &total, sizeof lanes);
#pragma GCC unroll 8
  for (int y = 0; y < RB; ++y) std::memcpy(out + y * os, lanes + y * RA, RA * sizeof(float));
}

template <int W>
SIESTA_SIMD_TARGET void dot8_tile(const float* a, size_t as, uint32_t na, const float* b, size_t bs,
                                  uint32_t nb, uint32_t n, float* out, size_t os) {
  constexpr int kRa = W / 2, kRb = 2;
  const uint32_t na_main = na - na % kRa;
  const uint32_t nb_main = nb - nb % kRb;
  for (uint32_t i = 0; i < na_main; i += kRa) {
    for (uint32_t j = 0; j < nb_main; j += kRb) {
      dot8_micro<W, kRa, kRb>(a + i * as, as, b + j * bs, bs, n, out + j * os + i, os);
    }
  }
  // The last columns (fewer than kRb): W rows of `a` at a time against one `b`.
  for (uint32_t j = nb_main; j < nb; ++j) {
    uint32_t i = 0;
    for (; i + W <= na; i += W) {
      dot8_micro<W, W, 1>(a + i * as, as, b + j * bs, bs, n, out + j * os + i, os);
    }
    for (; i < na; ++i) out[j * os + i] = kernel_math::dot8(a + i * as, b + j * bs, n);
  }
  // The last row of `a` (na odd) against the main columns: W columns at a time.
  for (uint32_t i = na_main; i < na; ++i) {
    uint32_t j = 0;
    for (; j + W <= nb_main; j += W) {
      dot8_micro<W, 1, W>(a + i * as, as, b + j * bs, bs, n, out + j * os + i, os);
    }
    for (; j < nb_main; ++j) out[j * os + i] = kernel_math::dot8(a + i * as, b + j * bs, n);
  }
}

// The `count` values [first, first + count) of cache rows t0 .. t0 + rows - 1, decoded to f32,
// into dst[t][0..count).
template <int W>
SIESTA_SIMD void decode_rows(KvType type, const std::byte* cache, size_t row_bytes, uint32_t dim,
                             uint32_t t0, uint32_t rows, uint32_t first, uint32_t count,
                             float* dst) {
  for (uint32_t t = 0; t < rows; ++t) {
    const std::byte* row = cache + size_t{t0 + t} * row_bytes;
    float* out = dst + size_t{t} * count;
    if (type == KvType::kF16) {
      uint32_t i = 0;
      for (; i + W <= count; i += W)
        host_simd::halves_to_floats<W>(row + size_t{first + i} * 2, out + i);
      for (; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, row + size_t{first + i} * 2, 2);
        out[i] = half_float::float_from_half(h);
      }
    } else if (type == KvType::kInt8) {
      for (uint32_t i = 0; i < count; ++i) {
        const uint32_t j = first + i;
        float scale;
        std::memcpy(&scale, row + dim + size_t{j / kKvInt8Block} * 4, 4);
        out[i] = static_cast<float>(static_cast<int8_t>(row[j])) * scale;
      }
    } else {
      std::memcpy(out, row + size_t{first} * 4, size_t{count} * 4);
    }
  }
}

// s[t] = s[t] * scale for t < n; returns the largest (max_f32 over lanes, then across them:
// without NaNs every order gives the same maximum).
template <int W>
SIESTA_SIMD float scale_and_max(float* s, float scale, uint32_t n) {
  const F<W> sv = splat<W>(scale);
  uint32_t t = 0;
  F<W> mv = splat<W>(kernel_math::bits_to_float(0xff800000u));
  for (; t + W <= n; t += W) {
    const F<W> v = load<W>(s + t) * sv;
    store<W>(s + t, v);
    mv = host_simd::select<W>(mv < v, v, mv);
  }
  float m = mv[0];
  for (int i = 1; i < W; ++i) m = kernel_math::max_f32(m, mv[i]);
  for (; t < n; ++t) {
    s[t] = s[t] * scale;
    m = kernel_math::max_f32(m, s[t]);
  }
  return m;
}

// acc[d] = acc[d] * alpha, then acc[d] = acc[d] + e[t] * v[t][d] for t = 0 .. n-1 in order
// (v rows `vs` floats apart): four vectors of acc stay in registers over all n rows.
template <int W>
SIESTA_SIMD void weighted_rows(float* acc, float alpha, const float* e, uint32_t n, const float* v,
                               size_t vs, uint32_t hd) {
  const F<W> a = splat<W>(alpha);
  uint32_t d = 0;
  for (; d + 4 * W <= hd; d += 4 * W) {
    F<W> r0 = load<W>(acc + d) * a, r1 = load<W>(acc + d + W) * a;
    F<W> r2 = load<W>(acc + d + 2 * W) * a, r3 = load<W>(acc + d + 3 * W) * a;
    for (uint32_t t = 0; t < n; ++t) {
      const F<W> ev = splat<W>(e[t]);
      const float* row = v + t * vs + d;
      r0 = r0 + ev * load<W>(row);
      r1 = r1 + ev * load<W>(row + W);
      r2 = r2 + ev * load<W>(row + 2 * W);
      r3 = r3 + ev * load<W>(row + 3 * W);
    }
    store<W>(acc + d, r0);
    store<W>(acc + d + W, r1);
    store<W>(acc + d + 2 * W, r2);
    store<W>(acc + d + 3 * W, r3);
  }
  for (; d + W <= hd; d += W) {
    F<W> r = load<W>(acc + d) * a;
    for (uint32_t t = 0; t < n; ++t) r = r + splat<W>(e[t]) * load<W>(v + t * vs + d);
    store<W>(acc + d, r);
  }
  for (; d < hd; ++d) {
    float r = acc[d] * alpha;
    for (uint32_t t = 0; t < n; ++t) r = r + e[t] * v[t * vs + d];
    acc[d] = r;
  }
}

// weighted_rows for two queries over the same rows, sharing each load of v: for each query,
// exactly weighted_rows' steps (rows past a query's own n are not added to it).
template <int W>
SIESTA_SIMD void weighted_rows2(float* acc0, float alpha0, const float* e0, uint32_t n0,
                                float* acc1, float alpha1, const float* e1, uint32_t n1,
                                const float* v, size_t vs, uint32_t hd) {
  const uint32_t both = std::min(n0, n1);
  const F<W> a0 = splat<W>(alpha0), a1 = splat<W>(alpha1);
  uint32_t d = 0;
  for (; d + 2 * W <= hd; d += 2 * W) {
    F<W> r0 = load<W>(acc0 + d) * a0, r1 = load<W>(acc0 + d + W) * a0;
    F<W> s0 = load<W>(acc1 + d) * a1, s1 = load<W>(acc1 + d + W) * a1;
    uint32_t t = 0;
    for (; t < both; ++t) {
      const float* row = v + t * vs + d;
      const F<W> x0 = load<W>(row), x1 = load<W>(row + W);
      const F<W> e0v = splat<W>(e0[t]), e1v = splat<W>(e1[t]);
      r0 = r0 + e0v * x0;
      r1 = r1 + e0v * x1;
      s0 = s0 + e1v * x0;
      s1 = s1 + e1v * x1;
    }
    for (uint32_t u = t; u < n0; ++u) {
      const F<W> ev = splat<W>(e0[u]);
      r0 = r0 + ev * load<W>(v + u * vs + d);
      r1 = r1 + ev * load<W>(v + u * vs + d + W);
    }
    for (uint32_t u = t; u < n1; ++u) {
      const F<W> ev = splat<W>(e1[u]);
      s0 = s0 + ev * load<W>(v + u * vs + d);
      s1 = s1 + ev * load<W>(v + u * vs + d + W);
    }
    store<W>(acc0 + d, r0);
    store<W>(acc0 + d + W, r1);
    store<W>(acc1 + d, s0);
    store<W>(acc1 + d + W, s1);
  }
  if (d < hd) {  // the last values, one query at a time
    weighted_rows<W>(acc0 + d, alpha0, e0, n0, v + d, vs, hd - d);
    weighted_rows<W>(acc1 + d, alpha1, e1, n1, v + d, vs, hd - d);
  }
}

// sum8 (compute/kernel_contract.h) of e[0 .. n): partial j in lane j of 8 / W vectors.
template <int W>
SIESTA_SIMD float sum8(const float* e, uint32_t n) {
  constexpr int kNv = 8 / W;
  F<W> p[kNv] = {};
  const uint32_t whole = n - n % 8;
  for (uint32_t k = 0; k < whole; k += 8) {
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) p[v] = p[v] + load<W>(e + k + v * W);
  }
  for (uint32_t k = whole; k < n; ++k) p[(k % 8) / W][(k % 8) % W] += e[k];
  float lanes[8];
  std::memcpy(lanes, p, sizeof lanes);
  return kernel_math::tree8(lanes);
}

// e[t] = exp_f32(s[t] - m) for t < n (lanes past n, up to a multiple of W, are scratch).
template <int W>
SIESTA_SIMD void exp_rows(const float* s, float m, uint32_t n, float* e) {
  const F<W> mv = splat<W>(m);
  for (uint32_t t = 0; t < n; t += W) store<W>(e + t, host_simd::exp_f32<W>(load<W>(s + t) - mv));
}

template <int W>
SIESTA_SIMD_TARGET void attend(const AttentionRows& r, uint32_t h, uint32_t q_begin,
                               uint32_t q_end) {
  namespace km = kernel_math;
  constexpr uint32_t kTile = km::kAttentionTile;
  const uint32_t hd = r.head_dim;
  const uint32_t dim = r.heads * hd;
  const size_t row_bytes = kv_row_bytes(r.type, dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const uint32_t nq = q_end - q_begin;
  const uint32_t last = r.position + q_end - 1;  // the last query's position
  const bool direct = r.type == KvType::kF32;    // f32 rows are read in place

  // Per query: the folded state (M, L) and A[hd], the chunk's (m, l) and acc[hd]; the tile's
  // scores (then exponentials), alpha and row count; the decoded K and V rows of the tile.
  // Kept per thread and only grown: a decode step calls this for every head of every layer,
  // and fresh buffers there cost more than a short history's arithmetic.
  thread_local std::vector<km::SoftmaxState> states;
  thread_local std::vector<float> floats;
  thread_local std::vector<uint32_t> counts;
  states.resize(std::max<size_t>(states.size(), 2 * size_t{nq}));
  counts.resize(std::max<size_t>(counts.size(), nq));
  const size_t sums_size = size_t{nq} * hd * 2, scores_size = size_t{nq} * kTile;
  const size_t rows_size = direct ? 0 : size_t{kTile} * hd;
  floats.resize(std::max(floats.size(), sums_size + scores_size + nq + 2 * rows_size));
  km::SoftmaxState* folded = states.data();
  km::SoftmaxState* chunk = states.data() + nq;
  float* sums = floats.data();  // A then acc, per query
  std::span<float> scores(floats.data() + sums_size, scores_size);
  float* alphas = floats.data() + sums_size + scores_size;
  std::span<float> k_rows(alphas + nq, rows_size), v_rows(alphas + nq + rows_size, rows_size);
  std::fill(folded, folded + nq, km::softmax_start());
  std::fill(sums, sums + sums_size, 0.0f);
  auto big_a = [&](uint32_t i) { return sums + size_t{i} * hd * 2; };
  auto acc = [&](uint32_t i) { return sums + size_t{i} * hd * 2 + hd; };

  for (uint32_t c0 = 0; c0 <= last; c0 += km::kAttentionChunk) {
    const uint32_t c_end = std::min(last, c0 + km::kAttentionChunk - 1);
    // Queries that see this chunk: position + i >= c0.
    const uint32_t qc = c0 > r.position + q_begin ? c0 - r.position : q_begin;
    for (uint32_t i = qc; i < q_end; ++i) {
      chunk[i - q_begin] = km::softmax_start();
      std::fill(acc(i - q_begin), acc(i - q_begin) + hd, 0.0f);
    }
    for (uint32_t t0 = c0; t0 <= c_end; t0 += kTile) {
      const uint32_t rows = std::min(c_end, t0 + kTile - 1) - t0 + 1;
      const float* k_base;
      const float* v_base;
      size_t stride;
      if (direct) {
        k_base =
            reinterpret_cast<const float*>(r.k_cache + size_t{t0} * row_bytes) + size_t{h} * hd;
        v_base =
            reinterpret_cast<const float*>(r.v_cache + size_t{t0} * row_bytes) + size_t{h} * hd;
        stride = dim;
      } else {
        decode_rows<W>(r.type, r.k_cache, row_bytes, dim, t0, rows, h * hd, hd, k_rows.data());
        decode_rows<W>(r.type, r.v_cache, row_bytes, dim, t0, rows, h * hd, hd, v_rows.data());
        k_base = k_rows.data();
        v_base = v_rows.data();
        stride = hd;
      }
      const uint32_t qt = t0 > r.position + q_begin ? t0 - r.position : q_begin;
      // Scores of every (row, query) of the tile, the causally hidden ones included: they
      // are computed and never read.
      dot8_tile<W>(k_base, stride, rows, r.q + size_t{qt} * dim + size_t{h} * hd, dim, q_end - qt,
                   hd, scores.data() + size_t{qt - q_begin} * kTile, kTile);
      // The softmax step of each query, its exponentials written over its scores; then the
      // weighted sums, two queries at a time (they share the loads of V).
      for (uint32_t i = qt; i < q_end; ++i) {
        const uint32_t qi = i - q_begin;
        const uint32_t n = std::min(rows, r.position + i - t0 + 1);
        float* s = scores.data() + size_t{qi} * kTile;
        const float mt = scale_and_max<W>(s, scale, n);
        km::SoftmaxState& st = chunk[qi];
        const float m = km::max_f32(st.m, mt);
        alphas[qi] = km::exp_f32(st.m - m);
        exp_rows<W>(s, m, n, s);
        st.l = st.l * alphas[qi] + sum8<W>(s, n);
        st.m = m;
        counts[qi] = n;
      }
      uint32_t i = qt;
      for (; i + 2 <= q_end; i += 2) {
        const uint32_t qi = i - q_begin;
        weighted_rows2<W>(acc(qi), alphas[qi], scores.data() + size_t{qi} * kTile, counts[qi],
                          acc(qi + 1), alphas[qi + 1], scores.data() + size_t{qi + 1} * kTile,
                          counts[qi + 1], v_base, stride, hd);
      }
      if (i < q_end) {
        const uint32_t qi = i - q_begin;
        weighted_rows<W>(acc(qi), alphas[qi], scores.data() + size_t{qi} * kTile, counts[qi],
                         v_base, stride, hd);
      }
    }
    for (uint32_t i = qc; i < q_end; ++i) {
      const uint32_t qi = i - q_begin;
      const km::FoldFactors f = km::softmax_fold(folded[qi], chunk[qi]);
      float* big = big_a(qi);
      const float* small = acc(qi);
      for (uint32_t d = 0; d < hd; ++d) big[d] = big[d] * f.fa + small[d] * f.fb;
    }
  }
  for (uint32_t i = q_begin; i < q_end; ++i) {
    const uint32_t qi = i - q_begin;
    float* out = r.out + size_t{i} * dim + size_t{h} * hd;
    const float* big = big_a(qi);
    for (uint32_t d = 0; d < hd; ++d) out[d] = big[d] / folded[qi].l;
  }
}

}  // namespace siesta::host_loops_impl
