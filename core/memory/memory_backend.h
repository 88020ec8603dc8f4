// MemoryBackend: the seam between the offload logic and a device's memory.
//
// A backend hands out address ranges that stay reserved for the life of a session, and
// lets physical memory come and go underneath them: `commit` puts fresh memory at exactly
// the reserved address, `decommit` gives it back while the address stays reserved. This is
// what lets a restored session keep every stored pointer and captured CUDA graph valid.
//
// Implementations: CudaVmmBackend (backends/cuda_vmm, the CUDA driver VMM API),
// SimBackend (backends/sim, host virtual memory), FaultyBackend (core, wraps either and
// injects failures). One conformance suite (tests/support/backend_conformance.h) holds
// them all to this contract.
//
// Thread rule: every method may be called from any thread; a backend serialises
// internally what must be serialised. A StagingBuffer is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace siesta {

// A device address: a CUdeviceptr on CUDA, a host pointer value on the simulator.
using DeviceAddress = uint64_t;

struct DeviceRange {
  DeviceAddress base = 0;
  size_t size = 0;

  DeviceAddress end() const { return base + size; }
  bool empty() const { return size == 0; }
  bool contains(DeviceRange other) const {
    return other.base >= base && other.end() <= end() && other.base <= other.end();
  }
  bool overlaps(DeviceRange other) const { return base < other.end() && other.base < end(); }
  // REQUIRES: offset + length <= size.
  DeviceRange subrange(size_t offset, size_t length) const { return {base + offset, length}; }
  friend bool operator==(const DeviceRange&, const DeviceRange&) = default;
};

// What the backend holds, as the device sees it. `device_*` figures come from the device
// itself (cuMemGetInfo on CUDA; capacity minus everything committed on the simulator),
// so a test can tell what was really released, not what the code intended (a system that
// reported its intent freed 6 GB of a claimed 20).
struct MemoryStats {
  uint64_t reserved_bytes = 0;      // address space held by live reservations
  uint64_t committed_bytes = 0;     // physical memory this backend has mapped
  uint64_t device_total_bytes = 0;  // the device's memory, as it reports it
  uint64_t device_free_bytes = 0;   // free device memory now, as it reports it
};

// Identifies one enqueued copy. Tickets of one backend complete in submission order.
struct CopyTicket {
  uint64_t sequence = 0;
};

class MemoryBackend;

// One pinned host buffer of the backend's fixed staging ring, lent to one caller.
// Move-only; destruction returns the buffer to the ring (waiting for any copy still
// using it). Buffers are pinned once, when the backend is created, never at offload time
// (pinning on demand is what made other systems slow: 8 GiB took 4.45 s on the H200 machine).
class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(MemoryBackend* owner, uint32_t slot, std::span<std::byte> bytes)
      : owner_(owner), slot_(slot), bytes_(bytes) {}
  StagingBuffer(StagingBuffer&& other) noexcept { *this = std::move(other); }
  StagingBuffer& operator=(StagingBuffer&& other) noexcept;
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  ~StagingBuffer() { reset(); }

  bool valid() const { return owner_ != nullptr; }
  uint32_t slot() const { return slot_; }
  std::span<std::byte> bytes() const { return bytes_; }
  // Returns the buffer to its ring now.
  void reset();

 private:
  MemoryBackend* owner_ = nullptr;
  uint32_t slot_ = 0;
  std::span<std::byte> bytes_;
};

class MemoryBackend {
 public:
  // REQUIRES: every StagingBuffer this backend lent has been given back.
  virtual ~MemoryBackend() = default;

  // "sim", "cuda", "faulty(sim)"...: for logs and /v1/status.
  virtual std::string name() const = 0;

  // Every range passed to reserve/commit/decommit is a multiple of this, at an address
  // that is a multiple of it.
  virtual size_t granularity() const = 0;

  // Reserves address space only; nothing is committed.
  // Success: a range of `bytes` rounded up to granularity(), aligned to granularity().
  // Failure: InvalidArgument for 0 bytes, OutOfMemory when no address space is left.
  virtual Result<DeviceRange> reserve(size_t bytes) = 0;

  // Maps fresh physical memory, read-write, at exactly `range`.
  // REQUIRES: range is non-empty and granularity-aligned (else InvalidArgument), lies inside
  // one reservation and no byte of it is committed (else FailedPrecondition); a refused call
  // changes nothing.
  // Success: every byte of `range` is accessible; its contents are unspecified.
  // Failure: nothing of `range` stays committed (a partial commit is rolled back);
  // OutOfMemory when the device has too little free memory (retry later), DeviceError for
  // any other driver failure.
  virtual Status commit(DeviceRange range) = 0;

  // Waits for all pending device work, then returns the physical memory under `range` to
  // the device. The addresses stay reserved; touching them faults until the next commit.
  // REQUIRES: range is non-empty and granularity-aligned (else InvalidArgument), lies inside
  // one reservation, every byte of it is committed and every commit that overlaps it lies
  // entirely inside it (else FailedPrecondition); a refused call changes nothing. Several
  // adjacent whole commits may be decommitted by one call.
  // The wait for the device need not stall calls on other ranges (SimBackend and
  // CudaVmmBackend wait without their lock); copies and zero() of `range`, which no caller may
  // issue once it decommits the range, are then refused from the start of the call
  // (FailedPrecondition), as after its end.
  virtual Status decommit(DeviceRange range) = 0;

  // Releases a reservation, decommitting whatever is still committed inside it.
  // REQUIRES: `range` is exactly a range returned by reserve(); otherwise nothing happens
  // (and debug builds say so on stderr).
  virtual void unreserve(DeviceRange range) = 0;

  // Blocks until all work enqueued on this backend's device (copies, zeroing, kernels)
  // has finished. Returns the first error of that work, if any.
  virtual Status synchronize() = 0;

  // Enqueues setting every byte of `range` to zero.
  // REQUIRES: every byte of `range` is committed (else FailedPrecondition).
  virtual Status zero(DeviceRange range) = 0;

  // ---- Asynchronous copies through the fixed staging ring ----

  virtual size_t staging_buffer_bytes() const = 0;
  virtual size_t staging_buffer_count() const = 0;

  // Lends a free staging buffer (one that no caller holds; a buffer's copy is waited for
  // when its holder gives it back, so a free buffer has no copy in flight).
  // Failure: FailedPrecondition at once when every buffer is held: a pipeline holds at most
  // staging_buffer_count() buffers at a time.
  virtual Result<StagingBuffer> acquire_staging() = 0;

  // As acquire_staging(), but when every buffer is held, waits up to `timeout` for another
  // holder to give one back. For a pipeline that holds no buffer itself and shares the ring
  // with pipelines of other sessions (a background save beside a restore): it never waits
  // while holding a buffer, so two such pipelines cannot wait for each other.
  // Failure: FailedPrecondition when none came back in time. The default does not wait (a
  // backend whose buffers no other thread gives back has nothing to wait for).
  // How long a pipeline waits for a buffer that another one holds: that one gives it back
  // once its copy and its chunk are done (milliseconds); a minute means it is stuck.
  static constexpr std::chrono::seconds kStagingShareTimeout{60};
  virtual Result<StagingBuffer> acquire_staging_waiting(std::chrono::nanoseconds timeout) {
    (void)timeout;
    return acquire_staging();
  }

  // Enqueues a copy of `bytes` bytes from device address `source` into the start of
  // `buffer`. The buffer's bytes are valid once wait() on the ticket returns OK.
  // REQUIRES: `buffer` was lent by this backend and bytes <= buffer.bytes().size() (else
  // InvalidArgument); [source, source+bytes) committed (else FailedPrecondition). A refused
  // copy enqueues nothing.
  virtual Result<CopyTicket> copy_to_staging(DeviceAddress source, size_t bytes,
                                             StagingBuffer& buffer) = 0;

  // Enqueues a copy of the first `bytes` bytes of `buffer` to device address `destination`.
  // The caller must not change the buffer until wait() on the ticket returns.
  // REQUIRES: as copy_to_staging, for the destination.
  virtual Result<CopyTicket> copy_from_staging(const StagingBuffer& buffer, size_t bytes,
                                               DeviceAddress destination) = 0;

  // ---- Direct copies between device memory and registered host memory ----
  //
  // For host memory that lives long and moves whole snapshots (the RAM tier): registered
  // once, then copied to and from without a staging buffer, in pieces as large as the
  // caller likes, on the same stream and with the same tickets as the staging copies.
  // A backend without them (the default) says Unsupported and its callers copy through
  // the staging ring instead.

  // Whether this backend copies to and from registered host memory (the calls below).
  virtual bool copies_to_host() const { return false; }

  // Makes `memory` a place this backend copies to and from directly (CUDA: pins its pages
  // with cuMemHostRegister, ~0.04 s/GiB; the simulator: notes it). Registration is the
  // caller's one-time cost, never a copy's.
  // REQUIRES: `memory` is non-empty, page-aligned, a multiple of the page size, overlaps no
  // registered memory (else InvalidArgument).
  // Failure (nothing registered): Unsupported where the backend copies only through staging;
  // OutOfMemory when the system refuses to pin the pages; DeviceError for a driver failure.
  virtual Status register_host(std::span<std::byte> memory) {
    (void)memory;
    return Unsupported(name() + " copies through its staging ring only");
  }

  // Undoes the register_host() of the memory that starts at `data`; nothing for memory not
  // registered. REQUIRES: no copy to or from that memory is in flight (the caller waited).
  virtual void unregister_host(std::byte* data) { (void)data; }

  // Enqueues a copy of `bytes` bytes from device address `source` to `destination`, whose
  // bytes are valid once wait() on the ticket returns OK.
  // REQUIRES: [destination, destination + bytes) within one registered memory (else
  // InvalidArgument); [source, source + bytes) committed (else FailedPrecondition). A refused
  // copy enqueues nothing. Unsupported where register_host() is.
  virtual Result<CopyTicket> copy_to_host(DeviceAddress source, size_t bytes,
                                          std::byte* destination) {
    (void)source, (void)bytes, (void)destination;
    return Unsupported(name() + " copies through its staging ring only");
  }

  // Enqueues a copy of `bytes` bytes at `source` to device address `destination`. The caller
  // must not change the source bytes until wait() on the ticket returns.
  // REQUIRES: as copy_to_host, with the roles of host and device swapped.
  virtual Result<CopyTicket> copy_from_host(const std::byte* source, size_t bytes,
                                            DeviceAddress destination) {
    (void)source, (void)bytes, (void)destination;
    return Unsupported(name() + " copies through its staging ring only");
  }

  // Blocks until the copy of `ticket` (and every copy enqueued before it) has finished.
  // Returns the copy's error, if it failed; InvalidArgument for a ticket this backend never
  // issued.
  virtual Status wait(CopyTicket ticket) = 0;

  virtual MemoryStats stats() const = 0;

 protected:
  friend class StagingBuffer;
  // Returns `slot` to the ring; waits first for any copy still using it.
  virtual void release_staging(uint32_t slot) = 0;
};

inline StagingBuffer& StagingBuffer::operator=(StagingBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_;
    slot_ = other.slot_;
    bytes_ = other.bytes_;
    other.owner_ = nullptr;
    other.bytes_ = {};
  }
  return *this;
}

inline void StagingBuffer::reset() {
  if (owner_ != nullptr) owner_->release_staging(slot_);
  owner_ = nullptr;
  bytes_ = {};
}

// Owns one reservation: unreserves it (decommitting what is left) when destroyed.
class ReservedRange {
 public:
  ReservedRange() = default;
  ReservedRange(MemoryBackend* backend, DeviceRange range) : backend_(backend), range_(range) {}
  ReservedRange(ReservedRange&& other) noexcept { *this = std::move(other); }
  ReservedRange& operator=(ReservedRange&& other) noexcept {
    if (this != &other) {
      reset();
      backend_ = other.backend_;
      range_ = other.range_;
      other.backend_ = nullptr;
    }
    return *this;
  }
  ReservedRange(const ReservedRange&) = delete;
  ReservedRange& operator=(const ReservedRange&) = delete;
  ~ReservedRange() { reset(); }

  // Reserves `bytes` on `backend`; the range is released when the result is destroyed.
  static Result<ReservedRange> reserve(MemoryBackend& backend, size_t bytes) {
    Result<DeviceRange> range = backend.reserve(bytes);
    if (!range.ok()) return range.status();
    return ReservedRange(&backend, *range);
  }

  const DeviceRange& range() const { return range_; }
  void reset() {
    if (backend_ != nullptr) backend_->unreserve(range_);
    backend_ = nullptr;
  }

 private:
  MemoryBackend* backend_ = nullptr;
  DeviceRange range_;
};

}  // namespace siesta
