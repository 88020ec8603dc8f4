// Clock: where siesta reads time. Idle timers, expiry and durations all go through it, so
// tests move time with ManualClock instead of sleeping.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"

namespace siesta {

class Clock {
 public:
  using Duration = std::chrono::nanoseconds;
  virtual ~Clock() = default;

  // Monotonic time since an arbitrary origin; never goes back. For timers and durations.
  virtual Duration now() const = 0;

  // Wall-clock seconds since the Unix epoch. For expiry times written into files, which
  // must mean the same thing to a later process.
  virtual int64_t unix_seconds() const = 0;

  // What now() read at the wall-clock second `unix_seconds_then` (a time a file recorded, such
  // as an adopted snapshot's last save): now() less the seconds since, whole seconds; a time in
  // the future reads as now(), and nothing reads below zero.
  Duration at_unix(int64_t unix_seconds_then) const;
};

// The real clocks: std::chrono::steady_clock and system_clock. Thread-safe.
class SystemClock final : public Clock {
 public:
  Duration now() const override;
  int64_t unix_seconds() const override;
  // A process-wide instance.
  static SystemClock& instance();
};

// A clock that moves only when a test says so. Both readings advance together.
// Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t unix_seconds_at_start = 1'800'000'000)
      : unix_start_(unix_seconds_at_start) {}

  Duration now() const override SIESTA_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    return now_;
  }
  int64_t unix_seconds() const override SIESTA_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    return unix_start_ + std::chrono::duration_cast<std::chrono::seconds>(now_).count();
  }
  // REQUIRES: by >= 0.
  void advance(Duration by) SIESTA_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    now_ += by;
  }

 private:
  mutable Mutex mutex_;
  Duration now_ SIESTA_GUARDED_BY(mutex_){0};
  const int64_t unix_start_;
};

}  // namespace siesta
