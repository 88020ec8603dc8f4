// ColdReadChoice: which way snapshot files are read when they are out of the page cache,
// learned from the reads themselves. The engine keeps one for all its sessions (they share a
// snapshot directory, so a disk).
//
// Why: no way is fastest on every disk. Read in order around the cache (O_DIRECT, a read or two
// in flight; core/base/read_ahead_file.h), a cold 512 MiB file came at 2.76 GB/s on the H100
// machine's disk against 2.10 through the cache, while on the CPU machine's virtual disk the
// same read around the cache ran at 1.7-2.0 GB/s against 2.5-3.5 through it (2026-12-06,
// cold_restore_bench). So each way is tried on the first cold reads, the faster one is kept,
// and the other is tried again now and then in case the disk's behaviour changed.
//
// The rule: reads of fewer than kLeastBytes do not count (they take their time in set-up more
// than in the disk). Until both ways have kSamples counted reads the ways take turns; then
// every read takes the way whose median rate over its last kSamples reads is higher, except
// one in kRetryEvery (counted from the end of the turns), which takes the other.
//
// Thread rule: any thread; a mutex guards the figures. Restores of several sessions at once
// each ask and record; turns are then shared among them, which keeps the rule.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/base/mutex.h"

namespace siesta {

class ColdReadChoice {
 public:
  enum class Way { kAroundCache, kThroughCache };
  static constexpr std::array<Way, 2> kWays = {Way::kAroundCache, Way::kThroughCache};
  static constexpr uint64_t kLeastBytes = uint64_t{16} << 20;
  static constexpr size_t kSamples = 3;
  static constexpr uint64_t kRetryEvery = 16;

  // The way the next cold read of `bytes` should take. Reads below kLeastBytes go around the
  // cache (what the disk does for them is not measured).
  Way next(uint64_t bytes);
  // A cold read of `bytes` that took `seconds` the way `way`.
  void record(Way way, uint64_t bytes, double seconds);

  // The median rate (bytes per second) of a way's last kSamples counted reads; 0 before any.
  double rate(Way way) const;

  // What has been learned, for status pages: whether the ways still take turns, the way counted
  // reads take now (kAroundCache while learning; one in kRetryEvery takes the other), and per
  // way its median rate (as rate()) and its counted reads.
  struct WayFigures {
    double bytes_per_second = 0;
    uint64_t reads = 0;
  };
  struct Stats {
    bool learning = true;
    Way preferred = Way::kAroundCache;
    std::array<WayFigures, kWays.size()> ways{};  // by Way
    WayFigures& of(Way way) { return ways[static_cast<size_t>(way)]; }
    const WayFigures& of(Way way) const { return ways[static_cast<size_t>(way)]; }
  };
  Stats stats() const;

 private:
  struct Figures {
    std::array<double, kSamples> rates{};  // the last ones, oldest overwritten first
    size_t count = 0;                      // counted reads, all told
  };
  static double median_of(const Figures& figures);
  bool learning_locked() const SIESTA_REQUIRES(mutex_);
  // The way with the higher median once both have kSamples reads.
  Way faster_locked() const SIESTA_REQUIRES(mutex_);

  mutable Mutex mutex_;
  std::array<Figures, 2> ways_ SIESTA_GUARDED_BY(mutex_);
  uint64_t asked_ SIESTA_GUARDED_BY(mutex_) = 0;  // next() calls for counted sizes
};

// A way's name in status and metrics: "around_cache", "through_cache".
std::string_view cold_read_way_name(ColdReadChoice::Way way);

}  // namespace siesta
