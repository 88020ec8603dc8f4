// HookedBackend: wraps any MemoryBackend and calls a hook around every decommit(), so that a
// test can act in the middle of a release (a command arrives, status() is asked) and a
// benchmark can see when a release runs. Everything else is forwarded unchanged.
//
// Thread rule: as the inner backend. The hooks are set before the backend is shared and run
// on the thread that calls decommit(); they must not call decommit() themselves.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "core/memory/memory_backend.h"

namespace siesta {

class HookedBackend final : public MemoryBackend {
 public:
  using Hook = std::function<void(DeviceRange range)>;

  // Borrows `inner`, which must outlive the wrapper.
  explicit HookedBackend(MemoryBackend& inner) : inner_(inner) {}

  // Called just before / just after each decommit is forwarded. Empty: nothing.
  void set_decommit_hooks(Hook before, Hook after) {
    before_decommit_ = std::move(before);
    after_decommit_ = std::move(after);
  }

  std::string name() const override { return inner_.name(); }
  size_t granularity() const override { return inner_.granularity(); }
  Result<DeviceRange> reserve(size_t bytes) override { return inner_.reserve(bytes); }
  Status commit(DeviceRange range) override { return inner_.commit(range); }
  Status decommit(DeviceRange range) override {
    if (before_decommit_) before_decommit_(range);
    Status done = inner_.decommit(range);
    if (after_decommit_) after_decommit_(range);
    return done;
  }
  void unreserve(DeviceRange range) override { inner_.unreserve(range); }
  Status synchronize() override { return inner_.synchronize(); }
  Status zero(DeviceRange range) override { return inner_.zero(range); }
  size_t staging_buffer_bytes() const override { return inner_.staging_buffer_bytes(); }
  size_t staging_buffer_count() const override { return inner_.staging_buffer_count(); }
  Result<StagingBuffer> acquire_staging() override { return inner_.acquire_staging(); }
  Result<StagingBuffer> acquire_staging_waiting(std::chrono::nanoseconds timeout) override {
    return inner_.acquire_staging_waiting(timeout);
  }
  Result<CopyTicket> copy_to_staging(DeviceAddress source, size_t bytes,
                                     StagingBuffer& buffer) override {
    return inner_.copy_to_staging(source, bytes, buffer);
  }
  Result<CopyTicket> copy_from_staging(const StagingBuffer& buffer, size_t bytes,
                                       DeviceAddress destination) override {
    return inner_.copy_from_staging(buffer, bytes, destination);
  }
  bool copies_to_host() const override { return inner_.copies_to_host(); }
  Status register_host(std::span<std::byte> memory) override {
    return inner_.register_host(memory);
  }
  void unregister_host(std::byte* data) override { inner_.unregister_host(data); }
  Result<CopyTicket> copy_to_host(DeviceAddress source, size_t bytes,
                                  std::byte* destination) override {
    return inner_.copy_to_host(source, bytes, destination);
  }
  Result<CopyTicket> copy_from_host(const std::byte* source, size_t bytes,
                                    DeviceAddress destination) override {
    return inner_.copy_from_host(source, bytes, destination);
  }
  Status wait(CopyTicket ticket) override { return inner_.wait(ticket); }
  MemoryStats stats() const override { return inner_.stats(); }

 private:
  // Buffers come from the inner backend's ring and go back to it directly (StagingBuffer
  // remembers its owner), so the wrapper never receives one.
  void release_staging(uint32_t /*slot*/) override {}

  MemoryBackend& inner_;
  Hook before_decommit_;
  Hook after_decommit_;
};

}  // namespace siesta
