// MemoryBackendWrapper: a forwarding base for the MemoryBackend seam
// (core/memory/memory_backend.h), as LevelDB's EnvWrapper: every call goes to the wrapped
// backend, so a wrapper that injects faults or counts calls overrides only what it changes and
// stays correct when the seam grows.
//
// Staging buffers are the wrapped backend's own: acquire_staging() hands out the target's
// buffers, which go back to the target directly when released (StagingBuffer remembers its
// owner), so the wrapper never receives one.
//
// Ownership: the wrapper borrows its target (which must outlive it) or owns it (the unique_ptr
// constructor).
// Thread rule: as the wrapped backend's.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "core/memory/memory_backend.h"

namespace siesta {

class MemoryBackendWrapper : public MemoryBackend {
 public:
  explicit MemoryBackendWrapper(MemoryBackend& target) : target_(&target) {}
  // REQUIRES: target != nullptr.
  explicit MemoryBackendWrapper(std::unique_ptr<MemoryBackend> target)
      : owned_(std::move(target)), target_(owned_.get()) {}

  // The wrapped backend.
  MemoryBackend& target() const { return *target_; }

  std::string name() const override { return target_->name(); }
  size_t granularity() const override { return target_->granularity(); }
  Result<DeviceRange> reserve(size_t bytes) override { return target_->reserve(bytes); }
  Status commit(DeviceRange range) override { return target_->commit(range); }
  Status decommit(DeviceRange range) override { return target_->decommit(range); }
  void unreserve(DeviceRange range) override { target_->unreserve(range); }
  Status synchronize() override { return target_->synchronize(); }
  Status zero(DeviceRange range) override { return target_->zero(range); }
  size_t staging_buffer_bytes() const override { return target_->staging_buffer_bytes(); }
  size_t staging_buffer_count() const override { return target_->staging_buffer_count(); }
  Result<StagingBuffer> acquire_staging() override { return target_->acquire_staging(); }
  Result<StagingBuffer> acquire_staging_waiting(std::chrono::nanoseconds timeout) override {
    return target_->acquire_staging_waiting(timeout);
  }
  Result<CopyTicket> copy_to_staging(DeviceAddress source, size_t bytes,
                                     StagingBuffer& buffer) override {
    return target_->copy_to_staging(source, bytes, buffer);
  }
  Result<CopyTicket> copy_from_staging(const StagingBuffer& buffer, size_t bytes,
                                       DeviceAddress destination) override {
    return target_->copy_from_staging(buffer, bytes, destination);
  }
  bool copies_to_host() const override { return target_->copies_to_host(); }
  Status register_host(std::span<std::byte> memory) override {
    return target_->register_host(memory);
  }
  void unregister_host(std::byte* data) override { target_->unregister_host(data); }
  Result<CopyTicket> copy_to_host(DeviceAddress source, size_t bytes,
                                  std::byte* destination) override {
    return target_->copy_to_host(source, bytes, destination);
  }
  Result<CopyTicket> copy_from_host(const std::byte* source, size_t bytes,
                                    DeviceAddress destination) override {
    return target_->copy_from_host(source, bytes, destination);
  }
  Status wait(CopyTicket ticket) override { return target_->wait(ticket); }
  MemoryStats stats() const override { return target_->stats(); }

 private:
  // Never called: every buffer this wrapper hands out belongs to the target.
  void release_staging(uint32_t /*slot*/) override {}

  std::unique_ptr<MemoryBackend> owned_;
  MemoryBackend* target_;
};

}  // namespace siesta
