#include "core/base/executor.h"

#include <chrono>

namespace siesta {

ThreadExecutor::ThreadExecutor(const Clock& clock) : clock_(clock), worker_([this] { run(); }) {}

ThreadExecutor::~ThreadExecutor() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void ThreadExecutor::post(Task task) { post_at(Clock::Duration::min(), std::move(task)); }

void ThreadExecutor::post_at(Clock::Duration when, Task task) {
  {
    MutexLock lock(mutex_);
    tasks_.emplace(std::make_pair(when, posted_++), std::move(task));
  }
  wake_.notify_all();
}

void ThreadExecutor::run() {
  MutexLock lock(mutex_);
  while (!stopping_) {
    if (tasks_.empty()) {
      lock.wait(wake_);
      continue;
    }
    const Clock::Duration due = tasks_.begin()->first.first;
    const Clock::Duration now = clock_.now();
    if (due > now) {
      // The clock is steady time; wait_for a relative span so that any Clock whose now() is
      // steady time since some origin works.
      lock.wait_for(wake_, due - now);
      continue;
    }
    Task task = std::move(tasks_.begin()->second);
    tasks_.erase(tasks_.begin());
    running_ = true;
    lock.unlock();
    task();
    task = nullptr;  // what the task holds goes before anyone is told it finished
    lock.lock();
    running_ = false;
    idle_changed_.notify_all();
  }
}

bool ThreadExecutor::idle() const {
  return !running_ && (tasks_.empty() || tasks_.begin()->first.first > clock_.now());
}

bool ThreadExecutor::wait_idle(std::chrono::nanoseconds timeout) {
  MutexLock lock(mutex_);
  // The worker may sleep towards a deadline a moved clock (ManualClock) has already passed:
  // wake it so that it looks again.
  wake_.notify_all();
  return lock.wait_for(idle_changed_, timeout, [this]() SIESTA_REQUIRES(mutex_) { return idle(); });
}

void ManualExecutor::post(Task task) { post_at(Clock::Duration::min(), std::move(task)); }

void ManualExecutor::post_at(Clock::Duration when, Task task) {
  MutexLock lock(mutex_);
  tasks_.emplace(std::make_pair(when, posted_++), std::move(task));
}

size_t ManualExecutor::run_due() {
  size_t ran = 0;
  for (;;) {
    Task task;
    {
      MutexLock lock(mutex_);
      if (tasks_.empty() || tasks_.begin()->first.first > clock_.now()) return ran;
      task = std::move(tasks_.begin()->second);
      tasks_.erase(tasks_.begin());
    }
    task();
    ++ran;
  }
}

size_t ManualExecutor::pending() const {
  MutexLock lock(mutex_);
  return tasks_.size();
}

Clock::Duration ManualExecutor::next_due() const {
  MutexLock lock(mutex_);
  return tasks_.empty() ? Clock::Duration::max() : tasks_.begin()->first.first;
}

}  // namespace siesta
