// Design notes.
//
// Chunks: a commit creates physical memory in chunks of at most max_chunk_bytes (default
// 1 GiB), not granule by granule: on the H200 a commit costs 25.9 ms/GiB with 2 MiB chunks
// but 0.14 ms/GiB with 1 GiB chunks, and a decommit 19.7 vs 0.67 ms/GiB (measured with the
// driver API alone; docs/PERFORMANCE.md, "The machines"). The chunks of one commit call stay
// together as one allocation that is only ever released whole, so decommit never splits a chunk.
//
// dlopen: libcuda.so.1 is loaded at run time (cuda_driver_api.h) so that every binary that
// contains this backend starts on machines without a driver, runs its other tests there and
// reports why CUDA is unavailable instead of failing to load.
//
// Synchronisation: one mutex guards the ledger of reservations and commits and the copy
// sequence. Every precondition is checked under it before anything is enqueued, so a bad
// copy never reaches the device (an illegal access poisons the whole context). Copies and
// zeroing run on one non-blocking stream in submission order; copy n records event
// n % event count, so waiting for that event waits for copy n or a later one, which is
// enough because tickets complete in order. Waiting happens outside the mutex. decommit and
// unreserve first cuCtxSynchronize the whole primary context, not just the copy stream:
// kernels of the engine still running on the memory would otherwise fault after the unmap
// (unmapping under running kernels gave illegal-address errors after some cycles in other
// serving systems). decommit synchronises without the mutex, which would otherwise stall
// every other session's commit and copy for as long as the device is busy: under the mutex
// it first marks its commits as being released (RangeLedger::begin_release), after which the
// ledger refuses copies and zeroing of them, so none is enqueued between the synchronisation
// and the unmap; it takes the mutex again to unmap, or, when the synchronisation failed, to
// put the commits back in use. unreserve (rare: a session's end) still synchronises under the
// mutex, after waiting for the decommits inside its reservation. Every public method that
// calls the driver pushes the primary context on entry and pops it on return, so it works
// from any thread and leaves the caller's context alone.
#include "backends/cuda_vmm/cuda_vmm_backend.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <numeric>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda_vmm/chunked_commit.h"
#include "backends/cuda_vmm/context_capture_gate.h"
#include "backends/cuda_vmm/cuda_driver_api.h"
#include "backends/cuda_vmm/cuda_handles.h"
#include "core/base/mutex.h"
#include "core/base/round_up.h"
#include "core/base/thread_annotations.h"
#include "core/memory/range_ledger.h"
#include "core/memory/registered_host_memory.h"
#include "core/memory/staging_ring.h"

namespace siesta {

using cuda::DriverApi;
using cuda::ScopedContext;
using cuda::status_from_cu;

namespace {

// The device `ordinal`, if it exists and supports virtual memory management.
// Failure: NotFound (no such device), Unsupported (no VMM), or the mapped driver status.
Result<CUdevice> find_vmm_device(const DriverApi& api, int ordinal) {
  int count = 0;
  SIESTA_RETURN_IF_ERROR(status_from_cu(api, api.cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (ordinal < 0 || ordinal >= count) {
    return NotFound("no CUDA device " + std::to_string(ordinal) + ": the driver sees " +
                    std::to_string(count) + " device(s)");
  }
  CUdevice device = 0;
  SIESTA_RETURN_IF_ERROR(status_from_cu(api, api.cuDeviceGet(&device, ordinal),
                                        "cuDeviceGet(" + std::to_string(ordinal) + ")"));
  int vmm = 0;
  SIESTA_RETURN_IF_ERROR(
      status_from_cu(api,
                     api.cuDeviceGetAttribute(
                         &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device),
                     "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device " +
                         std::to_string(ordinal) + ")"));
  if (vmm == 0) {
    return Unsupported("CUDA device " + std::to_string(ordinal) +
                       " lacks virtual memory management support "
                       "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)");
  }
  return device;
}

// The granularity every reservation, commit and chunk is a multiple of: the recommended
// one (2 MiB on the H200, equal to the minimum), made a multiple of the minimum
// should a device ever report a recommended size that is not.
Result<size_t> allocation_granularity(const DriverApi& api, CUdevice device) {
  const CUmemAllocationProp prop = cuda::device_allocation_properties(device);
  size_t minimum = 0;
  size_t recommended = 0;
  SIESTA_RETURN_IF_ERROR(status_from_cu(
      api, api.cuMemGetAllocationGranularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      "cuMemGetAllocationGranularity(MINIMUM)"));
  SIESTA_RETURN_IF_ERROR(status_from_cu(
      api,
      api.cuMemGetAllocationGranularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      "cuMemGetAllocationGranularity(RECOMMENDED)"));
  if (minimum == 0) return DeviceError("the driver reports an allocation granularity of 0");
  return recommended == 0 ? minimum : std::lcm(minimum, recommended);
}

void debug_note(const std::string& what) {
#ifndef NDEBUG
  (void)std::fprintf(stderr, "siesta cuda backend: %s\n", what.c_str());
#else
  (void)what;
#endif
}

}  // namespace

struct CudaVmmBackend::Impl {
  using Ledger = RangeLedger<cuda::AddressReservation, cuda::Allocation>;

  // Set by create() before the backend is handed out, then only read (the handles are used
  // from any thread; the driver serialises what it must).
  const DriverApi* api = nullptr;
  CudaVmmOptions options;
  cuda::PrimaryContext context;
  cuda::CommitPlan plan;
  cuda::Stream stream;
  std::vector<cuda::Event> events;  // copy n records events[n % size]
  std::vector<cuda::PinnedHostBuffer> pinned;
  std::optional<StagingRing> ring;  // lends spans of `pinned`; thread-safe itself

  // Never held while decommit synchronises the context (see the top of this file).
  mutable Mutex mutex;
  Ledger ledger SIESTA_GUARDED_BY(mutex);
  RegisteredHostMemory registered SIESTA_GUARDED_BY(mutex);
  uint64_t last_sequence SIESTA_GUARDED_BY(mutex) = 0;
  // Notified (with `mutex` held) when a decommit's release ends, done or abandoned; unreserve
  // waits here for the decommits inside its reservation.
  std::condition_variable release_ended;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl();

  // Makes the primary context current for the caller's scope.
  ScopedContext enter() const { return ScopedContext(*api, context.get()); }

  // Frees a reservation taken out of the ledger: waits for all device work when memory is
  // still committed in it, then unmaps and releases that memory, then the address space.
  // REQUIRES: context current.
  Status release(Ledger::TakenReservation t) SIESTA_REQUIRES(mutex);

  // Checks that `buffer` is one of this backend's staging buffers.
  Status check_buffer(const StagingBuffer& buffer, size_t bytes) const;

  // Records the copy just enqueued and returns its ticket; notes it as the last copy of
  // staging buffer `slot`, when it used one.
  Result<CopyTicket> record_copy(std::optional<uint32_t> slot) SIESTA_REQUIRES(mutex);
};

CudaVmmBackend::Impl::~Impl() {
  if (api == nullptr) return;  // create() failed before anything was made
  {
    ScopedContext scope = enter();
    if (scope.status().ok()) {
      std::shared_lock gate(cuda::primary_context_capture_gate());
      api->cuCtxSynchronize();  // best effort: nothing to report to
    }
    MutexLock lock(mutex);
    for (DeviceRange range : ledger.reservation_ranges()) {
      release(std::move(*ledger.take_reservation(range))).ignore();
    }
    ring.reset();
    pinned.clear();
    events.clear();
    stream.reset().ignore();
  }
  context.reset();  // after the scope: the context is no longer current here
}

Status CudaVmmBackend::Impl::release(Ledger::TakenReservation taken) {
  Status first;
  if (!taken.commits.empty()) {
    std::shared_lock gate(cuda::primary_context_capture_gate());
    first = status_from_cu(*api, api->cuCtxSynchronize(), "cuCtxSynchronize(before unreserve)");
  }
  for (cuda::Allocation& allocation : taken.commits) {
    Status status = cuda::release_chunks(allocation);
    if (first.ok()) first = status;
  }
  Status freed = taken.space.reset();
  return first.ok() ? freed : first;
}

Status CudaVmmBackend::Impl::check_buffer(const StagingBuffer& buffer, size_t bytes) const {
  if (!buffer.valid() || buffer.slot() >= pinned.size() ||
      buffer.bytes().data() != pinned[buffer.slot()].bytes().data()) {
    return InvalidArgument("not a staging buffer lent by this backend");
  }
  if (bytes > buffer.bytes().size()) {
    return InvalidArgument("copy of " + std::to_string(bytes) + " bytes through a " +
                           std::to_string(buffer.bytes().size()) + "-byte staging buffer");
  }
  return Status::Ok();
}

Result<CopyTicket> CudaVmmBackend::Impl::record_copy(std::optional<uint32_t> slot) {
  const uint64_t sequence = ++last_sequence;
  const cuda::Event& event = events[sequence % events.size()];
  CUresult r = api->cuEventRecord(event.get(), stream.get());
  if (r != CUDA_SUCCESS) {
    // The copy is enqueued but cannot be waited for by ticket: let it finish now so that no
    // untracked copy still uses the staging buffer when it is given back.
    std::shared_lock gate(cuda::primary_context_capture_gate());
    api->cuCtxSynchronize();
    return status_from_cu(*api, r, "cuEventRecord(copy " + std::to_string(sequence) + ")");
  }
  CopyTicket ticket{sequence};
  if (slot.has_value()) ring->note_copy(*slot, ticket);
  return ticket;
}

// ---- Creation -------------------------------------------------------------------------------

Result<std::unique_ptr<CudaVmmBackend>> CudaVmmBackend::create(CudaVmmOptions options) {
  if (options.max_chunk_bytes == 0 || options.staging_buffer_bytes == 0 ||
      options.staging_buffer_count == 0 || options.staging_buffer_count > UINT32_MAX) {
    return InvalidArgument(
        "CudaVmmOptions: chunk size, staging buffer size and count must be positive");
  }
  SIESTA_ASSIGN_OR_RETURN(const DriverApi* api, cuda::driver());
  SIESTA_ASSIGN_OR_RETURN(CUdevice device, find_vmm_device(*api, options.device_ordinal));

  auto impl = std::make_unique<Impl>();
  SIESTA_ASSIGN_OR_RETURN(impl->context, cuda::PrimaryContext::retain(*api, device));
  impl->api = api;  // from here on, ~Impl tears down whatever was made
  impl->options = std::move(options);
  ScopedContext scope = impl->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());

  SIESTA_ASSIGN_OR_RETURN(const size_t granularity, allocation_granularity(*api, device));
  const size_t max_chunk = impl->options.max_chunk_bytes;
  impl->plan = cuda::CommitPlan{
      .device = device,
      .granularity = granularity,
      .chunk_bytes = std::max(granularity, max_chunk - max_chunk % granularity),
      .fault_hook = &impl->options.commit_fault_hook,
  };

  SIESTA_ASSIGN_OR_RETURN(impl->stream, cuda::create_stream(*api));
  // More events than staging buffers, so that a wait rarely covers a later copy too.
  const size_t event_count = std::max<size_t>(8, 2 * impl->options.staging_buffer_count);
  for (size_t i = 0; i < event_count; ++i) {
    SIESTA_ASSIGN_OR_RETURN(cuda::Event event, cuda::create_event(*api));
    impl->events.push_back(std::move(event));
  }
  // Pinned once, here, never at offload time: pinning is slow (8 GiB took 4.45 s on the H200
  // machine), and pinning per offload is what made other systems' sleep slow.
  std::vector<std::span<std::byte>> spans;
  for (size_t i = 0; i < impl->options.staging_buffer_count; ++i) {
    SIESTA_ASSIGN_OR_RETURN(
        cuda::PinnedHostBuffer buffer,
        cuda::PinnedHostBuffer::allocate(*api, impl->options.staging_buffer_bytes));
    spans.push_back(buffer.bytes());
    impl->pinned.push_back(std::move(buffer));
  }
  impl->ring.emplace(std::move(spans));
  return std::unique_ptr<CudaVmmBackend>(new CudaVmmBackend(std::move(impl)));
}

std::string CudaVmmBackend::unavailable_reason(int device_ordinal) {
  Result<const DriverApi*> api = cuda::driver();
  if (!api.ok()) return api.status().message();
  Result<CUdevice> device = find_vmm_device(**api, device_ordinal);
  if (!device.ok()) return device.status().message();
  return "";
}

CudaVmmBackend::CudaVmmBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaVmmBackend::~CudaVmmBackend() = default;

std::string CudaVmmBackend::name() const { return "cuda"; }
size_t CudaVmmBackend::granularity() const { return impl_->plan.granularity; }
size_t CudaVmmBackend::staging_buffer_bytes() const { return impl_->options.staging_buffer_bytes; }
size_t CudaVmmBackend::staging_buffer_count() const { return impl_->options.staging_buffer_count; }

// ---- Address space and physical memory ------------------------------------------------------

Result<DeviceRange> CudaVmmBackend::reserve(size_t bytes) {
  const size_t g = impl_->plan.granularity;
  if (bytes == 0) return InvalidArgument("reserve of 0 bytes");
  if (bytes > SIZE_MAX - (g - 1)) {
    return InvalidArgument("reserve of " + std::to_string(bytes) + " bytes: too large");
  }
  const size_t rounded = round_up(bytes, g);
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  SIESTA_ASSIGN_OR_RETURN(cuda::AddressReservation reservation,
                          cuda::reserve_address_range(*impl_->api, rounded, g));
  const DeviceRange range = reservation.get();
  MutexLock lock(impl_->mutex);
  impl_->ledger.add_reservation(range, std::move(reservation));
  return range;
}

Status CudaVmmBackend::commit(DeviceRange range) {
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(impl_->ledger.check_commit(range, impl_->plan.granularity));
  SIESTA_ASSIGN_OR_RETURN(cuda::Allocation allocation,
                          cuda::commit_chunks(*impl_->api, impl_->plan, range));
  impl_->ledger.add_commit(range, std::move(allocation));
  return Status::Ok();
}

Status CudaVmmBackend::decommit(DeviceRange range) {
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  {
    MutexLock lock(impl_->mutex);
    SIESTA_RETURN_IF_ERROR(impl_->ledger.check_decommit(range, impl_->plan.granularity));
    // From here on copies and zeroing of the range, another decommit of it and a commit over
    // it are refused, and unreserve waits: the range stays as it is while the mutex is let go.
    impl_->ledger.begin_release(range);
  }
  // All device work, not only our copies: a kernel still reading the range would fault once
  // it is unmapped (an unmap under running kernels faults them). Without the mutex, so that
  // other sessions' commits and copies are not stalled while the device drains.
  Status synced;
  {
    std::shared_lock gate(cuda::primary_context_capture_gate());
    synced = status_from_cu(*impl_->api, impl_->api->cuCtxSynchronize(),
                            "cuCtxSynchronize(before decommit of " + range_string(range) + ")");
  }
  MutexLock lock(impl_->mutex);
  if (!synced.ok()) {
    // On failure nothing has changed: the commits are back in use.
    impl_->ledger.cancel_release(range);
    impl_->release_ended.notify_all();
    return synced;
  }
  // Released whatever happens: a chunk whose unmap failed is not retried (its handle is
  // gone), and the error says so.
  Status first;
  for (cuda::Allocation& allocation : impl_->ledger.take_commits(range)) {
    Status status = cuda::release_chunks(allocation);
    if (first.ok()) first = status;
  }
  impl_->release_ended.notify_all();
  return first;
}

void CudaVmmBackend::unreserve(DeviceRange range) {
  ScopedContext scope = impl_->enter();
  if (!scope.status().ok()) debug_note("unreserve: " + scope.status().to_string());
  MutexLock lock(impl_->mutex);
  // A decommit inside the reservation that waits for the device ends first (its commits are
  // the decommit's until then), as it would have had it held the mutex throughout.
  lock.wait(impl_->release_ended,
            [&]() SIESTA_REQUIRES(impl_->mutex) { return !impl_->ledger.releasing_within(range); });
  auto taken = impl_->ledger.take_reservation(range);
  if (!taken) {
    debug_note("unreserve of " + range_string(range) + ", which is not a reservation; ignored");
    return;
  }
  Status status = impl_->release(std::move(*taken));
  if (!status.ok()) debug_note("unreserve of " + range_string(range) + ": " + status.to_string());
}

Status CudaVmmBackend::synchronize() {
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  std::shared_lock gate(cuda::primary_context_capture_gate());
  return status_from_cu(*impl_->api, impl_->api->cuCtxSynchronize(), "cuCtxSynchronize");
}

Status CudaVmmBackend::zero(DeviceRange range) {
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(impl_->ledger.check_committed(range, "zero"));
  if (range.empty()) return Status::Ok();
  return status_from_cu(*impl_->api,
                        impl_->api->cuMemsetD8Async(range.base, 0, range.size, impl_->stream.get()),
                        "cuMemsetD8Async(" + range_string(range) + ", 0)");
}

// ---- Copies through the staging ring --------------------------------------------------------

Result<StagingBuffer> CudaVmmBackend::acquire_staging() { return impl_->ring->acquire(this); }
Result<StagingBuffer> CudaVmmBackend::acquire_staging_waiting(std::chrono::nanoseconds timeout) {
  return impl_->ring->acquire_waiting(this, timeout);
}

void CudaVmmBackend::release_staging(uint32_t slot) {
  if (slot >= impl_->pinned.size()) return;
  Status status = wait(impl_->ring->last_copy(slot));
  // The copy's error is the waiter's to report; here it can only be noted.
  if (!status.ok())
    debug_note("staging buffer " + std::to_string(slot) + ": " + status.to_string());
  impl_->ring->mark_free(slot);
}

Result<CopyTicket> CudaVmmBackend::copy_to_staging(DeviceAddress source, size_t bytes,
                                                   StagingBuffer& buffer) {
  SIESTA_RETURN_IF_ERROR(impl_->check_buffer(buffer, bytes));
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(impl_->ledger.check_committed({source, bytes}, "copy_to_staging source"));
  if (bytes > 0) {
    SIESTA_RETURN_IF_ERROR(status_from_cu(
        *impl_->api,
        impl_->api->cuMemcpyDtoHAsync(buffer.bytes().data(), source, bytes, impl_->stream.get()),
        "cuMemcpyDtoHAsync(staging " + std::to_string(buffer.slot()) + " <- " +
            range_string({source, bytes}) + ")"));
  }
  return impl_->record_copy(buffer.slot());
}

Result<CopyTicket> CudaVmmBackend::copy_from_staging(const StagingBuffer& buffer, size_t bytes,
                                                     DeviceAddress destination) {
  SIESTA_RETURN_IF_ERROR(impl_->check_buffer(buffer, bytes));
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(
      impl_->ledger.check_committed({destination, bytes}, "copy_from_staging destination"));
  if (bytes > 0) {
    SIESTA_RETURN_IF_ERROR(
        status_from_cu(*impl_->api,
                       impl_->api->cuMemcpyHtoDAsync(destination, buffer.bytes().data(), bytes,
                                                     impl_->stream.get()),
                       "cuMemcpyHtoDAsync(" + range_string({destination, bytes}) + " <- staging " +
                           std::to_string(buffer.slot()) + ")"));
  }
  return impl_->record_copy(buffer.slot());
}

// ---- Direct copies to and from registered (pinned) host memory ------------------------------

Status CudaVmmBackend::register_host(std::span<std::byte> memory) {
  {
    MutexLock lock(impl_->mutex);
    SIESTA_RETURN_IF_ERROR(impl_->registered.check_new(memory));
  }
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  // Outside the mutex: pinning takes ~0.04 s/GiB and other sessions' copies go on meanwhile.
  const CUresult r = impl_->api->cuMemHostRegister(memory.data(), memory.size(), 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    return OutOfMemory("cuMemHostRegister of " + std::to_string(memory.size()) +
                       " bytes: the system refused to pin them");
  }
  SIESTA_RETURN_IF_ERROR(status_from_cu(
      *impl_->api, r, "cuMemHostRegister(" + std::to_string(memory.size()) + " bytes)"));
  MutexLock lock(impl_->mutex);
  Status fits = impl_->registered.check_new(memory);  // another thread may have raced it in
  if (!fits.ok()) {
    impl_->api->cuMemHostUnregister(memory.data());
    return fits;
  }
  impl_->registered.add(memory);
  return Status::Ok();
}

void CudaVmmBackend::unregister_host(std::byte* data) {
  {
    MutexLock lock(impl_->mutex);
    if (impl_->registered.remove(data) == 0) return;
  }
  ScopedContext scope = impl_->enter();
  if (!scope.status().ok()) return;
  const CUresult r = impl_->api->cuMemHostUnregister(data);
  if (r != CUDA_SUCCESS) {
    debug_note("cuMemHostUnregister: " + status_from_cu(*impl_->api, r, "").to_string());
  }
}

Result<CopyTicket> CudaVmmBackend::copy_to_host(DeviceAddress source, size_t bytes,
                                                std::byte* destination) {
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(
      impl_->registered.check_within(destination, bytes, "copy_to_host destination"));
  SIESTA_RETURN_IF_ERROR(impl_->ledger.check_committed({source, bytes}, "copy_to_host source"));
  if (bytes > 0) {
    SIESTA_RETURN_IF_ERROR(status_from_cu(
        *impl_->api, impl_->api->cuMemcpyDtoHAsync(destination, source, bytes, impl_->stream.get()),
        "cuMemcpyDtoHAsync(host <- " + range_string({source, bytes}) + ")"));
  }
  return impl_->record_copy(std::nullopt);
}

Result<CopyTicket> CudaVmmBackend::copy_from_host(const std::byte* source, size_t bytes,
                                                  DeviceAddress destination) {
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(impl_->registered.check_within(source, bytes, "copy_from_host source"));
  SIESTA_RETURN_IF_ERROR(
      impl_->ledger.check_committed({destination, bytes}, "copy_from_host destination"));
  if (bytes > 0) {
    SIESTA_RETURN_IF_ERROR(status_from_cu(
        *impl_->api, impl_->api->cuMemcpyHtoDAsync(destination, source, bytes, impl_->stream.get()),
        "cuMemcpyHtoDAsync(" + range_string({destination, bytes}) + " <- host)"));
  }
  return impl_->record_copy(std::nullopt);
}

Status CudaVmmBackend::wait(CopyTicket ticket) {
  if (ticket.sequence == 0) return Status::Ok();  // "no copy"
  CUevent event = nullptr;
  {
    MutexLock lock(impl_->mutex);
    if (ticket.sequence > impl_->last_sequence) {
      return InvalidArgument("copy ticket " + std::to_string(ticket.sequence) +
                             " was never issued");
    }
    event = impl_->events[ticket.sequence % impl_->events.size()].get();
  }
  // Outside the mutex: other threads keep enqueuing while this one blocks. If a later copy
  // re-records the event meanwhile, this waits for that copy too, which is still correct.
  ScopedContext scope = impl_->enter();
  SIESTA_RETURN_IF_ERROR(scope.status());
  return status_from_cu(*impl_->api, impl_->api->cuEventSynchronize(event),
                        "cuEventSynchronize(copy ticket " + std::to_string(ticket.sequence) + ")");
}

MemoryStats CudaVmmBackend::stats() const {
  MemoryStats out;
  {
    MutexLock lock(impl_->mutex);
    out.reserved_bytes = impl_->ledger.reserved_bytes();
    out.committed_bytes = impl_->ledger.committed_bytes();
  }
  ScopedContext scope = impl_->enter();
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  // What the device itself reports, not what the code meant to release (a system that
  // reported its intent freed 6 GB of a claimed 20); zero when it cannot say.
  if (scope.status().ok() && impl_->api->cuMemGetInfo(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
    out.device_free_bytes = free_bytes;
    out.device_total_bytes = total_bytes;
  }
  return out;
}

}  // namespace siesta
