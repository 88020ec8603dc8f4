// HostVmm: host memory whose pages can be given back to the kernel and re-created later at
// the same address. Host checkpoint payloads live here, so that a sleeping session's host
// memory really leaves the process (RSS falls: other systems never returned host memory after a
// wake) while every pointer into it stays valid for the restore.
//
// Mechanism: reserve = mmap(PROT_NONE, MAP_NORESERVE); commit = fresh anonymous zeroed pages
// mapped MAP_FIXED read-write over the range; release = the range mapped PROT_NONE again with
// MAP_FIXED, which drops the pages. Between release and commit a stray access faults.
//
// Thread rule: a HostRange is used by one thread at a time; HostVmm::stats() may be called
// from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "core/base/status.h"

namespace siesta {

struct HostVmmStats {
  uint64_t reserved_bytes = 0;
  uint64_t committed_bytes = 0;
};

class HostVmm;
class HostRange;

// A test seam, as CommitFaultHook is in the backends: asked before every commit() and
// release() of a HostVmm's ranges, so that a test can make the kernel's refusal happen on the
// Nth call. A non-OK result is that call's result, and the range is left as it was (nothing
// mapped or dropped). Production code leaves it empty.
enum class HostVmmCall : uint8_t { kCommit, kRelease };
using HostFaultHook = std::function<Status(HostVmmCall call, const HostRange& range)>;

// One reserved host range (RAII: unmapped on destruction). Starts released.
class HostRange {
 public:
  HostRange(HostRange&& other) noexcept;
  HostRange& operator=(HostRange&& other) noexcept;
  HostRange(const HostRange&) = delete;
  HostRange& operator=(const HostRange&) = delete;
  ~HostRange();

  std::byte* data() const { return base_; }
  size_t size() const { return size_; }
  std::span<std::byte> bytes() const { return {base_, size_}; }
  bool committed() const { return committed_; }

  // Maps fresh zeroed read-write pages at data(). Success: committed() is true.
  // Failure: OutOfMemory when the kernel refuses the pages; the range stays released.
  // REQUIRES: !committed() (else FailedPrecondition).
  Status commit();

  // Returns the pages to the kernel; the address stays reserved and faults on access.
  // REQUIRES: committed() (else FailedPrecondition).
  Status release();

 private:
  friend class HostVmm;
  HostRange(HostVmm* owner, std::byte* base, size_t size)
      : owner_(owner), base_(base), size_(size) {}
  void reset();

  HostVmm* owner_ = nullptr;
  std::byte* base_ = nullptr;
  size_t size_ = 0;
  bool committed_ = false;
};

class HostVmm {
 public:
  HostVmm() = default;
  HostVmm(const HostVmm&) = delete;
  HostVmm& operator=(const HostVmm&) = delete;

  static size_t page_size();

  // Reserves `bytes` (rounded up to page_size()) of address space; nothing is committed.
  // Failure: InvalidArgument for 0 bytes, OutOfMemory when the address space is exhausted.
  // The HostVmm must outlive every range it returns.
  Result<HostRange> reserve(size_t bytes);

  HostVmmStats stats() const { return {reserved_.load(), committed_.load()}; }

  // Tests only (HostFaultHook). REQUIRES: no commit() or release() of this HostVmm's ranges
  // in flight. Empty: none.
  void set_fault_hook(HostFaultHook hook) { fault_hook_ = std::move(hook); }

 private:
  friend class HostRange;
  Status injected_fault(HostVmmCall call, const HostRange& range) const {
    return fault_hook_ ? fault_hook_(call, range) : Status::Ok();
  }

  HostFaultHook fault_hook_;
  std::atomic<uint64_t> reserved_{0};
  std::atomic<uint64_t> committed_{0};
};

}  // namespace siesta
