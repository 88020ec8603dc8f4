#include "core/snapshot/cold_read_choice.h"

#include <algorithm>

namespace siesta {

ColdReadChoice::Way ColdReadChoice::next(uint64_t bytes) {
  if (bytes < kLeastBytes) return Way::kAroundCache;
  MutexLock lock(mutex_);
  if (learning_locked()) {
    // Taking turns: the way with fewer counted reads (around the cache first).
    const Figures& around = ways_[static_cast<size_t>(Way::kAroundCache)];
    const Figures& through = ways_[static_cast<size_t>(Way::kThroughCache)];
    return through.count < around.count ? Way::kThroughCache : Way::kAroundCache;
  }
  const Way faster = faster_locked();
  const Way other = faster == Way::kAroundCache ? Way::kThroughCache : Way::kAroundCache;
  return ++asked_ % kRetryEvery == 0 ? other : faster;
}

bool ColdReadChoice::learning_locked() const {
  return ways_[static_cast<size_t>(Way::kAroundCache)].count < kSamples ||
         ways_[static_cast<size_t>(Way::kThroughCache)].count < kSamples;
}

ColdReadChoice::Way ColdReadChoice::faster_locked() const {
  return median_of(ways_[static_cast<size_t>(Way::kThroughCache)]) >
                 median_of(ways_[static_cast<size_t>(Way::kAroundCache)])
             ? Way::kThroughCache
             : Way::kAroundCache;
}

ColdReadChoice::Stats ColdReadChoice::stats() const {
  MutexLock lock(mutex_);
  Stats stats;
  stats.learning = learning_locked();
  stats.preferred = stats.learning ? Way::kAroundCache : faster_locked();
  for (const Way way : kWays) {
    const Figures& figures = ways_[static_cast<size_t>(way)];
    stats.of(way) = {median_of(figures), figures.count};
  }
  return stats;
}

std::string_view cold_read_way_name(ColdReadChoice::Way way) {
  return way == ColdReadChoice::Way::kAroundCache ? "around_cache" : "through_cache";
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
