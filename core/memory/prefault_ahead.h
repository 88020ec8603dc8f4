// PrefaultAhead: maps the pages of host memory a read is about to write, on a pool thread,
// while the read does other work, so that the read's writes into it take no page fault.
//
// Why: a restore maps fresh pages for the host memory it released, and the first touch of each
// costs a fault (0.3-0.9 ms a MiB on the virtual machines measured, 2026-12-05, and on the GPU
// machine one fault after another even from many threads), more than reading the same MiB from
// the page cache. A snapshot's device chunks come before its host ones, so the host pages can
// be made present while the device chunks are read.
//
// The work is split in pieces (kPieceBytes); each is host_address_space::prefault_for_write, a
// hint whose failure changes nothing (the writes fault as they would have).
//
// Thread rule: one owner thread constructs, calls wait() and destroys it; the pool runs the
// pieces. The memory must stay mapped until the destructor returns (a piece may be running).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"
#include "core/base/thread_pool.h"

namespace siesta {

class PrefaultAhead {
 public:
  // Pieces of at most this many bytes, each one madvise call: the most the destructor waits
  // for (one piece already running) is its time, about 0.1-0.2 ms.
  static constexpr size_t kPieceBytes = size_t{256} << 10;

  // Posts one task to `pool` that prefaults `extents` in order, piece by piece, unless they
  // hold fewer than `min_bytes` in all (then nothing is posted: a pool task's wake-up costs
  // more than faulting a few pages in place).
  PrefaultAhead(ThreadPool& pool, std::vector<std::span<std::byte>> extents, size_t min_bytes);

  // Stops: a task not yet started does nothing, one running stops after its current piece,
  // which this waits for. Never waits for the pool to get to the task.
  ~PrefaultAhead();
  PrefaultAhead(const PrefaultAhead&) = delete;
  PrefaultAhead& operator=(const PrefaultAhead&) = delete;

  // Whether a task was posted.
  bool posted() const { return state_ != nullptr; }

  // Waits until the task has prefaulted every piece (for tests; a read does not wait for the
  // pages it would fault in itself). Returns at once when nothing was posted.
  void wait();

 private:
  enum class Progress { kQueued, kRunning, kDone };
  struct State {
    Mutex mu;
    std::condition_variable changed;
    Progress progress SIESTA_GUARDED_BY(mu) = Progress::kQueued;
    bool stop SIESTA_GUARDED_BY(mu) = false;
    std::vector<std::span<std::byte>> extents;  // written before the post, then read-only
  };
  static void run(State& state);

  std::shared_ptr<State> state_;  // shared with the task, which may outlive this object
};

}  // namespace siesta
