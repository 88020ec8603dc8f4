// RoomHolders: the sessions holding room in a bounded store of snapshots (the RAM tier, the
// disk budget), and the order in which they are asked to give it back when a save needs it.
// One rule for both: copies that only serve as a resident session's next delta go first
// (giving one up loses nothing), then the least recently used sessions' copies. What giving
// room back means is the holder's: the RAM tier's holders spill to disk, the disk budget's
// delete their snapshot (the conversation reads its prompt again).
//
// Thread rule: every member is thread-safe; the roster's mutex is held only for the list,
// never while a holder gives room back (a holder may take its own locks, and list or delist
// itself, from inside give_room()).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/status.h"
#include "core/base/thread_annotations.h"

namespace siesta {

// A session's hold on room in a bounded store.
class RoomHolder {
 public:
  // What the listed copy is to its session.
  enum class Holding : uint8_t {
    kOnlyCopy,            // the session is released: the copy is where its history is
    kBaseOfResidentCopy,  // the session is resident: the copy only serves its next delta
  };
  // How give_room() gave the room back.
  enum class Freed : uint8_t {
    kMoved,        // the copy went to the next store down (a spill to disk), nothing lost
    kBaseDropped,  // a resident session's base was given up (its memory holds every byte)
    kDeleted,      // the copy was deleted: the session starts afresh at its next request
  };
  virtual ~RoomHolder() = default;
  // Gives the holder's room back. `requester_cancel` (may be null): raised when the save that
  // needs the room is cancelled; a long give-back then stops at its next step.
  // Success: how. NotFound: the holder holds nothing now. FailedPrecondition: its copy is in
  // use (being saved over, restored, spilled): try another. Cancelled: stopped; the copy
  // stays. Any other failure: the give-back's own (a write, a delete); the copy stays.
  // Thread rule: any thread; never called with the roster's mutex held.
  virtual Result<Freed> give_room(const std::atomic<bool>* requester_cancel) = 0;
};

// What make_room() got back, and what failed.
struct RoomMade {
  uint64_t moved = 0;
  uint64_t bases_dropped = 0;
  uint64_t deleted = 0;
  uint64_t failures = 0;  // give-backs that failed (at most 1: the first stops the call)
};

class RoomHolders {
 public:
  // Lists `holder` as holding room last used at `last_used` (any count that grows with time),
  // replacing an earlier listing of the same holder.
  void enlist(const std::shared_ptr<RoomHolder>& holder, int64_t last_used,
              RoomHolder::Holding holding = RoomHolder::Holding::kOnlyCopy);
  // Takes `holder` off the list; nothing when it is not listed.
  void delist(const RoomHolder* holder);
  // Asks listed holders for their room, bases first, then the least recently used, until
  // `fits()` says the requester fits. Stops at the first give-back that fails (a broken disk
  // is not tried once per holder), when `cancel` (may be null) is raised, or when nobody is
  // left; each holder is asked at most once per call. Returns the last `fits()`, and adds to
  // `made` what was given back. Runs the give-backs on the caller's thread.
  bool make_room(const std::function<bool()>& fits, const std::atomic<bool>* cancel,
                 RoomMade& made);
  size_t size() const;

 private:
  struct Listed {
    const RoomHolder* key = nullptr;
    std::weak_ptr<RoomHolder> holder;
    int64_t last_used = 0;
    RoomHolder::Holding holding = RoomHolder::Holding::kOnlyCopy;
  };
  mutable Mutex mu_;
  std::vector<Listed> listed_ SIESTA_GUARDED_BY(mu_);
};

}  // namespace siesta
