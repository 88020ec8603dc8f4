// For tests that put a FIFO where a file is expected: opening a FIFO for reading blocks until a
// writer comes, and such a block is the bug those tests guard. finishes_without_blocking()
// runs the call under test on another thread and, when it has not finished by the deadline,
// opens the FIFO's write end (which releases an open() stuck on it) until it does, so a test
// of that bug fails instead of hanging.
//
// Thread rule: called from the test's thread; `call` runs on a thread of its own and must not
// touch what the test thread uses meanwhile.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <vector>

namespace siesta::test_util {

// True when `call` finished within `deadline` without help; false when it had to be released
// by a writer on `fifo` (it is finished in both cases when this returns).
inline bool finishes_without_blocking(
    const std::string& fifo, std::function<void()> call,
    std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
  std::future<void> done = std::async(std::launch::async, std::move(call));
  if (done.wait_for(deadline) == std::future_status::ready) {
    done.get();
    return true;
  }
  // Every open() stuck on the FIFO is released by a writer appearing; the call may open the
  // FIFO again, so writers are opened (and kept) until it finishes. Bounded: 100 rounds of
  // 100 ms, then the last wait is unbounded only if the call is stuck somewhere else.
  std::vector<int> writers;
  for (int round = 0; round < 100; ++round) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) writers.push_back(fd);
    if (done.wait_for(std::chrono::milliseconds(100)) == std::future_status::ready) break;
  }
  done.get();
  for (int fd : writers) ::close(fd);
  return false;
}

}  // namespace siesta::test_util
