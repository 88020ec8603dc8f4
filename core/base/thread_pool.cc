#include "core/base/thread_pool.h"

#include <algorithm>
#include <system_error>
#include <utility>

namespace siesta {

ThreadPool::ThreadPool(size_t threads) {
  threads_.reserve(std::max<size_t>(threads, 1));
  for (size_t i = 0; i < std::max<size_t>(threads, 1); ++i) {
    try {
      threads_.emplace_back([this] { run(); });
    } catch (const std::system_error&) {
      break;  // fewer threads (or none: post() runs tasks inline): slower, still correct
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void ThreadPool::post(Task task) {
  if (threads_.empty()) {
    task();
    return;
  }
  {
    MutexLock lock(mu_);
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
}

void ThreadPool::run() {
  MutexLock lock(mu_);
  for (;;) {
    lock.wait(ready_, [this]() SIESTA_REQUIRES(mu_) { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and every posted task has run
    Task task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // what it captured goes before the lock is taken again
    lock.lock();
  }
}

}  // namespace siesta
