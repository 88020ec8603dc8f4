// RAII owners for the CUDA driver objects the VMM backend holds: the retained primary
// context, the copy stream, events, pinned host buffers, address reservations, physical
// allocations and their mappings. Each frees its object exactly once; a moved-from owner
// frees nothing.
//
// Freeing needs the backend's context current on the calling thread (the driver resolves
// host allocations, stream and event handles against it): destroy owners inside a
// ScopedContext. The table they call through is the process-wide driver(), which is never
// unloaded, so owners may outlive any one backend object without dangling.
//
// Thread rule: an owner is used by one thread at a time (the backend's mutex sees to it).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <utility>

#include "backends/cuda_vmm/cuda_driver_api.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"

namespace siesta::cuda {

// Makes `context` current on this thread for the scope, restoring what was current before
// (pushed and popped, so a caller's own context survives a call into the backend).
class ScopedContext {
 public:
  ScopedContext(const DriverApi& api, CUcontext context);
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
  ~ScopedContext();

  // OK when the context was made current; else why not (every driver call would fail).
  const Status& status() const { return status_; }

 private:
  const DriverApi& api_;
  Status status_;
};

// One driver object of type Traits::Handle, freed by Traits::destroy (which names itself
// in Traits::kDestroy for error messages).
template <class Traits>
class DriverHandle {
 public:
  using Handle = typename Traits::Handle;

  DriverHandle() = default;
  DriverHandle(const DriverApi& api, Handle handle) : api_(&api), handle_(handle) {}
  DriverHandle(DriverHandle&& other) noexcept { *this = std::move(other); }
  DriverHandle& operator=(DriverHandle&& other) noexcept {
    if (this != &other) {
      reset().ignore();
      api_ = std::exchange(other.api_, nullptr);
      handle_ = other.handle_;
    }
    return *this;
  }
  DriverHandle(const DriverHandle&) = delete;
  DriverHandle& operator=(const DriverHandle&) = delete;
  ~DriverHandle() { reset().ignore(); }

  bool owns() const { return api_ != nullptr; }
  const Handle& get() const { return handle_; }

  // Frees the object now and reports how that went (decommit needs to know; a destructor
  // does not). Owns nothing afterwards, whatever the outcome: a failed free is not retried.
  Status reset() {
    if (api_ == nullptr) return Status::Ok();
    const DriverApi& api = *std::exchange(api_, nullptr);
    return status_from_cu(api, Traits::destroy(api, handle_), Traits::kDestroy);
  }

 private:
  const DriverApi* api_ = nullptr;  // null: owns nothing
  Handle handle_{};
};

struct StreamTraits {
  using Handle = CUstream;
  static constexpr std::string_view kDestroy = "cuStreamDestroy(copy stream)";
  static CUresult destroy(const DriverApi& api, CUstream s) { return api.cuStreamDestroy(s); }
};
struct EventTraits {
  using Handle = CUevent;
  static constexpr std::string_view kDestroy = "cuEventDestroy(copy event)";
  static CUresult destroy(const DriverApi& api, CUevent e) { return api.cuEventDestroy(e); }
};
struct HostAllocTraits {
  using Handle = void*;
  static constexpr std::string_view kDestroy = "cuMemFreeHost(staging buffer)";
  static CUresult destroy(const DriverApi& api, void* p) { return api.cuMemFreeHost(p); }
};
struct PhysicalMemoryTraits {
  using Handle = CUmemGenericAllocationHandle;
  static constexpr std::string_view kDestroy = "cuMemRelease(physical chunk)";
  static CUresult destroy(const DriverApi& api, Handle h) { return api.cuMemRelease(h); }
};
struct MappingTraits {
  using Handle = DeviceRange;
  static constexpr std::string_view kDestroy = "cuMemUnmap(chunk mapping)";
  static CUresult destroy(const DriverApi& api, DeviceRange r) {
    return api.cuMemUnmap(r.base, r.size);
  }
};
struct ReservationTraits {
  using Handle = DeviceRange;
  static constexpr std::string_view kDestroy = "cuMemAddressFree(reservation)";
  static CUresult destroy(const DriverApi& api, DeviceRange r) {
    return api.cuMemAddressFree(r.base, r.size);
  }
};

using Stream = DriverHandle<StreamTraits>;
using Event = DriverHandle<EventTraits>;
using PhysicalMemory = DriverHandle<PhysicalMemoryTraits>;
using Mapping = DriverHandle<MappingTraits>;
using AddressReservation = DriverHandle<ReservationTraits>;

// The device's primary context, retained (the same context the CUDA runtime and the
// engine's kernels use, so cuCtxSynchronize covers their work too); released on destruction.
class PrimaryContext {
 public:
  // Failure: the mapped status of cuDevicePrimaryCtxRetain.
  static Result<PrimaryContext> retain(const DriverApi& api, CUdevice device);

  PrimaryContext() = default;
  PrimaryContext(PrimaryContext&& other) noexcept { *this = std::move(other); }
  PrimaryContext& operator=(PrimaryContext&& other) noexcept;
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  ~PrimaryContext() { reset(); }

  CUcontext get() const { return context_; }
  CUdevice device() const { return device_; }
  void reset();

 private:
  const DriverApi* api_ = nullptr;  // null: holds no retain
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

// One pinned (page-locked) host buffer from cuMemHostAlloc.
class PinnedHostBuffer {
 public:
  // Failure: OutOfMemory when the memory cannot be pinned, else the mapped driver status.
  // REQUIRES: a context is current.
  static Result<PinnedHostBuffer> allocate(const DriverApi& api, size_t bytes);

  std::span<std::byte> bytes() const { return {static_cast<std::byte*>(memory_.get()), size_}; }

 private:
  PinnedHostBuffer(DriverHandle<HostAllocTraits> memory, size_t size)
      : memory_(std::move(memory)), size_(size) {}
  DriverHandle<HostAllocTraits> memory_;
  size_t size_ = 0;
};

// Creates a non-blocking stream (no implicit synchronisation with the legacy default
// stream, so copies never wait for unrelated kernels on it).
// REQUIRES: a context is current.
Result<Stream> create_stream(const DriverApi& api);

// Creates an event without timing (cheaper to record and to wait for).
// REQUIRES: a context is current.
Result<Event> create_event(const DriverApi& api);

// Reserves `bytes` of device address space aligned to `alignment`.
// Failure: OutOfMemory when the address space is exhausted, else the mapped driver status.
Result<AddressReservation> reserve_address_range(const DriverApi& api, size_t bytes,
                                                 size_t alignment);

}  // namespace siesta::cuda
