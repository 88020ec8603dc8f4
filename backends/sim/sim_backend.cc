#include "backends/sim/sim_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/sim/sim_device_stream.h"
#include "core/base/mutex.h"
#include "core/base/os_error.h"
#include "core/base/round_up.h"
#include "core/base/thread_annotations.h"
#include "core/base/unique_fd.h"
#include "core/memory/host_address_space.h"
#include "core/memory/range_ledger.h"
#include "core/memory/registered_host_memory.h"
#include "core/memory/staging_ring.h"

namespace siesta {
namespace {

// The simulator's device addresses are host pointers.
std::byte* host_pointer(DeviceAddress address) {
  return reinterpret_cast<std::byte*>(address);  // NOLINT(performance-no-int-to-ptr)
}

// A failed syscall while committing: a shortage of memory is OutOfMemory (the caller may
// retry later), anything else is a "driver" failure.
Status commit_step_error(int err, const std::string& what) {
  Status status = status_from_errno(err, what);
  if (err == ENOMEM || err == ENOSPC) return OutOfMemory(status.message());
  return DeviceError(status.message());
}

// The address space of one reservation (the simulator's cuMemAddressReserve), unmapped when
// destroyed. A RangeLedger::TakenReservation lets its commits' memfds go first; their pages
// return to the kernel once this unmaps them.
class HostReservation {
 public:
  explicit HostReservation(DeviceRange range) : range_(range) {}
  HostReservation(HostReservation&& other) noexcept : range_(std::exchange(other.range_, {})) {}
  HostReservation& operator=(HostReservation&&) = delete;
  HostReservation(const HostReservation&) = delete;
  HostReservation& operator=(const HostReservation&) = delete;
  ~HostReservation() {
    if (!range_.empty()) host_address_space::unreserve(host_pointer(range_.base), range_.size);
  }

 private:
  DeviceRange range_;
};

// The physical memory of one commit() call: memfds of at most max_chunk_bytes each, mapped
// back to back from the start of the range.
using Chunks = std::vector<UniqueFd>;

}  // namespace

struct SimBackend::Impl {
  using Ledger = RangeLedger<HostReservation, Chunks>;

  explicit Impl(SimBackendOptions opts, std::unique_ptr<std::byte[]> staging,
                std::vector<std::span<std::byte>> buffers)
      : options(std::move(opts)),
        staging_memory(std::move(staging)),
        ring(std::move(buffers)),
        copies(timing(options.hazards)),
        work(timing(options.hazards)) {}

  static SimDeviceStream::Timing timing(const SimHazards& hazards) {
    return hazards.run_work_when_waited ? SimDeviceStream::Timing::kWhenWaited
                                        : SimDeviceStream::Timing::kEager;
  }
  // Both streams, the copies first (a kernel may be waiting for nothing but a copy's bytes).
  void drain_streams() {
    copies.drain();
    work.drain();
  }

  // Free device memory as a commit sees it, `pending` bytes into the current call.
  uint64_t free_bytes(uint64_t pending) const {
    const uint64_t used = committed_bytes.load() + external_usage.load() + pending;
    return used >= options.capacity_bytes ? 0 : options.capacity_bytes - used;
  }

  Status run_hook(CommitStep step, size_t chunk_index) const {
    if (!options.commit_fault_hook) return Status::Ok();
    return options.commit_fault_hook(step, chunk_index);
  }

  // Creates one chunk, maps it at `address` and makes it read-write, asking the hook before
  // each step. On failure the chunk's memfd is closed;
  // its mapping (if any) is left for the caller's rollback to drop.
  Result<UniqueFd> commit_chunk(DeviceAddress address, size_t bytes, size_t index);

  // True when `buffer` is one of this backend's staging buffers.
  bool owns(const StagingBuffer& buffer) const {
    return buffer.valid() && buffer.slot() < ring.count() &&
           buffer.bytes().data() == staging_memory.get() + buffer.slot() * ring.buffer_bytes();
  }
  // OK when `buffer` is one of this backend's staging buffers and holds `bytes`; else
  // InvalidArgument. `what` names the call in the message.
  Status check_buffer(const StagingBuffer& buffer, size_t bytes, const char* what) const;

  // Copies the ledger's totals to the atomics that stats() reads.
  void publish_totals() SIESTA_REQUIRES(mutex) {
    reserved_bytes.store(ledger.reserved_bytes());
    committed_bytes.store(ledger.committed_bytes());
  }

  const SimBackendOptions options;
  const std::unique_ptr<std::byte[]> staging_memory;  // the "pinned" ring, allocated once
  StagingRing ring;                                   // thread-safe itself

  // The ledger's totals, copied out so that stats() never waits for `mutex`, which unreserve
  // holds while it drains the streams. Written only under `mutex` (publish_totals()).
  std::atomic<uint64_t> reserved_bytes{0};
  std::atomic<uint64_t> committed_bytes{0};
  std::atomic<uint64_t> external_usage{0};

  // Serialises every change of the ledger with the system calls that make it true, and the
  // check of a copy's range with its submission. Never held while decommit drains the
  // streams: decommit marks its commits as being released under it (the ledger then refuses
  // copies of them, so none can be submitted after the drain began), drains without it, and
  // takes it again to unmap.
  Mutex mutex;
  Ledger ledger SIESTA_GUARDED_BY(mutex);
  RegisteredHostMemory registered SIESTA_GUARDED_BY(mutex);
  // Notified (with `mutex` held) when a decommit's release ends, done or abandoned; unreserve
  // waits here for the decommits inside its reservation.
  std::condition_variable release_ended;

  // Last members, so they are destroyed first: their destructors run queued jobs, which may
  // still touch the staging memory above.
  SimDeviceStream copies;  // staging copies and zero()
  SimDeviceStream work;    // enqueue_work(): the host kernels
};

Result<UniqueFd> SimBackend::Impl::commit_chunk(DeviceAddress address, size_t bytes, size_t index) {
  const std::string where =
      "commit chunk " + std::to_string(index) + " " + range_string({address, bytes});
  SIESTA_RETURN_IF_ERROR(run_hook(CommitStep::kCreate, index));
  UniqueFd fd(memfd_create("siesta-sim-chunk", MFD_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;  // read before building the message can disturb it
    return commit_step_error(err, where + ": memfd_create");
  }
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    return commit_step_error(err, where + ": ftruncate");
  }

  SIESTA_RETURN_IF_ERROR(run_hook(CommitStep::kMap, index));
  // Mapped PROT_NONE first, as cuMemMap maps without access: making it read-write is the
  // separate step below, so a failure between the two is exercised like CUDA's.
  void* got = mmap(host_pointer(address), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd.get(), 0);
  if (got == MAP_FAILED) {
    const int err = errno;
    return commit_step_error(err, where + ": mmap MAP_FIXED");
  }

  SIESTA_RETURN_IF_ERROR(run_hook(CommitStep::kSetAccess, index));
  if (mprotect(host_pointer(address), bytes, PROT_READ | PROT_WRITE) != 0) {
    const int err = errno;
    return commit_step_error(err, where + ": mprotect read-write");
  }
  if (options.hazards.poison_fresh_memory) {
    std::memset(host_pointer(address), static_cast<int>(kSimPoisonByte), bytes);
  }
  return fd;
}

Status SimBackend::Impl::check_buffer(const StagingBuffer& buffer, size_t bytes,
                                      const char* what) const {
  if (!owns(buffer)) {
    return InvalidArgument(std::string(what) + ": the staging buffer is not one of this backend's");
  }
  if (bytes > buffer.bytes().size()) {
    return InvalidArgument(std::string(what) + " of " + std::to_string(bytes) +
                           " bytes: larger than the staging buffer (" +
                           std::to_string(buffer.bytes().size()) + " bytes)");
  }
  return Status::Ok();
}

// ---- Construction ---------------------------------------------------------------------------

Result<std::unique_ptr<SimBackend>> SimBackend::create(SimBackendOptions options) {
  const size_t page = host_address_space::page_size();
  const size_t g = options.granularity;
  if (g == 0 || g % page != 0 || (g & (g - 1)) != 0) {
    return InvalidArgument("SimBackend granularity " + std::to_string(g) +
                           " is not a power-of-two multiple of the page size (" +
                           std::to_string(page) + ")");
  }
  if (options.max_chunk_bytes == 0 || options.max_chunk_bytes % g != 0) {
    return InvalidArgument("SimBackend max_chunk_bytes " + std::to_string(options.max_chunk_bytes) +
                           " is not a non-zero multiple of the granularity");
  }
  const size_t buffer_bytes = options.staging_buffer_bytes;
  const size_t count = options.staging_buffer_count;
  if (buffer_bytes == 0 || count == 0 || count > UINT32_MAX || buffer_bytes > SIZE_MAX / count) {
    return InvalidArgument("SimBackend staging ring of " + std::to_string(count) + " x " +
                           std::to_string(buffer_bytes) + " bytes");
  }
  auto staging = std::make_unique_for_overwrite<std::byte[]>(buffer_bytes * count);
  std::vector<std::span<std::byte>> buffers;
  for (size_t i = 0; i < count; ++i) {
    buffers.emplace_back(staging.get() + i * buffer_bytes, buffer_bytes);
  }
  return std::unique_ptr<SimBackend>(new SimBackend(
      std::make_unique<Impl>(std::move(options), std::move(staging), std::move(buffers))));
}

SimBackend::SimBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SimBackend::~SimBackend() {
  // Work still queued may touch device memory, so it runs before anything is unmapped.
  impl_->drain_streams();
  MutexLock lock(impl_->mutex);
  // Letting each taken reservation go closes its memfds, then unmaps its range.
  for (DeviceRange range : impl_->ledger.reservation_ranges()) {
    impl_->ledger.take_reservation(range);
  }
}

std::string SimBackend::name() const { return "sim"; }
size_t SimBackend::granularity() const { return impl_->options.granularity; }
size_t SimBackend::staging_buffer_bytes() const { return impl_->ring.buffer_bytes(); }
size_t SimBackend::staging_buffer_count() const { return impl_->ring.count(); }

// ---- Address space and physical memory ------------------------------------------------------

Result<DeviceRange> SimBackend::reserve(size_t bytes) {
  if (bytes == 0) return InvalidArgument("reserve of 0 bytes");
  const size_t g = impl_->options.granularity;
  if (bytes > SIZE_MAX - g) return OutOfMemory("reserve of " + std::to_string(bytes) + " bytes");
  const size_t rounded = round_up(bytes, g);
  SIESTA_ASSIGN_OR_RETURN(std::byte * base, host_address_space::reserve(rounded, g));
  const DeviceRange range{reinterpret_cast<DeviceAddress>(base), rounded};
  MutexLock lock(impl_->mutex);
  impl_->ledger.add_reservation(range, HostReservation(range));
  impl_->publish_totals();
  return range;
}

Status SimBackend::commit(DeviceRange range) {
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(impl_->ledger.check_commit(range, impl_->options.granularity));

  Chunks chunks;
  Status failure;
  size_t done = 0;
  const uint64_t free_at_start = impl_->free_bytes(0);
  for (size_t index = 0; done < range.size; ++index) {
    const size_t bytes = std::min(impl_->options.max_chunk_bytes, range.size - done);
    // Checked per chunk, as a device runs out part-way through a large commit.
    const uint64_t free = impl_->free_bytes(done);
    if (bytes > free) {
      failure = OutOfMemory(
          "commit of " + std::to_string(range.size) + " bytes at " + range_string(range) +
          " needs more than the " + std::to_string(free_at_start) + " bytes free (device of " +
          std::to_string(impl_->options.capacity_bytes) + " bytes, " +
          std::to_string(impl_->external_usage.load()) + " used elsewhere): chunk " +
          std::to_string(index) + " needs " + std::to_string(bytes) + " bytes, " +
          std::to_string(free) + " are left");
      break;
    }
    Result<UniqueFd> chunk = impl_->commit_chunk(range.base + done, bytes, index);
    if (!chunk.ok()) {
      failure = chunk.status();
      break;
    }
    chunks.push_back(std::move(chunk).value());
    done += bytes;
  }
  if (!failure.ok()) {
    // Roll back every chunk of this call: PROT_NONE over the whole range drops the mapped
    // chunks, and `chunks` closes their memfds when it goes out of scope.
    Status dropped = host_address_space::drop(host_pointer(range.base), range.size);
    if (!dropped.ok()) {
      return Internal(failure.message() + "; rollback failed: " + dropped.message());
    }
    return failure;
  }
  impl_->ledger.add_commit(range, std::move(chunks));
  impl_->publish_totals();
  return Status::Ok();
}

Status SimBackend::decommit(DeviceRange range) {
  {
    MutexLock lock(impl_->mutex);
    SIESTA_RETURN_IF_ERROR(impl_->ledger.check_decommit(range, impl_->options.granularity));
    // From here on copies and zero() of the range, another decommit of it and a commit over
    // it are refused, and unreserve waits: the range stays as it is while the lock is let go.
    impl_->ledger.begin_release(range);
  }
  // Pending work may still read or write this range (unmapping under running kernels gave
  // illegal-address errors in other systems). Drained without the lock, which would otherwise
  // stall every other range's commit and copy for as long as the device is busy; no copy of
  // this range can be submitted after the mark above.
  impl_->drain_streams();
  MutexLock lock(impl_->mutex);
  Status dropped = host_address_space::drop(host_pointer(range.base), range.size);
  if (!dropped.ok()) {
    impl_->ledger.cancel_release(range);  // still mapped: back in use, as before the call
    impl_->release_ended.notify_all();
    return DeviceError(dropped.message());
  }
  impl_->ledger.take_commits(range);  // the memfds close here, after the unmap
  impl_->publish_totals();
  impl_->release_ended.notify_all();
  return Status::Ok();
}

void SimBackend::unreserve(DeviceRange range) {
  MutexLock lock(impl_->mutex);
  // A decommit inside the reservation that waits for the device ends first (its commits are
  // the decommit's until then), as it would have had it held the lock throughout.
  lock.wait(impl_->release_ended,
            [&]() SIESTA_REQUIRES(impl_->mutex) { return !impl_->ledger.releasing_within(range); });
  std::optional<Impl::Ledger::TakenReservation> taken = impl_->ledger.take_reservation(range);
  if (!taken) {
#ifndef NDEBUG
    (void)std::fprintf(stderr, "siesta: SimBackend::unreserve of %s, which is not a reservation\n",
                       range_string(range).c_str());
#endif
    return;
  }
  // Queued work may still touch the range; it must finish before the range is unmapped.
  impl_->drain_streams();
  taken.reset();  // closes the memfds, then unmaps the range, still under the lock
  impl_->publish_totals();
}

MemoryStats SimBackend::stats() const {
  MemoryStats stats;
  stats.reserved_bytes = impl_->reserved_bytes.load();
  stats.committed_bytes = impl_->committed_bytes.load();
  stats.device_total_bytes = impl_->options.capacity_bytes;
  stats.device_free_bytes = impl_->free_bytes(0);
  return stats;
}

void SimBackend::set_external_usage(uint64_t bytes) { impl_->external_usage.store(bytes); }

// ---- The device stream ------------------------------------------------------------------------

Status SimBackend::synchronize() {
  Status copies = impl_->copies.synchronize();
  Status work = impl_->work.synchronize();
  return copies.ok() ? work : copies;
}

Status SimBackend::wait(CopyTicket ticket) { return impl_->copies.wait(ticket); }

Result<CopyTicket> SimBackend::enqueue_work(std::function<Status()> work) {
  if (!work) return InvalidArgument("enqueue_work of an empty function");
  return impl_->work.submit(std::move(work));
}

Status SimBackend::wait_work(CopyTicket ticket) { return impl_->work.wait(ticket); }

Status SimBackend::zero(DeviceRange range) {
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(impl_->ledger.check_committed(range, "zero"));
  impl_->copies.submit([range] {
    std::memset(host_pointer(range.base), 0, range.size);
    return Status::Ok();
  });
  return Status::Ok();
}

Result<StagingBuffer> SimBackend::acquire_staging() { return impl_->ring.acquire(this); }
Result<StagingBuffer> SimBackend::acquire_staging_waiting(std::chrono::nanoseconds timeout) {
  return impl_->ring.acquire_waiting(this, timeout);
}

void SimBackend::release_staging(uint32_t slot) {
  const CopyTicket last = impl_->ring.last_copy(slot);
  // The copy's own error belongs to whoever waits for its ticket; giving the buffer back only
  // has to know the copy no longer uses it.
  if (last.sequence != 0) impl_->copies.wait(last).ignore();
  impl_->ring.mark_free(slot);
}

Result<CopyTicket> SimBackend::copy_to_staging(DeviceAddress source, size_t bytes,
                                               StagingBuffer& buffer) {
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(impl_->check_buffer(buffer, bytes, "copy_to_staging"));
  SIESTA_RETURN_IF_ERROR(impl_->ledger.check_committed({source, bytes}, "copy_to_staging source"));
  std::byte* destination = buffer.bytes().data();
  const CopyTicket ticket = impl_->copies.submit([=] {
    if (bytes != 0) std::memcpy(destination, host_pointer(source), bytes);
    return Status::Ok();
  });
  impl_->ring.note_copy(buffer.slot(), ticket);
  return ticket;
}

Result<CopyTicket> SimBackend::copy_from_staging(const StagingBuffer& buffer, size_t bytes,
                                                 DeviceAddress destination) {
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(impl_->check_buffer(buffer, bytes, "copy_from_staging"));
  SIESTA_RETURN_IF_ERROR(
      impl_->ledger.check_committed({destination, bytes}, "copy_from_staging destination"));
  const std::byte* source = buffer.bytes().data();
  const CopyTicket ticket = impl_->copies.submit([=] {
    if (bytes != 0) std::memcpy(host_pointer(destination), source, bytes);
    return Status::Ok();
  });
  impl_->ring.note_copy(buffer.slot(), ticket);
  return ticket;
}

// ---- Direct copies to and from registered host memory ----------------------------------------
// On the simulator device memory is host memory too: registering pins nothing; the copies
// run on the copy stream like the staging copies, with the same tickets.

Status SimBackend::register_host(std::span<std::byte> memory) {
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(impl_->registered.check_new(memory));
  impl_->registered.add(memory);
  return Status::Ok();
}

void SimBackend::unregister_host(std::byte* data) {
  MutexLock lock(impl_->mutex);
  impl_->registered.remove(data);
}

Result<CopyTicket> SimBackend::copy_to_host(DeviceAddress source, size_t bytes,
                                            std::byte* destination) {
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(
      impl_->registered.check_within(destination, bytes, "copy_to_host destination"));
  SIESTA_RETURN_IF_ERROR(impl_->ledger.check_committed({source, bytes}, "copy_to_host source"));
  return impl_->copies.submit([=] {
    if (bytes != 0) std::memcpy(destination, host_pointer(source), bytes);
    return Status::Ok();
  });
}

Result<CopyTicket> SimBackend::copy_from_host(const std::byte* source, size_t bytes,
                                              DeviceAddress destination) {
  MutexLock lock(impl_->mutex);
  SIESTA_RETURN_IF_ERROR(impl_->registered.check_within(source, bytes, "copy_from_host source"));
  SIESTA_RETURN_IF_ERROR(
      impl_->ledger.check_committed({destination, bytes}, "copy_from_host destination"));
  return impl_->copies.submit([=] {
    if (bytes != 0) std::memcpy(host_pointer(destination), source, bytes);
    return Status::Ok();
  });
}

}  // namespace siesta
