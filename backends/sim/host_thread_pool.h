// HostThreadPool: the few threads a host kernel job spreads its independent outputs over.
//
// run(tasks, body) calls body(t) once for every t in [0, tasks), on the pool's helper threads
// and on the calling thread, and returns when all have returned. Which thread runs which task
// is not fixed (they take the next task as they become free), so a caller must make every
// task's result independent of that: the host kernels give each output value to exactly one
// task, which computes it in the contract's order, so the bits never depend on the thread
// count or the schedule.
//
// A pool of one thread runs everything on the caller (no helper is started).
//
// Thread rule: run() may be called by one thread at a time (HostKernels calls it only from
// jobs on the SimBackend's work stream, which runs one job at a time); body must not call run()
// of the same pool. The destructor must not race a run().
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"

namespace siesta {

class HostThreadPool {
 public:
  // `threads` counts the caller: threads - 1 helpers are started (0 and 1 both mean none).
  explicit HostThreadPool(unsigned threads);
  ~HostThreadPool();
  HostThreadPool(const HostThreadPool&) = delete;
  HostThreadPool& operator=(const HostThreadPool&) = delete;

  unsigned threads() const { return static_cast<unsigned>(helpers_.size()) + 1; }

  void run(size_t tasks, const std::function<void(size_t)>& body) SIESTA_EXCLUDES(mutex_);

  // The default size: the machine's hardware threads, at most 16.
  static unsigned default_threads();

 private:
  void helper_main() SIESTA_EXCLUDES(mutex_);
  // Runs the next task not yet taken until none is left (each task without the mutex).
  void drain(const std::function<void(size_t)>& body, size_t tasks) SIESTA_EXCLUDES(mutex_);

  Mutex mutex_;
  std::condition_variable wake_;  // helpers: a new round, or stopping
  std::condition_variable done_;  // the caller: the last helper left the round
  uint64_t round_ SIESTA_GUARDED_BY(mutex_) = 0;
  bool stopping_ SIESTA_GUARDED_BY(mutex_) = false;
  unsigned busy_helpers_ SIESTA_GUARDED_BY(mutex_) = 0;  // helpers still in the current round
  // Set per round.
  const std::function<void(size_t)>* body_ SIESTA_GUARDED_BY(mutex_) = nullptr;
  size_t tasks_ SIESTA_GUARDED_BY(mutex_) = 0;
  size_t next_task_ SIESTA_GUARDED_BY(mutex_) = 0;
  // Set by the constructor, before any thread but the helpers it starts exists: read freely.
  std::vector<std::thread> helpers_;  // last: started when the rest exists
};

}  // namespace siesta
