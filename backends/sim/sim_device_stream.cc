#include "backends/sim/sim_device_stream.h"

#include <string>
#include <utility>

namespace siesta {

SimDeviceStream::SimDeviceStream(Timing timing) : timing_(timing), worker_([this] { run(); }) {}

SimDeviceStream::~SimDeviceStream() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    released_ = submitted_;
  }
  work_ready_.notify_all();
  worker_.join();
}

CopyTicket SimDeviceStream::submit(Job job) {
  CopyTicket ticket;
  {
    MutexLock lock(mutex_);
    ticket.sequence = ++submitted_;
    queue_.emplace_back(ticket.sequence, std::move(job));
  }
  work_ready_.notify_one();
  return ticket;
}

void SimDeviceStream::wait_for(uint64_t sequence, MutexLock& lock) {
  if (sequence > released_) {
    released_ = sequence;
    work_ready_.notify_one();
  }
  lock.wait(job_done_, [&]() SIESTA_REQUIRES(mutex_) { return completed_ >= sequence; });
}

Status SimDeviceStream::wait(CopyTicket ticket) {
  MutexLock lock(mutex_);
  if (ticket.sequence > submitted_) {
    return InvalidArgument(
        "ticket " + std::to_string(ticket.sequence) +
        " was never issued by this stream (last issued: " + std::to_string(submitted_) + ")");
  }
  wait_for(ticket.sequence, lock);
  auto failure = failures_.find(ticket.sequence);
  return failure == failures_.end() ? Status::Ok() : failure->second;
}

void SimDeviceStream::drain() {
  MutexLock lock(mutex_);
  wait_for(submitted_, lock);
}

Status SimDeviceStream::synchronize() {
  MutexLock lock(mutex_);
  wait_for(submitted_, lock);
  return std::exchange(first_unreported_, Status::Ok());
}

void SimDeviceStream::run() {
  MutexLock lock(mutex_);
  for (;;) {
    lock.wait(work_ready_, [&]() SIESTA_REQUIRES(mutex_) {
      return may_run_front() || (stopping_ && queue_.empty());
    });
    // Stopping still runs what was queued (the destructor released it): a queued copy may be
    // the last use of memory the backend unmaps right after the stream is gone.
    if (queue_.empty()) return;
    auto [sequence, job] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Status status = job();
    job = nullptr;  // destroy what the job captured before waiters learn it is done
    lock.lock();
    if (!status.ok()) {
      if (first_unreported_.ok()) first_unreported_ = status;
      failures_.emplace(sequence, std::move(status));
    }
    completed_ = sequence;
    job_done_.notify_all();
  }
}

}  // namespace siesta
