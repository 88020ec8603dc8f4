// SimDeviceStream: one stream of the simulated device. Jobs (copies, zeroing, host kernels)
// run one at a time, in submission order, on a worker thread, as work on a CUDA stream runs
// after the host has enqueued it. A job's ticket is its sequence number (1, 2, ...).
//
// When a stream is made with Timing::kWhenWaited its jobs run only once something waits for
// them (wait() of their ticket or a later one, drain(), synchronize()): as late as a GPU may
// run them. Code that reads memory a job is still to write, or runs work over memory another
// stream's job is still to fill, without ordering the two, then sees the old bytes every time
// instead of once in a while. Timing::kEager runs every job as soon as the worker reaches it.
//
// Thread rule: every method may be called from any thread, except that a job must not call
// wait(), drain() or synchronize() on its own stream (it would wait for itself), just as a
// CUDA host function must not call CUDA.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <thread>

#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/memory/memory_backend.h"

namespace siesta {

class SimDeviceStream {
 public:
  using Job = std::function<Status()>;
  enum class Timing { kEager, kWhenWaited };

  explicit SimDeviceStream(Timing timing = Timing::kEager);
  // Runs every job still queued, then stops the worker.
  ~SimDeviceStream();
  SimDeviceStream(const SimDeviceStream&) = delete;
  SimDeviceStream& operator=(const SimDeviceStream&) = delete;

  // Queues `job` after every job submitted before it. Never fails.
  CopyTicket submit(Job job) SIESTA_EXCLUDES(mutex_);

  // Blocks until the job of `ticket` (and so every job before it) has run; returns that job's
  // status. Sequence 0 means "no job" and returns OK at once. A ticket this stream never
  // issued is InvalidArgument.
  Status wait(CopyTicket ticket) SIESTA_EXCLUDES(mutex_);

  // Blocks until every job submitted before the call has run. Reports no error: errors stay
  // for wait() and synchronize() to report (decommit drains without taking them).
  void drain() SIESTA_EXCLUDES(mutex_);

  // drain(), then returns the first error of any job that ran since the previous
  // synchronize() (and forgets it).
  Status synchronize() SIESTA_EXCLUDES(mutex_);

 private:
  // The worker thread: runs each job without the mutex.
  void run() SIESTA_EXCLUDES(mutex_);
  // Lets every job up to `sequence` run, then waits until they have (`lock` holds mutex_).
  void wait_for(uint64_t sequence, MutexLock& lock) SIESTA_REQUIRES(mutex_);
  bool may_run_front() const SIESTA_REQUIRES(mutex_) {
    return !queue_.empty() && (timing_ == Timing::kEager || queue_.front().first <= released_);
  }

  const Timing timing_;
  Mutex mutex_;
  std::condition_variable work_ready_;  // the worker waits here for jobs or stop
  std::condition_variable job_done_;    // waiters wait here for `completed_` to advance
  std::deque<std::pair<uint64_t, Job>> queue_ SIESTA_GUARDED_BY(mutex_);
  uint64_t submitted_ SIESTA_GUARDED_BY(mutex_) = 0;  // sequence of the last job submitted
  // Sequence of the last job that ran (jobs finish in order).
  uint64_t completed_ SIESTA_GUARDED_BY(mutex_) = 0;
  uint64_t released_ SIESTA_GUARDED_BY(mutex_) = 0;  // kWhenWaited: jobs up to here may run
  // Errors of failed jobs by sequence, so wait() can report them however late it is called;
  // jobs that succeed leave nothing behind.
  std::map<uint64_t, Status> failures_ SIESTA_GUARDED_BY(mutex_);
  // First error since the previous synchronize().
  Status first_unreported_ SIESTA_GUARDED_BY(mutex_);
  bool stopping_ SIESTA_GUARDED_BY(mutex_) = false;
  std::thread worker_;  // last member: starts once everything it touches exists
};

}  // namespace siesta
