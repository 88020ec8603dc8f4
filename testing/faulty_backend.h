// FaultyBackend: wraps any MemoryBackend (the CUDA one included) and makes one kind of call
// fail on its Nth use, so that tests can drive the offload logic through every failure the
// contract allows and check what state each one leaves behind (docs/ARCHITECTURE.md, the seams).
//
// Every call is forwarded to the inner backend (MemoryBackendWrapper) except the one a fault
// fires on. What each
// fault does, and the state it leaves, which is what the real backends promise:
//   kCommitOutOfMemory  commit() returns OutOfMemory without calling the inner backend:
//                       nothing of the range is committed; a later commit may succeed.
//   kCommitDeviceError  commit() returns DeviceError, likewise without committing anything.
//   kPartialCommit      the inner commit succeeds, then "access setup fails": the wrapper
//                       decommits the range again and returns DeviceError, so the caller
//                       sees the range decommitted (as a backend's own rollback leaves it).
//   kDecommitFails      decommit() returns DeviceError without calling the inner backend:
//                       the memory stays committed and its bytes intact.
//   kCopyFails          copy_to_staging() / copy_from_staging() / copy_to_host() /
//                       copy_from_host() return DeviceError when called: nothing is enqueued, the
//                       destination is untouched, and no ticket exists to wait for. (Enqueue-time
//                       rather than wait-time failure keeps the outcome exact: no half-done copy to
//                       model.)
// Calls are counted per operation (commit, decommit, copy: both directions share one
// count) from 1, including calls the inner backend would reject; the fault fires on call
// `nth_call` of its operation and, when `sticky`, on every call after it. An injected fault
// takes precedence over the inner backend's own argument checks, except for kPartialCommit:
// a commit the inner backend refuses returns the inner error and counts no fault.
// Every injected error's message contains "injected" and the plan's describe().
//
// Ownership: the wrapper either borrows the inner backend (which must outlive it) or owns it
// (the unique_ptr constructor); target() is the inner backend. Staging buffers are the inner
// backend's own: they are returned to it directly, never through the wrapper.
//
// Thread rule: every method may be called from any thread (counters are atomic; the plan is
// fixed at construction).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/memory/memory_backend_wrapper.h"
#include "testing/fault_schedule.h"

namespace siesta {

enum class FaultKind : uint8_t {
  kCommitOutOfMemory,
  kCommitDeviceError,
  kPartialCommit,
  kDecommitFails,
  kCopyFails,
};
inline constexpr int kFaultKindCount = 5;

// Stable name: "commit_out_of_memory", "commit_device_error", "partial_commit",
// "decommit_fails", "copy_fails".
std::string_view fault_kind_name(FaultKind kind);

struct FaultPlan {
  FaultKind kind = FaultKind::kCommitOutOfMemory;
  FaultSchedule when;  // which calls of the kind's operation fail

  FaultPlan() = default;
  FaultPlan(FaultKind fault, uint64_t nth_call, bool sticky)
      : kind(fault), when{nth_call, sticky} {}

  // A plan that never fires: the wrapper is transparent.
  static FaultPlan none() { return {}; }

  // Picks kind, then nth_call in [1, max_nth_call] and sticky (one time in four) from `seed`
  // with std::mt19937_64, so the same seed gives the same plan on every machine.
  // REQUIRES: max_nth_call >= 1 (0 is treated as 1).
  static FaultPlan from_seed(uint64_t seed, uint64_t max_nth_call = 8);

  bool fires_on(uint64_t call) const { return when.fires_on(call); }

  // One line, e.g. "decommit_fails on decommit call 3 and every later one" or "no fault".
  std::string describe() const;

  friend bool operator==(const FaultPlan&, const FaultPlan&) = default;
};

struct FaultCounters {
  uint64_t commit_calls = 0;
  uint64_t decommit_calls = 0;
  uint64_t copy_calls = 0;  // to and from staging and registered host memory
  uint64_t faults_fired = 0;
};

class FaultyBackend final : public MemoryBackendWrapper {
 public:
  // Borrows `inner`, which must outlive the wrapper.
  FaultyBackend(MemoryBackend& inner, FaultPlan plan);
  // Owns `inner`. REQUIRES: inner != nullptr.
  FaultyBackend(std::unique_ptr<MemoryBackend> inner, FaultPlan plan);

  const FaultPlan& plan() const { return plan_; }
  // Replaces the plan and restarts every call count from zero, so a test can aim a fault at
  // one phase (e.g. the restore after a save). REQUIRES: no other call in flight.
  void set_plan(FaultPlan plan);
  FaultCounters counters() const;

  std::string name() const override;  // "faulty(<inner name>)"
  Status commit(DeviceRange range) override;
  Status decommit(DeviceRange range) override;
  Result<CopyTicket> copy_to_staging(DeviceAddress source, size_t bytes,
                                     StagingBuffer& buffer) override;
  Result<CopyTicket> copy_from_staging(const StagingBuffer& buffer, size_t bytes,
                                       DeviceAddress destination) override;
  Result<CopyTicket> copy_to_host(DeviceAddress source, size_t bytes,
                                  std::byte* destination) override;
  Result<CopyTicket> copy_from_host(const std::byte* source, size_t bytes,
                                    DeviceAddress destination) override;

 private:
  // True when the plan is of `kind` and fires on call number `call` of its operation.
  bool fires(FaultKind kind, uint64_t call) const;
  // The injected error (counted in faults_fired): "injected <what> (fault plan: <plan>)".
  Status injected(StatusCode code, const std::string& what);
  // Counts one copy call (every direction shares the count) and returns the injected
  // DeviceError when kCopyFails fires on it; `direction` ("to staging", "from host"...) names
  // the call in the message. OK otherwise.
  Status count_copy(const char* direction);

  FaultPlan plan_;
  std::atomic<uint64_t> commit_calls_{0};
  std::atomic<uint64_t> decommit_calls_{0};
  std::atomic<uint64_t> copy_calls_{0};
  std::atomic<uint64_t> faults_fired_{0};
};

}  // namespace siesta
