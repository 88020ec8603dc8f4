// ThreadPool: a fixed set of threads, started once and kept, running posted tasks in the order
// they were posted. For work that would otherwise start threads of its own every time (a
// snapshot's chunk sealing and verifying: starting four threads costs 0.5-1.3 ms, more than a
// small snapshot's whole restore).
//
// Thread rule: post() from any thread, also from a task. The destructor runs the tasks already
// posted, then joins every thread. A pool whose threads could not be started (none at all)
// runs each task inside post(), on the caller's thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"

namespace siesta {

class ThreadPool {
 public:
  using Task = std::function<void()>;

  // Starts `threads` threads (at least 1), fewer when the system refuses some.
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void post(Task task) SIESTA_EXCLUDES(mu_);
  size_t threads() const { return threads_.size(); }

 private:
  void run() SIESTA_EXCLUDES(mu_);

  Mutex mu_;
  std::condition_variable ready_;
  std::deque<Task> tasks_ SIESTA_GUARDED_BY(mu_);
  bool stopping_ SIESTA_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started after everything above exists
};

}  // namespace siesta
