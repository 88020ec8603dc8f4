// SimBackend: the MemoryBackend on host virtual memory, so that the offload logic, its
// property tests and its fault injection run on machines without a GPU.
//
// It behaves as the CUDA VMM backend does, with host mechanisms underneath:
//   reserve   mmap(PROT_NONE) of the range (host_address_space::reserve)
//   commit    per chunk: a memfd of the chunk's size (the "physical allocation", like
//             cuMemCreate), mapped MAP_SHARED|MAP_FIXED at exactly its address (cuMemMap),
//             made read-write (cuMemSetAccess); a failure at any step unmaps and closes
//             every chunk of the call, leaving the range decommitted
//   decommit  waits for the device's streams, maps PROT_NONE over the range and closes the
//             memfds: the pages go back to the kernel (RSS falls), a stray access faults.
//             It waits without the backend's lock, so other ranges' commits and copies go on
//             meanwhile; copies and zero() of the range itself are refused from the start
//             of the call (FailedPrecondition: being decommitted), as after its end
//   streams   two, each a worker thread running its jobs in order: the copy stream (staging
//             copies and zero(), as CudaVmmBackend's copy stream) and the work stream
//             (enqueue_work(): the host kernels, as CudaKernels' stream). Nothing orders one
//             against the other except synchronize(), which waits for both, and waiting for
//             a ticket -- exactly what the GPU promises.
//
// Hazards, modelled so that a missing synchronisation fails a test instead of passing by luck
// (SimHazards; both on unless a benchmark turns them off):
//   - Jobs run only when something waits for them (a ticket, synchronize(), decommit): a copy
//     of memory a kernel has yet to write copies the old bytes, and a kernel over memory a
//     copy has yet to fill reads the old bytes, every time.
//   - Freshly committed memory holds kSimPoisonByte in every byte, as a GPU's holds whatever
//     was there before (a memfd's zeroed pages would hide a missing re-initialisation).
// A device capacity makes commits beyond it fail with OutOfMemory, chunk by chunk as a real
// device does (the message names the bytes asked for and the bytes free); set_external_usage()
// models another process taking device memory while a session sleeps.
//
// Errors of stream work: wait(t) returns the error of t's job; synchronize() returns the first
// error of any job since the previous synchronize(). decommit() and unreserve() wait for the
// streams without taking their errors.
//
// Thread rule: every method may be called from any thread. Work run on the stream (copies,
// zero(), enqueue_work() jobs) must not call back into this backend, as a CUDA host function
// must not call CUDA: decommit() and unreserve() wait for the streams (unreserve while holding
// the backend's lock).
// Every StagingBuffer must be given back before the backend is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/memory/commit_fault_hook.h"
#include "core/memory/memory_backend.h"

namespace siesta {

// Every byte of freshly committed memory (0xff: a NaN in every f32 and f16 lane).
inline constexpr std::byte kSimPoisonByte{0xff};

struct SimHazards {
  bool run_work_when_waited = true;  // else each stream runs its jobs as soon as it can
  bool poison_fresh_memory = true;   // else fresh memory is the memfd's zeros
  // Both off: the fastest simulator, for benchmarks that measure the offload path itself.
  static SimHazards none() { return {false, false}; }
};

struct SimBackendOptions {
  uint64_t capacity_bytes = 8ull << 30;    // the simulated device's memory
  size_t granularity = 2u << 20;           // as the H200 reports; tests may
                                           // use any power-of-two multiple of the page size
  size_t max_chunk_bytes = 256u << 20;     // largest physical chunk one commit creates
  size_t staging_buffer_bytes = 4u << 20;  // each buffer of the staging ring
  size_t staging_buffer_count = 4;
  SimHazards hazards;                 // what the simulator models of a GPU's hazards
  CommitFaultHook commit_fault_hook;  // tests only
};

class SimBackend final : public MemoryBackend {
 public:
  // Failure: InvalidArgument for a granularity that is not a power-of-two multiple of the
  // page size (reservations are aligned to it), a max_chunk_bytes that is not a non-zero
  // multiple of the granularity (chunks are whole granules, as on CUDA), or an empty staging
  // ring. The staging ring is allocated here, once.
  // Destruction runs the work still queued, then unmaps every reservation and closes every
  // memfd.
  static Result<std::unique_ptr<SimBackend>> create(SimBackendOptions options = {});
  ~SimBackend() override;

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

  // Enqueues `work` on the work stream, after everything enqueued there before it (and
  // unordered with the copy stream). Host kernels run this way, so that "pending device
  // work" is real on the simulator too. The returned ticket is the work stream's: wait for it
  // with wait_work() (wait() takes copy tickets). Failure: InvalidArgument for an empty
  // function. `work` must not call this backend.
  Result<CopyTicket> enqueue_work(std::function<Status()> work);
  // Blocks until the work of `ticket` (and everything enqueued before it on the work stream)
  // has run; returns that work's status. InvalidArgument for a ticket never issued.
  Status wait_work(CopyTicket ticket);

  // Device memory taken by "another process": commits see capacity minus this.
  void set_external_usage(uint64_t bytes);

 private:
  struct Impl;
  explicit SimBackend(std::unique_ptr<Impl> impl);
  void release_staging(uint32_t slot) override;
  std::unique_ptr<Impl> impl_;
};

}  // namespace siesta
