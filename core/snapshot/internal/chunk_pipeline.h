// ChunkPipeline: runs the sealing (writer) or verifying (reader) of snapshot chunks on the
// process's kept snapshot threads (snapshot_thread_pool()) and hands the results back in the
// order the jobs were submitted.
//
// Chunks are independent: each one's seal binds the file id, the header digest, its own chunk
// header and its index (docs/SNAPSHOT_FORMAT.md), so any thread may seal or open any chunk.
// What must stay ordered -- pwrite/pread on the one file handle, device copies, and which
// failure is reported -- stays on the thread that owns the pipeline; it submits jobs in file
// order and retires them in the same order, so "the first failure in file order" is simply the
// first failed job it retires.
//
// The pipeline owns its sealers (a sealer is used by one thread at a time): at most that many
// of its jobs run at once, on whichever of the pool's threads take them; the threads are the
// pool's, kept for the process's life, so a pipeline starts none (starting four cost 0.5-1.3 ms
// per snapshot, more than a small one's whole restore). A pool without threads runs every job
// on the owner's thread inside submit(): slower, never wrong.
//
// Waiting for the oldest job, the owner does not go to sleep at once: given a sealer of its own,
// it first runs jobs the pool has not come for yet (while fewer of the pipeline's jobs run than
// it has sealers: the pool's threads are still waking, or busy with another pipeline's jobs),
// then polls the oldest job for a few tens of microseconds before it blocks. A small restore is
// over in about a millisecond; a sleeping thread's wake-up, paid once per retired job, was a
// large part of that (docs/PERFORMANCE.md, "The disk tier at its defaults").
//
// Thread rule: submit(), retire() and pending() are called by the owning thread only. A job may
// touch only the memory its submitter gave it, and the owner must not touch that memory again
// until it has retired the job (or destroyed the pipeline). The destructor drops jobs not yet
// started and waits for the running ones (never for other pipelines' jobs queued in the pool):
// destroy the pipeline before the buffers its jobs use (declare it after them).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/base/thread_pool.h"
#include "core/memory/memory_backend.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_threads.h"  // how many workers: defined in chunk_pipeline.cc

namespace siesta {

// The process's snapshot threads, started at first use and kept: as many as the machine has
// hardware threads, at least 4 and at most 64 (every reader's and writer's jobs share them).
ThreadPool& snapshot_thread_pool();

class ChunkPipeline {
 public:
  using Job = std::function<Status(ChunkSealer&)>;

  // Runs up to sealers.size() jobs at once on `pool`'s threads.
  // REQUIRES: !sealers.empty(), no null sealer; `pool` outlives the pipeline.
  explicit ChunkPipeline(std::vector<std::unique_ptr<ChunkSealer>> sealers,
                         ThreadPool& pool = snapshot_thread_pool());
  ~ChunkPipeline();
  ChunkPipeline(const ChunkPipeline&) = delete;
  ChunkPipeline& operator=(const ChunkPipeline&) = delete;

  // Queues `job`; a pool thread runs it with one of the pipeline's sealers (a pool without
  // threads: runs it now).
  void submit(Job job);

  // Waits for the oldest job not yet retired and returns its status. With `caller_sealer`, the
  // calling thread runs jobs no pool thread has taken while it waits (above); the sealer is
  // used on this thread only and only inside this call.
  // REQUIRES: pending() > 0 (else Internal).
  Status retire(ChunkSealer* caller_sealer = nullptr);

  // Jobs submitted and not yet retired (queued, running or finished).
  size_t pending() const { return pending_; }

  // Jobs that may run at once (its sealers), or 0 when the pool runs them inline.
  size_t threads() const { return pool_.threads() == 0 ? 0 : state_->sealers.size(); }

 private:
  struct Entry {
    explicit Entry(Job j) : job(std::move(j)) {}
    Job job;
    Status status;
    // Set (release) after `status`, under the mutex, by whoever ran the job; the owner may poll
    // it without the mutex (acquire) before it blocks. The deque never moves an entry.
    std::atomic<bool> done{false};
  };
  // Shared with the tasks posted to the pool: a task still queued when the pipeline is gone
  // finds `stopping` and returns.
  struct State {
    std::vector<std::unique_ptr<ChunkSealer>> sealers;
    Mutex mutex;
    std::condition_variable changed;  // a job finished, or a task stopped running jobs
    std::vector<ChunkSealer*> idle_sealers SIESTA_GUARDED_BY(mutex);
    // Entries are popped only when done, and std::deque keeps references to the other elements
    // valid across push_back / pop_front, so a task runs its entry's job outside the lock (the
    // entry is the task's from when it took it until it marks it done).
    std::deque<Entry> entries SIESTA_GUARDED_BY(mutex);
    // Index into entries of the first job no task has taken.
    size_t next_to_start SIESTA_GUARDED_BY(mutex) = 0;
    size_t running SIESTA_GUARDED_BY(mutex) = 0;       // tasks holding a sealer
    size_t queued_tasks SIESTA_GUARDED_BY(mutex) = 0;  // posted to the pool, not yet started
    bool stopping SIESTA_GUARDED_BY(mutex) = false;
  };

  // A pool task: with an idle sealer, runs queued jobs until none is left (or stopping); with
  // none, returns (the tasks holding the sealers take the job when theirs are done).
  static void drain(const std::shared_ptr<State>& state);
  // Runs entries[next_to_start] on the calling thread with `sealer` and marks it done.
  // REQUIRES: state.mutex held (by the caller's MutexLock), an entry not yet taken exists.
  // Lets the mutex go while the job runs; holds it again on return.
  static void run_next(State& state, ChunkSealer& sealer) SIESTA_REQUIRES(state.mutex);

  ThreadPool& pool_;
  const std::shared_ptr<State> state_;
  size_t pending_ = 0;  // owner's thread only
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
