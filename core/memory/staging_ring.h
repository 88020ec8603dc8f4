// StagingRing: the bookkeeping every backend's fixed staging ring shares: which buffers
// callers hold, and which copy last used each buffer (so that giving a buffer back can wait
// for it). The backend owns the memory; the ring only lends out spans of it.
//
// Thread rule: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/base/mutex.h"
#include "core/base/thread_annotations.h"
#include "core/memory/memory_backend.h"

namespace siesta {

class StagingRing {
 public:
  // `buffers` stay owned by the backend and must outlive the ring.
  explicit StagingRing(std::vector<std::span<std::byte>> buffers);

  size_t count() const { return buffers_.size(); }
  size_t buffer_bytes() const { return buffers_.empty() ? 0 : buffers_.front().size(); }

  // Lends a buffer no caller holds. Failure: FailedPrecondition when all are held.
  Result<StagingBuffer> acquire(MemoryBackend* owner) SIESTA_EXCLUDES(mutex_);
  // As acquire(), waiting up to `timeout` for a buffer to be marked free when all are held.
  Result<StagingBuffer> acquire_waiting(MemoryBackend* owner, std::chrono::nanoseconds timeout)
      SIESTA_EXCLUDES(mutex_);

  // Records that `ticket` uses `slot`; a later give_back(slot) must wait for it.
  void note_copy(uint32_t slot, CopyTicket ticket) SIESTA_EXCLUDES(mutex_);

  // Giving a buffer back is two steps, so the backend can wait outside the ring's lock:
  // last_copy(slot) names the copy to wait for (sequence 0: none), then mark_free(slot).
  CopyTicket last_copy(uint32_t slot) SIESTA_EXCLUDES(mutex_);
  void mark_free(uint32_t slot) SIESTA_EXCLUDES(mutex_);

 private:
  // Takes the first free buffer.
  std::optional<StagingBuffer> take_locked(MemoryBackend* owner) SIESTA_REQUIRES(mutex_);
  Status all_held() const;

  const std::vector<std::span<std::byte>> buffers_;  // set once: read without the mutex
  Mutex mutex_;
  std::condition_variable freed_;  // a buffer was marked free
  std::vector<bool> held_ SIESTA_GUARDED_BY(mutex_);
  std::vector<CopyTicket> last_copy_ SIESTA_GUARDED_BY(mutex_);
};

}  // namespace siesta
