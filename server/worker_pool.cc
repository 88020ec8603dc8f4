#include "server/worker_pool.h"

#include <exception>
#include <utility>

namespace siesta::server {

WorkerPool::WorkerPool(size_t max_threads) : max_threads_(max_threads < 1 ? 1 : max_threads) {}

WorkerPool::~WorkerPool() { shutdown(); }

Status WorkerPool::submit(std::function<void()> job) {
  MutexLock lock(mutex_);
  if (stopping_) return Internal("the worker pool is shutting down");
  jobs_.push_back(std::move(job));
  // Each queued job beyond the idle workers wants a thread of its own, up to the limit.
  if (jobs_.size() > idle_ && threads_.size() < max_threads_) {
    try {
      threads_.emplace_back([this] { work(); });
    } catch (const std::exception& e) {
      if (threads_.empty()) {
        jobs_.pop_back();
        return Internal(std::string("cannot start a worker thread: ") + e.what());
      }
      // The running workers will get to it.
    }
  }
  wake_.notify_one();
  return Status::Ok();
}

void WorkerPool::work() {
  MutexLock lock(mutex_);
  for (;;) {
    ++idle_;
    became_idle_.notify_all();
    lock.wait(wake_, [this]() SIESTA_REQUIRES(mutex_) { return stopping_ || !jobs_.empty(); });
    --idle_;
    if (jobs_.empty()) return;  // stopping, nothing left
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // its captures go before the lock is taken again
    lock.lock();
  }
}

void WorkerPool::shutdown() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    threads.swap(threads_);
  }
  wake_.notify_all();
  for (std::thread& thread : threads) thread.join();
}

size_t WorkerPool::threads() const {
  MutexLock lock(mutex_);
  return threads_.size();
}

void WorkerPool::wait_until_idle() const {
  MutexLock lock(mutex_);
  lock.wait(became_idle_,
            [this]() SIESTA_REQUIRES(mutex_) { return jobs_.empty() && idle_ == threads_.size(); });
}

}  // namespace siesta::server
