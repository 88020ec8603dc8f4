// WorkerPool: the threads that run HTTP requests (a handler may wait for a whole generation),
// started as requests need them, up to a limit. The connection loop hands a worker only a
// request it has read whole, and a connection has at most one request at a worker, so with a
// limit of --http-max-connections no request ever waits for a thread: a slow completion holds
// its own thread and /health still gets one at once.
//
// Threads, once started, stay until shutdown() (an idle one costs its stack's resident pages,
// a few KiB). Thread rule: submit() and shutdown() from any thread; jobs run on the workers.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/status.h"

namespace siesta::server {

class WorkerPool {
 public:
  // REQUIRES: max_threads >= 1.
  explicit WorkerPool(size_t max_threads);
  // shutdown().
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs `job` on an idle worker, else on a new one while fewer than max_threads run, else on
  // the first to become free. Success: the job will run. Failure: Internal when no worker
  // exists and none could be started (the job is dropped), or after shutdown().
  [[nodiscard]] Status submit(std::function<void()> job);

  // Runs the jobs already submitted, then ends and joins every worker. Idempotent; not from a
  // job.
  void shutdown();

  // Workers running now (for tests).
  size_t threads() const;
  // Blocks until no job is queued and every started worker waits for one (for tests: a job
  // that has finished may leave its worker a moment before it is idle again). REQUIRES: not
  // after shutdown().
  void wait_until_idle() const;

 private:
  void work();

  const size_t max_threads_;
  mutable Mutex mutex_;
  std::condition_variable wake_;
  mutable std::condition_variable became_idle_;  // a worker began waiting for a job
  std::deque<std::function<void()>> jobs_ SIESTA_GUARDED_BY(mutex_);
  size_t idle_ SIESTA_GUARDED_BY(mutex_) = 0;
  bool stopping_ SIESTA_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_ SIESTA_GUARDED_BY(mutex_);
};

}  // namespace siesta::server
