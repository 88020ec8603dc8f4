// Order statistics the benchmarks report: medians of rounds (a VM's disk and scheduler move
// single rounds by several times) and percentiles of waits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace siesta::bench {

// The middle value; the mean of the two middle ones for an even count; 0 for none.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// The nearest-rank p-quantile (p in [0, 1]): the smallest value with at least p of them at or
// below it; 0 for none.
inline double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

}  // namespace siesta::bench
