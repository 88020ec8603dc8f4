// CudaVmmBackend: the MemoryBackend on the CUDA driver's virtual memory management API.
//
//   reserve   cuMemAddressReserve
//   commit    per chunk (large chunks: on the H200 2 MiB chunks cost ~26 ms/GiB to commit
//             and 1 GiB chunks ~0.14 ms/GiB): cuMemCreate, cuMemMap, cuMemSetAccess;
//             any failure unmaps and releases every chunk of the call (rollback)
//   decommit  cuCtxSynchronize, then cuMemUnmap + cuMemRelease per chunk
//   copies    cuMemcpy{DtoH,HtoD}Async on a dedicated non-blocking copy stream through a ring
//             of pinned host buffers allocated once at creation (cuMemHostAlloc); each copy
//             records an event from a small pool, and wait() synchronises on it
//   zero      cuMemsetD8Async on the copy stream
//   stats     reserved/committed bytes as counted, device free/total from cuMemGetInfo
//
// Every precondition of MemoryBackend is checked before anything reaches the driver, so
// misuse returns FailedPrecondition / InvalidArgument and never poisons the CUDA context.
// The driver (libcuda.so.1) is loaded at run time, so binaries built with this backend run,
// and say why CUDA is unavailable, on machines without a GPU.
// Thread rule: every method may be called from any thread; each call makes the device's
// primary context current on the calling thread for its duration (pushed, then popped, so
// the caller's own current context is left as it was).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/memory/commit_fault_hook.h"
#include "core/memory/memory_backend.h"

namespace siesta {

struct CudaVmmOptions {
  int device_ordinal = 0;
  size_t max_chunk_bytes = 1u << 30;  // largest physical chunk one commit creates
  // The staging ring: 256 MiB pinned once, in 16 buffers, so that a restore reading on up to
  // 16 threads has a buffer for each chunk in flight (a chunk is 4 MiB; on the H100 machine,
  // 4 x 64 MiB held a 1 GiB restore to 10.6 GB/s, 16 x 16 MiB let it reach 30.6 on 12 threads).
  size_t staging_buffer_bytes = 16u << 20;  // each pinned buffer of the staging ring
  size_t staging_buffer_count = 16;
  CommitFaultHook commit_fault_hook;  // tests only
};

class CudaVmmBackend final : public MemoryBackend {
 public:
  // Loads the driver, retains the device's primary context, checks VMM support, creates the
  // copy stream and pins the staging ring.
  // Failure: NotFound when no driver or no device is present (the message says which),
  // Unsupported when the device lacks virtual memory management, OutOfMemory when the
  // staging ring cannot be pinned, DeviceError for any other driver failure.
  static Result<std::unique_ptr<CudaVmmBackend>> create(CudaVmmOptions options = {});

  // Why CUDA cannot be used here ("no CUDA driver: libcuda.so.1 not found"), or "" when a
  // device with VMM support is present. Cheap enough to call before create().
  static std::string unavailable_reason(int device_ordinal = 0);

  // Waits for all device work, then unmaps and releases everything still committed, frees
  // every reservation, the copy stream, events and staging ring, and releases the context.
  // REQUIRES: every StagingBuffer has been given back.
  ~CudaVmmBackend() override;

  std::string name() const override;
  size_t granularity() const override;
  Result<DeviceRange> reserve(size_t bytes) override;
  Status commit(DeviceRange range) override;
  Status decommit(DeviceRange range) override;
  void unreserve(DeviceRange range) override;
  Status synchronize() override;
  Status zero(DeviceRange range) override;
  size_t staging_buffer_bytes() const override;
  size_t staging_buffer_count() const override;
  Result<StagingBuffer> acquire_staging() override;
  Result<StagingBuffer> acquire_staging_waiting(std::chrono::nanoseconds timeout) override;
  Result<CopyTicket> copy_to_staging(DeviceAddress source, size_t bytes,
                                     StagingBuffer& buffer) override;
  Result<CopyTicket> copy_from_staging(const StagingBuffer& buffer, size_t bytes,
                                       DeviceAddress destination) override;
  bool copies_to_host() const override { return true; }
  Status register_host(std::span<std::byte> memory) override;
  void unregister_host(std::byte* data) override;
  Result<CopyTicket> copy_to_host(DeviceAddress source, size_t bytes,
                                  std::byte* destination) override;
  Result<CopyTicket> copy_from_host(const std::byte* source, size_t bytes,
                                    DeviceAddress destination) override;
  Status wait(CopyTicket ticket) override;
  MemoryStats stats() const override;

 private:
  struct Impl;
  explicit CudaVmmBackend(std::unique_ptr<Impl> impl);
  void release_staging(uint32_t slot) override;
  std::unique_ptr<Impl> impl_;
};

}  // namespace siesta
