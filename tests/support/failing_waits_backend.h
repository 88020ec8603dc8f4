// FailingWaitsBackend: forwards everything to the wrapped MemoryBackend, except that wait()
// fails with DeviceError ("injected ...") on call `nth` (counted from 1; 0: never) after the
// copy itself has been waited for, as a copy the device could not finish would; and, when
// asked, it reports an empty staging ring (staging_buffer_bytes() 0, a misconfigured backend).
// FaultyBackend's kCopyFails refuses a copy when it is enqueued; this is the other half, a
// copy that fails when it is waited for.
//
// Thread rule: as the wrapped backend's (the count is atomic).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/memory/memory_backend_wrapper.h"

namespace siesta::test_util {

class FailingWaitsBackend final : public MemoryBackendWrapper {
 public:
  FailingWaitsBackend(MemoryBackend& target, uint64_t nth, bool no_staging = false)
      : MemoryBackendWrapper(target), nth_(nth), no_staging_(no_staging) {}
  size_t staging_buffer_bytes() const override {
    return no_staging_ ? 0 : target().staging_buffer_bytes();
  }
  Status wait(CopyTicket ticket) override {
    Status waited = target().wait(ticket);
    if (++waits_ == nth_) return DeviceError("injected: wait " + std::to_string(nth_) + " fails");
    return waited;
  }
  uint64_t waits() const { return waits_.load(); }

 private:
  const uint64_t nth_;
  const bool no_staging_;
  std::atomic<uint64_t> waits_{0};
};

}  // namespace siesta::test_util
