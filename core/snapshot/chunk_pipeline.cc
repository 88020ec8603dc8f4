#include "core/snapshot/internal/chunk_pipeline.h"

#include <algorithm>
#include <system_error>
#include <utility>

namespace siesta {

size_t default_snapshot_threads() {
  const unsigned hardware = std::thread::hardware_concurrency();  // 0 when unknown
  return std::clamp<size_t>(hardware, 1, 4);
}

size_t resolve_snapshot_threads(uint32_t requested) {
  if (requested == 0) return default_snapshot_threads();
  return std::min<size_t>(requested, 64);
}

ChunkPipeline::ChunkPipeline(std::vector<std::unique_ptr<ChunkSealer>> sealers)
    : sealers_(std::move(sealers)) {
  workers_.reserve(sealers_.size());
  for (size_t i = 0; i < sealers_.size(); ++i) {
    try {
      workers_.emplace_back([this, i] { work(i); });
    } catch (const std::system_error&) {
      break;  // fewer workers (or inline mode when none started): slower, still correct
    }
  }
}

ChunkPipeline::~ChunkPipeline() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ChunkPipeline::submit(Job job) {
  ++pending_;
  if (workers_.empty()) {
    Status status = job(*sealers_.front());
    MutexLock lock(mutex_);
    entries_.push_back(Entry{nullptr, std::move(status), true});
    ++next_to_start_;
    return;
  }
  {
    MutexLock lock(mutex_);
    entries_.push_back(Entry{std::move(job), Status::Ok(), false});
  }
  work_ready_.notify_one();
}

Status ChunkPipeline::retire() {
  if (pending_ == 0) return Internal("chunk pipeline: nothing to retire");
  MutexLock lock(mutex_);
  lock.wait(job_done_, [this]() SIESTA_REQUIRES(mutex_) { return entries_.front().done; });
  Status status = std::move(entries_.front().status);
  entries_.pop_front();
  --next_to_start_;  // every entry before next_to_start_ was taken, the front one included
  --pending_;
  return status;
}

void ChunkPipeline::work(size_t worker) {
  ChunkSealer& sealer = *sealers_[worker];
  MutexLock lock(mutex_);
  for (;;) {
    lock.wait(work_ready_, [this]() SIESTA_REQUIRES(mutex_) {
      return stopping_ || next_to_start_ < entries_.size();
    });
    if (stopping_) return;  // queued jobs are dropped: only a failed or cancelled owner stops early
    Entry& entry = entries_[next_to_start_++];
    lock.unlock();
    Status status = entry.job(sealer);
    lock.lock();
    entry.status = std::move(status);
    entry.job = nullptr;  // frees what the job captured before the owner retires it
    entry.done = true;
    job_done_.notify_one();  // only the owner waits for jobs
  }
}

}  // namespace siesta
