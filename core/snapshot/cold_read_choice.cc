#include "core/snapshot/cold_read_choice.h"

#include <algorithm>

namespace siesta {

ColdReadChoice::Way ColdReadChoice::next(uint64_t bytes) {
  if (bytes < kLeastBytes) return Way::kAroundCache;
  MutexLock lock(mutex_);
  const Figures& around = ways_[static_cast<size_t>(Way::kAroundCache)];
  const Figures& through = ways_[static_cast<size_t>(Way::kThroughCache)];
  if (around.count < kSamples || through.count < kSamples) {
    // Taking turns: the way with fewer counted reads (around the cache first).
    return through.count < around.count ? Way::kThroughCache : Way::kAroundCache;
  }
  const Way faster =
      median_of(through) > median_of(around) ? Way::kThroughCache : Way::kAroundCache;
  const Way other = faster == Way::kAroundCache ? Way::kThroughCache : Way::kAroundCache;
  return ++asked_ % kRetryEvery == 0 ? other : faster;
}

void ColdReadChoice::record(Way way, uint64_t bytes, double seconds) {
  if (bytes < kLeastBytes || seconds <= 0) return;
  MutexLock lock(mutex_);
  Figures& figures = ways_[static_cast<size_t>(way)];
  figures.rates[figures.count % kSamples] = static_cast<double>(bytes) / seconds;
  ++figures.count;
}

double ColdReadChoice::rate(Way way) const {
  MutexLock lock(mutex_);
  return median_of(ways_[static_cast<size_t>(way)]);
}

double ColdReadChoice::median_of(const Figures& figures) {
  const size_t n = std::min(figures.count, kSamples);
  if (n == 0) return 0;
  std::array<double, kSamples> sorted = figures.rates;
  std::sort(sorted.begin(), sorted.begin() + static_cast<long>(n));
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

}  // namespace siesta
