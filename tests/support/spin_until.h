// spin_until: for a condition that nothing notifies (a counter another thread bumps, a status
// field read under someone else's lock), the bounded form of `while (!done()) yield();`, so
// that a condition that never comes fails the test instead of hanging it.
#pragma once

#include <chrono>
#include <thread>

namespace siesta::testing {

// Calls `done()` until it returns true (then true) or `timeout` of real time has passed (then
// false), yielding between calls.
template <class Done>
bool spin_until(Done done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace siesta::testing
