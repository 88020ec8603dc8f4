#include "core/offload/room_holders.h"

#include <algorithm>

namespace siesta {

void RoomHolders::enlist(const std::shared_ptr<RoomHolder>& holder, int64_t last_used,
                         RoomHolder::Holding holding) {
  MutexLock lock(mu_);
  for (Listed& listed : listed_) {
    if (listed.key == holder.get()) {
      listed.holder = holder;  // (a holder gone may have left its address to this one)
      listed.last_used = last_used;
      listed.holding = holding;
      return;
    }
  }
  listed_.push_back({holder.get(), holder, last_used, holding});
}

void RoomHolders::delist(const RoomHolder* holder) {
  MutexLock lock(mu_);
  std::erase_if(listed_, [&](const Listed& listed) { return listed.key == holder; });
}

size_t RoomHolders::size() const {
  MutexLock lock(mu_);
  return listed_.size();
}

bool RoomHolders::make_room(const std::function<bool()>& fits, const std::atomic<bool>* cancel,
                            RoomMade& made) {
  // The candidates, taken once: a holder that is busy or has given its room is not asked again
  // by this call.
  std::vector<Listed> candidates;
  {
    MutexLock lock(mu_);
    std::erase_if(listed_, [](const Listed& listed) { return listed.holder.expired(); });
    candidates = listed_;
  }
  // Bases first (giving one up loses nothing), then the least recently used.
  std::stable_sort(candidates.begin(), candidates.end(), [](const Listed& a, const Listed& b) {
    const bool a_base = a.holding == RoomHolder::Holding::kBaseOfResidentCopy;
    const bool b_base = b.holding == RoomHolder::Holding::kBaseOfResidentCopy;
    if (a_base != b_base) return a_base;
    return a.last_used < b.last_used;
  });
  for (const Listed& candidate : candidates) {
    if (fits()) return true;
    if (cancel != nullptr && cancel->load(std::memory_order_acquire)) return false;
    std::shared_ptr<RoomHolder> holder = candidate.holder.lock();
    if (holder == nullptr) continue;
    const Result<RoomHolder::Freed> freed = holder->give_room(cancel);
    if (freed.ok()) {
      switch (*freed) {
        case RoomHolder::Freed::kMoved: ++made.moved; break;
        case RoomHolder::Freed::kBaseDropped: ++made.bases_dropped; break;
        case RoomHolder::Freed::kDeleted: ++made.deleted; break;
      }
      continue;
    }
    const StatusCode code = freed.status().code();
    if (code != StatusCode::kNotFound && code != StatusCode::kFailedPrecondition &&
        code != StatusCode::kCancelled) {
      ++made.failures;
      return false;
    }
  }
  return fits();
}

}  // namespace siesta
