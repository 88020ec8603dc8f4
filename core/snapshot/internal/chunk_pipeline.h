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
#include <thread>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/memory/memory_backend.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_threads.h"  // how many workers: defined in chunk_pipeline.cc

namespace siesta {

class ChunkPipeline {
 public:
  using Job = std::function<Status(ChunkSealer&)>;

  // Starts one worker per sealer. REQUIRES: !sealers.empty(), no null sealer.
  explicit ChunkPipeline(std::vector<std::unique_ptr<ChunkSealer>> sealers);
  ~ChunkPipeline();
  ChunkPipeline(const ChunkPipeline&) = delete;
  ChunkPipeline& operator=(const ChunkPipeline&) = delete;

  // Queues `job`; some worker runs it with its own sealer (inline mode: runs it now).
  void submit(Job job) SIESTA_EXCLUDES(mutex_);

  // Waits for the oldest job not yet retired and returns its status.
  // REQUIRES: pending() > 0 (else Internal).
  Status retire() SIESTA_EXCLUDES(mutex_);

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

  // A worker thread: runs each job it takes without the mutex.
  void work(size_t worker) SIESTA_EXCLUDES(mutex_);

  std::vector<std::unique_ptr<ChunkSealer>> sealers_;
  size_t pending_ = 0;  // owner's thread only

  Mutex mutex_;
  std::condition_variable work_ready_;  // a job was queued, or the pipeline is stopping
  std::condition_variable job_done_;    // some job finished
  // Entries are popped only when done, and std::deque keeps references to the other elements
  // valid across push_back / pop_front, so a worker runs its entry's job outside the lock (the
  // entry is the worker's from when it took it until it marks it done).
  std::deque<Entry> entries_ SIESTA_GUARDED_BY(mutex_);
  // Index into entries_ of the first job no worker has taken.
  size_t next_to_start_ SIESTA_GUARDED_BY(mutex_) = 0;
  bool stopping_ SIESTA_GUARDED_BY(mutex_) = false;

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
