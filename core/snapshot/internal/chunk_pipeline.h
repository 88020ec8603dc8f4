// ChunkPipeline: runs the sealing (writer) or verifying (reader) of snapshot chunks on a few
// worker threads and hands the results back in the order the jobs were submitted.
//
// Chunks are independent: each one's seal binds the file id, the header digest, its own chunk
// header and its index (docs/SNAPSHOT_FORMAT.md), so any thread may seal or open any chunk.
// What must stay ordered -- pwrite/pread on the one file handle, device copies, and which
// failure is reported -- stays on the thread that owns the pipeline; it submits jobs in file
// order and retires them in the same order, so "the first failure in file order" is simply the
// first failed job it retires.
//
// Each worker owns one ChunkSealer (a sealer is used by one thread at a time). When no thread
// can be started (std::system_error), the pipeline runs every job on the owner's thread inside
// submit(), with the first sealer: slower, never wrong.
//
// Thread rule: submit(), retire() and pending() are called by the owning thread only. A job may
// touch only the memory its submitter gave it, and the owner must not touch that memory again
// until it has retired the job (or destroyed the pipeline). The destructor drops jobs not yet
// started, waits for the running ones and joins every worker: destroy the pipeline before the
// buffers its jobs use (declare it after them).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "core/snapshot/chunk_sealer.h"

namespace siesta {

// The default thread count for snapshot reads and writes: min(4, hardware threads), at least
// 1. Past 4 the file and the device copies, which stay on one thread, are the limit.
size_t default_snapshot_threads();

// `requested` threads, or default_snapshot_threads() for 0; at most 64.
size_t resolve_snapshot_threads(uint32_t requested);

class ChunkPipeline {
 public:
  using Job = std::function<Status(ChunkSealer&)>;

  // Starts one worker per sealer. REQUIRES: !sealers.empty(), no null sealer.
  explicit ChunkPipeline(std::vector<std::unique_ptr<ChunkSealer>> sealers);
  ~ChunkPipeline();
  ChunkPipeline(const ChunkPipeline&) = delete;
  ChunkPipeline& operator=(const ChunkPipeline&) = delete;

  // Queues `job`; some worker runs it with its own sealer (inline mode: runs it now).
  void submit(Job job);

  // Waits for the oldest job not yet retired and returns its status.
  // REQUIRES: pending() > 0 (else Internal).
  Status retire();

  // Jobs submitted and not yet retired (queued, running or finished).
  size_t pending() const { return pending_; }

  // Worker threads running (0: inline mode).
  size_t threads() const { return workers_.size(); }

 private:
  struct Entry {
    Job job;
    Status status;
    bool done = false;
  };

  void work(size_t worker);

  std::vector<std::unique_ptr<ChunkSealer>> sealers_;
  size_t pending_ = 0;  // owner's thread only

  std::mutex mutex_;
  std::condition_variable work_ready_;  // a job was queued, or the pipeline is stopping
  std::condition_variable job_done_;    // some job finished
  // Guarded by mutex_. Entries are popped only when done, and std::deque keeps references to
  // the other elements valid across push_back / pop_front, so a worker runs its entry's job
  // outside the lock.
  std::deque<Entry> entries_;
  size_t next_to_start_ = 0;  // index into entries_ of the first job no worker has taken
  bool stopping_ = false;

  std::vector<std::thread> workers_;  // last: started after everything above exists
};

// How many chunks a reader or writer keeps in flight, and how many staging buffers it may hold
// at once. One chunk per sealing thread plus one being copied; with a backend, at least one per
// staging buffer it lends, so device copies overlap the file's I/O, and never more staging
// buffers held than it lends (at least one). staging_limit is 0 without a backend (no copies).
struct ChunkWindow {
  size_t slots = 0;
  size_t staging_limit = 0;
};
inline ChunkWindow chunk_window(size_t threads, const MemoryBackend* backend) {
  ChunkWindow window{threads + 1, 0};
  if (backend != nullptr) {
    window.staging_limit = std::max<size_t>(1, backend->staging_buffer_count());
    window.slots = std::max(window.slots, window.staging_limit);
  }
  return window;
}

}  // namespace siesta
