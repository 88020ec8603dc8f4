// StagingRing: the bookkeeping every backend's fixed staging ring shares: which buffers
// callers hold, and which copy last used each buffer (so that giving a buffer back can wait
// for it). The backend owns the memory; the ring only lends out spans of it.
//
// Thread rule: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "core/memory/memory_backend.h"

namespace siesta {

class StagingRing {
 public:
  // `buffers` stay owned by the backend and must outlive the ring.
  explicit StagingRing(std::vector<std::span<std::byte>> buffers);

  size_t count() const { return buffers_.size(); }
  size_t buffer_bytes() const { return buffers_.empty() ? 0 : buffers_.front().size(); }

  // Lends a buffer no caller holds. Failure: FailedPrecondition when all are held.
  Result<StagingBuffer> acquire(MemoryBackend* owner);
  // As acquire(), waiting up to `timeout` for a buffer to be marked free when all are held.
  Result<StagingBuffer> acquire_waiting(MemoryBackend* owner, std::chrono::nanoseconds timeout);

  // Records that `ticket` uses `slot`; a later give_back(slot) must wait for it.
  void note_copy(uint32_t slot, CopyTicket ticket);

  // Giving a buffer back is two steps, so the backend can wait outside the ring's lock:
  // last_copy(slot) names the copy to wait for (sequence 0: none), then mark_free(slot).
  CopyTicket last_copy(uint32_t slot);
  void mark_free(uint32_t slot);

 private:
  // Takes the first free buffer. REQUIRES: mutex_ held.
  std::optional<StagingBuffer> take_locked(MemoryBackend* owner);
  Status all_held() const;

  std::mutex mutex_;
  std::condition_variable freed_;  // a buffer was marked free
  std::vector<std::span<std::byte>> buffers_;
  std::vector<bool> held_;
  std::vector<CopyTicket> last_copy_;
};

}  // namespace siesta
