#include "core/memory/staging_ring.h"

#include <string>

namespace siesta {

StagingRing::StagingRing(std::vector<std::span<std::byte>> buffers)
    : buffers_(std::move(buffers)), held_(buffers_.size(), false), last_copy_(buffers_.size()) {}

Result<StagingBuffer> StagingRing::acquire(MemoryBackend* owner) {
  std::lock_guard lock(mutex_);
  for (uint32_t slot = 0; slot < buffers_.size(); ++slot) {
    if (!held_[slot]) {
      held_[slot] = true;
      return StagingBuffer(owner, slot, buffers_[slot]);
    }
  }
  return FailedPrecondition("all " + std::to_string(buffers_.size()) +
                            " staging buffers are held; give one back before taking another");
}

void StagingRing::note_copy(uint32_t slot, CopyTicket ticket) {
  std::lock_guard lock(mutex_);
  last_copy_[slot] = ticket;
}

CopyTicket StagingRing::last_copy(uint32_t slot) {
  std::lock_guard lock(mutex_);
  return last_copy_[slot];
}

void StagingRing::mark_free(uint32_t slot) {
  std::lock_guard lock(mutex_);
  held_[slot] = false;
  last_copy_[slot] = CopyTicket{};
}

}  // namespace siesta
