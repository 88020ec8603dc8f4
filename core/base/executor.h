// Executor: where the Offloader's timers fire and its background saves run (one of the seams
// behind which everything nondeterministic sits: docs/ARCHITECTURE.md). The real one is a thread;
// tests use ManualExecutor, which runs nothing until the test says so, so that every interleaving
// of a timer, a save and a command can be chosen rather than hoped for.
//
// Thread rule: post/post_at may be called from any thread, including from inside a task.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "core/base/clock.h"
#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"

namespace siesta {

class Executor {
 public:
  using Task = std::function<void()>;
  virtual ~Executor() = default;

  // Runs `task` soon, after the tasks already due; tasks never run concurrently with each
  // other.
  virtual void post(Task task) = 0;

  // Runs `task` once clock.now() >= `when` (the Clock the executor was made with). Tasks due
  // at the same time run in the order they were posted.
  virtual void post_at(Clock::Duration when, Task task) = 0;
};

// Runs tasks on one worker thread of its own, timers against the Clock it was given (which
// must advance by itself: SystemClock). The destructor drops timers not yet due, waits for the
// running task and joins the thread.
class ThreadExecutor final : public Executor {
 public:
  explicit ThreadExecutor(const Clock& clock);
  ~ThreadExecutor() override;
  ThreadExecutor(const ThreadExecutor&) = delete;
  ThreadExecutor& operator=(const ThreadExecutor&) = delete;

  void post(Task task) override SIESTA_EXCLUDES(mutex_);
  void post_at(Clock::Duration when, Task task) override SIESTA_EXCLUDES(mutex_);

  // Waits until no task is running and none is due at clock.now() (timers not yet due do not
  // count; tasks the running ones post for now do), at most `timeout` of real time. True:
  // idle. Whoever posted work and wants it done (a save, a removal) waits here.
  // Any thread but the worker's (a task waiting for its own executor waits until the timeout).
  bool wait_idle(std::chrono::nanoseconds timeout) SIESTA_EXCLUDES(mutex_);

 private:
  // The worker thread: runs each task without the mutex.
  void run() SIESTA_EXCLUDES(mutex_);
  bool idle() const SIESTA_REQUIRES(mutex_);

  const Clock& clock_;
  // Guards the queue and the worker's state below; never held while a task runs.
  Mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_changed_;            // a task has finished
  bool running_ SIESTA_GUARDED_BY(mutex_) = false;  // the worker runs a task
  // Due time, then posting order: the key keeps same-time tasks first-in first-out.
  std::multimap<std::pair<Clock::Duration, uint64_t>, Task> tasks_ SIESTA_GUARDED_BY(mutex_);
  uint64_t posted_ SIESTA_GUARDED_BY(mutex_) = 0;
  bool stopping_ SIESTA_GUARDED_BY(mutex_) = false;
  std::thread worker_;  // last: started once everything above exists
};

// Runs tasks only inside run_due(), on the caller's thread, against a ManualClock the test
// moves. Deterministic: the same calls run the same tasks in the same order.
class ManualExecutor final : public Executor {
 public:
  explicit ManualExecutor(const Clock& clock) : clock_(clock) {}

  void post(Task task) override SIESTA_EXCLUDES(mutex_);
  void post_at(Clock::Duration when, Task task) override SIESTA_EXCLUDES(mutex_);

  // Runs every task due at clock.now(), including tasks those tasks post for now, in due
  // order. Returns how many ran.
  size_t run_due() SIESTA_EXCLUDES(mutex_);
  // Tasks waiting (due or not).
  size_t pending() const SIESTA_EXCLUDES(mutex_);
  // The earliest due time of a waiting task; Clock::Duration::max() when none.
  Clock::Duration next_due() const SIESTA_EXCLUDES(mutex_);

 private:
  const Clock& clock_;
  // Guards the queue; never held while a task runs (a task may post more).
  mutable Mutex mutex_;
  std::multimap<std::pair<Clock::Duration, uint64_t>, Task> tasks_ SIESTA_GUARDED_BY(mutex_);
  uint64_t posted_ SIESTA_GUARDED_BY(mutex_) = 0;
};

}  // namespace siesta
