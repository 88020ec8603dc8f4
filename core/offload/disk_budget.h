// DiskBudget: the bytes the snapshot directory may hold (--cache-disk-max-mib), shared by every
// session of the process. Every byte this process puts there is covered by a Space: a save
// reserves its file's exact size before writing a byte (reserve()), each session's Space then
// follows the files its chain holds, and a retired file keeps its Space until it is unlinked.
// So the directory never holds more than the budget on this process's account.
//
// When a reservation does not fit, make_room deletes the snapshots of the least recently used
// conversations whose memory is released (RoomHolders' order; each such Offloader lists itself
// while it is in the `disk` state): they start afresh at their next request, reading their
// prompt again, never a wrong answer. A resident conversation's files (the base of its next
// delta) are not deleted for room: there are at most --parallel of them.
//
// Thread rule: every member is thread-safe (one mutex for the accounting, never held while a
// holder deletes); a Space may be used and destroyed on any thread, one at a time.
// REQUIRES: the budget outlives every Space it handed out.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/offload/room_holders.h"

namespace siesta {

struct DiskBudgetStats {
  uint64_t budget_bytes = 0;
  uint64_t used_bytes = 0;        // covered by live Spaces: files, and files being written
  uint64_t deleted_for_room = 0;  // conversations whose snapshot make_room deleted
  uint64_t delete_failures = 0;   // deletions for room that failed (the files stayed)
  uint64_t refused = 0;           // reservations that did not fit even after making room
};

class DiskBudget {
 public:
  // Bytes on the budget's account, given back when destroyed. Move-only; empty by default.
  class Space {
   public:
    Space() = default;
    Space(Space&& other) noexcept { *this = std::move(other); }
    Space& operator=(Space&& other) noexcept;
    Space(const Space&) = delete;
    Space& operator=(const Space&) = delete;
    ~Space() { set(0); }

    uint64_t bytes() const { return bytes_; }
    // Accounts `bytes` now (the files it covers are what they are: not checked against the
    // budget). A Space that belongs to no budget ignores it.
    void set(uint64_t bytes);
    // Moves `bytes` (at most bytes()) out into a new Space of the same budget.
    Space split(uint64_t bytes);

   private:
    friend class DiskBudget;
    Space(DiskBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    DiskBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  explicit DiskBudget(uint64_t budget_bytes) : budget_(budget_bytes) {}
  DiskBudget(const DiskBudget&) = delete;
  DiskBudget& operator=(const DiskBudget&) = delete;

  // Room for a file of `bytes` about to be written. When the rest of the budget is short, the
  // listed holders' snapshots are deleted first (on this thread), least recently used first.
  // Success: a Space of `bytes`. Failure (nothing charged): NoSpace when `bytes` exceed the
  // whole budget, or no room could be made (nobody left, a deletion failed, `cancel` raised).
  Result<Space> reserve(uint64_t bytes, const std::atomic<bool>* cancel);
  // Room for files that exist already (a snapshot adopted after a restart), only if the rest
  // of the budget holds them: nothing is deleted for it. Failure: NoSpace (nothing charged).
  Result<Space> reserve_free(uint64_t bytes);
  // An empty Space of this budget, for a session's files (Space::set as they change).
  Space space() { return Space(this, 0); }

  // The conversations whose snapshots may be deleted for room (RoomHolders).
  RoomHolders& holders() { return holders_; }

  DiskBudgetStats stats() const;
  uint64_t budget_bytes() const { return budget_; }

 private:
  bool fits(uint64_t bytes) const;
  void adjust(uint64_t from, uint64_t to);

  const uint64_t budget_;
  RoomHolders holders_;
  mutable Mutex mu_;
  uint64_t used_ SIESTA_GUARDED_BY(mu_) = 0;
  uint64_t deleted_for_room_ SIESTA_GUARDED_BY(mu_) = 0;
  uint64_t delete_failures_ SIESTA_GUARDED_BY(mu_) = 0;
  uint64_t refused_ SIESTA_GUARDED_BY(mu_) = 0;
};

// The server's default budget: half of `free_bytes`, the filesystem's free space at start, in
// whole MiB (at least 1 MiB).
uint64_t default_disk_budget_bytes(uint64_t free_bytes);

}  // namespace siesta
