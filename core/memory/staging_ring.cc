#include "core/memory/staging_ring.h"

#include <string>

namespace siesta {

StagingRing::StagingRing(std::vector<std::span<std::byte>> buffers)
    : buffers_(std::move(buffers)), held_(buffers_.size(), false), last_copy_(buffers_.size()) {}

std::optional<StagingBuffer> StagingRing::take_locked(MemoryBackend* owner) {
  for (uint32_t slot = 0; slot < buffers_.size(); ++slot) {
    if (!held_[slot]) {
      held_[slot] = true;
      return StagingBuffer(owner, slot, buffers_[slot]);
    }
  }
  return std::nullopt;
}

Status StagingRing::all_held() const {
  return FailedPrecondition("all " + std::to_string(buffers_.size()) +
                            " staging buffers are held; give one back before taking another");
}

Result<StagingBuffer> StagingRing::acquire(MemoryBackend* owner) {
  MutexLock lock(mutex_);
  if (std::optional<StagingBuffer> taken = take_locked(owner)) return std::move(*taken);
  return all_held();
}

Result<StagingBuffer> StagingRing::acquire_waiting(MemoryBackend* owner,
                                                   std::chrono::nanoseconds timeout) {
  MutexLock lock(mutex_);
  std::optional<StagingBuffer> taken;
  lock.wait_for(freed_, timeout, [&]() SIESTA_REQUIRES(mutex_) {
    taken = take_locked(owner);
    return taken.has_value();
  });
  if (taken) return std::move(*taken);
  return all_held();
}

void StagingRing::note_copy(uint32_t slot, CopyTicket ticket) {
  MutexLock lock(mutex_);
  last_copy_[slot] = ticket;
}

CopyTicket StagingRing::last_copy(uint32_t slot) {
  MutexLock lock(mutex_);
  return last_copy_[slot];
}

void StagingRing::mark_free(uint32_t slot) {
  MutexLock lock(mutex_);
  held_[slot] = false;
  last_copy_[slot] = CopyTicket{};
  freed_.notify_all();
}

}  // namespace siesta
