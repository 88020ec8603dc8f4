#include "core/base/clock.h"

#include <algorithm>

namespace siesta {

Clock::Duration Clock::at_unix(int64_t unix_seconds_then) const {
  const Duration reading = now();
  const Duration since =
      std::chrono::seconds(std::max<int64_t>(0, unix_seconds() - unix_seconds_then));
  return reading > since ? reading - since : Duration{0};
}

Clock::Duration SystemClock::now() const {
  return std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now().time_since_epoch());
}

int64_t SystemClock::unix_seconds() const {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

SystemClock& SystemClock::instance() {
  static SystemClock clock;
  return clock;
}

}  // namespace siesta
