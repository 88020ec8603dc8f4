#include "core/snapshot/internal/chunk_pipeline.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

namespace siesta {

size_t default_snapshot_write_threads() {
  const unsigned hardware = std::thread::hardware_concurrency();  // 0 when unknown
  return std::clamp<size_t>(hardware, 1, 4);
}

size_t default_snapshot_read_threads() {
  const size_t hardware = std::max(1u, std::thread::hardware_concurrency());  // 0 when unknown
  return std::clamp<size_t>(hardware * 3 / 4, std::min<size_t>(hardware, 4), 16);
}

uint32_t chunk_bytes_for_readers(uint64_t payload_bytes, uint32_t largest) {
  const uint64_t share = payload_bytes / (2 * default_snapshot_read_threads());
  uint64_t chunk = kMinSpreadChunkBytes;
  while (chunk * 2 <= share && chunk * 2 <= largest) chunk *= 2;
  return static_cast<uint32_t>(std::min<uint64_t>(chunk, largest));
}

size_t resolve_snapshot_write_threads(uint32_t requested) {
  if (requested == 0) return default_snapshot_write_threads();
  return std::min<size_t>(requested, 64);
}

size_t resolve_snapshot_read_threads(uint32_t requested) {
  if (requested == 0) return default_snapshot_read_threads();
  return std::min<size_t>(requested, 64);
}

ThreadPool& snapshot_thread_pool() {
  // Never destroyed: a reader or writer may run while static objects are torn down at exit.
  static ThreadPool* const pool =
      new ThreadPool(std::clamp<size_t>(std::thread::hardware_concurrency(), 4, 64));
  return *pool;
}

ChunkPipeline::ChunkPipeline(std::vector<std::unique_ptr<ChunkSealer>> sealers, ThreadPool& pool)
    : pool_(pool), state_(std::make_shared<State>()) {
  state_->sealers = std::move(sealers);
  MutexLock lock(state_->mutex);
  for (const std::unique_ptr<ChunkSealer>& sealer : state_->sealers) {
    state_->idle_sealers.push_back(sealer.get());
  }
}

ChunkPipeline::~ChunkPipeline() {
  MutexLock lock(state_->mutex);
  state_->stopping = true;  // queued jobs are dropped: only a failed or cancelled owner stops early
  lock.wait(state_->changed,
            [this]() SIESTA_REQUIRES(state_->mutex) { return state_->running == 0; });
}

namespace {

// How long the owner polls the oldest job before it blocks: about one small chunk's read and
// opening (256 KiB at ~3 GB/s), so that a job about to finish is retired without a wake-up.
constexpr std::chrono::microseconds kPollBeforeBlocking{60};

}  // namespace

void ChunkPipeline::submit(Job job) {
  ++pending_;
  {
    MutexLock lock(state_->mutex);
    state_->entries.emplace_back(std::move(job));
    // A task already running takes the job when its own is done, and one queued for each idle
    // sealer will come: another would only be a wake-up that finds nothing to do (on a VM a
    // woken thread can take the owner's core for a few hundred microseconds).
    if (state_->idle_sealers.size() <= state_->queued_tasks) return;
    ++state_->queued_tasks;
  }
  pool_.post([state = state_] { drain(state); });
}

void ChunkPipeline::run_next(State& state, ChunkSealer& sealer) {
  Entry& entry = state.entries[state.next_to_start++];
  // The caller's MutexLock still owns the mutex: it is let go around the job and held again
  // before returning, as the caller's lock expects.
  state.mutex.unlock();
  Status status = entry.job(sealer);
  state.mutex.lock();
  entry.status = std::move(status);
  entry.job = nullptr;  // frees what the job captured before the owner retires it
  entry.done.store(true, std::memory_order_release);
  state.changed.notify_all();
}

Status ChunkPipeline::retire(ChunkSealer* caller_sealer) {
  if (pending_ == 0) return Internal("chunk pipeline: nothing to retire");
  MutexLock lock(state_->mutex);
  // Only the owner pops entries: this reference stays valid while the lock is let go below.
  const Entry& front = state_->entries.front();
  // Lend a hand while the pool has not come for every sealer's worth of jobs.
  while (caller_sealer != nullptr && !front.done.load(std::memory_order_acquire) &&
         state_->next_to_start < state_->entries.size() &&
         state_->running < state_->sealers.size()) {
    run_next(*state_, *caller_sealer);
  }
  if (!front.done.load(std::memory_order_acquire)) {
    lock.unlock();
    const auto until = std::chrono::steady_clock::now() + kPollBeforeBlocking;
    while (!front.done.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();  // on a machine with few cores, the job's thread may need this one
    }
    lock.lock();
  }
  lock.wait(state_->changed, [&front]() { return front.done.load(std::memory_order_acquire); });
  Status status = std::move(state_->entries.front().status);
  state_->entries.pop_front();
  --state_->next_to_start;  // every entry before next_to_start was taken, the front one included
  --pending_;
  return status;
}

void ChunkPipeline::drain(const std::shared_ptr<State>& state) {
  MutexLock lock(state->mutex);
  --state->queued_tasks;
  if (state->idle_sealers.empty()) return;
  ChunkSealer* sealer = state->idle_sealers.back();
  state->idle_sealers.pop_back();
  ++state->running;
  while (!state->stopping && state->next_to_start < state->entries.size()) {
    run_next(*state, *sealer);
  }
  // Under the same lock as the check above: a job queued from here on finds this sealer idle.
  state->idle_sealers.push_back(sealer);
  --state->running;
  state->changed.notify_all();
}

}  // namespace siesta
