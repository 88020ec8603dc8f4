// The time left until a deadline as poll(2)'s timeout: whole milliseconds, never negative.
#pragma once

#include <chrono>

namespace siesta::testing {

inline int poll_timeout_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace siesta::testing
