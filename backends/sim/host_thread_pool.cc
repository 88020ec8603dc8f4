#include "backends/sim/host_thread_pool.h"

#include <algorithm>

namespace siesta {

HostThreadPool::HostThreadPool(unsigned threads) {
  const unsigned helpers = threads > 1 ? threads - 1 : 0;
  helpers_.reserve(helpers);
  for (unsigned i = 0; i < helpers; ++i) helpers_.emplace_back([this] { helper_main(); });
}

HostThreadPool::~HostThreadPool() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

unsigned HostThreadPool::default_threads() {
  const unsigned hardware = std::thread::hardware_concurrency();
  return std::clamp(hardware, 1u, 16u);
}

// Tasks are handed out one at a time under the mutex: a task is a whole row range or head of
// a kernel (microseconds to milliseconds of work), so the lock is never what limits it.
void HostThreadPool::drain(const std::function<void(size_t)>& body, size_t tasks) {
  for (;;) {
    size_t task = 0;
    {
      MutexLock lock(mutex_);
      if (next_task_ >= tasks) return;
      task = next_task_++;
    }
    body(task);
  }
}

void HostThreadPool::run(size_t tasks, const std::function<void(size_t)>& body) {
  if (tasks == 0) return;
  if (helpers_.empty() || tasks == 1) {
    for (size_t t = 0; t < tasks; ++t) body(t);
    return;
  }
  {
    MutexLock lock(mutex_);
    body_ = &body;
    tasks_ = tasks;
    next_task_ = 0;
    busy_helpers_ = static_cast<unsigned>(helpers_.size());
    ++round_;
  }
  wake_.notify_all();
  drain(body, tasks);
  MutexLock lock(mutex_);
  lock.wait(done_, [this]() SIESTA_REQUIRES(mutex_) { return busy_helpers_ == 0; });
  body_ = nullptr;
}

void HostThreadPool::helper_main() {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t)>* body = nullptr;
    size_t tasks = 0;
    {
      MutexLock lock(mutex_);
      lock.wait(wake_, [&]() SIESTA_REQUIRES(mutex_) { return stopping_ || round_ != seen; });
      if (stopping_) return;
      seen = round_;
      body = body_;
      tasks = tasks_;
    }
    drain(*body, tasks);
    {
      MutexLock lock(mutex_);
      if (--busy_helpers_ == 0) done_.notify_one();
    }
  }
}

}  // namespace siesta
