#include "testing/faulty_backend.h"

#include <utility>

namespace siesta {
namespace {

bool is_commit_fault(FaultKind kind) {
  return kind == FaultKind::kCommitOutOfMemory || kind == FaultKind::kCommitDeviceError ||
         kind == FaultKind::kPartialCommit;
}

std::string_view operation_of(FaultKind kind) {
  if (is_commit_fault(kind)) return "commit";
  if (kind == FaultKind::kDecommitFails) return "decommit";
  return "copy";
}

}  // namespace

std::string_view fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kCommitOutOfMemory: return "commit_out_of_memory";
    case FaultKind::kCommitDeviceError: return "commit_device_error";
    case FaultKind::kPartialCommit: return "partial_commit";
    case FaultKind::kDecommitFails: return "decommit_fails";
    case FaultKind::kCopyFails: return "copy_fails";
  }
  return "unknown";
}

FaultPlan FaultPlan::from_seed(uint64_t seed, uint64_t max_nth_call) {
  SeededDraws draws(seed);
  FaultPlan plan;
  plan.kind = static_cast<FaultKind>(draws.below(kFaultKindCount));
  plan.when = FaultSchedule::draw(draws, max_nth_call);
  return plan;
}

std::string FaultPlan::describe() const {
  if (when.never()) return "no fault";
  return std::string(fault_kind_name(kind)) + " " + when.describe(operation_of(kind));
}

FaultyBackend::FaultyBackend(MemoryBackend& inner, FaultPlan plan)
    : MemoryBackendWrapper(inner), plan_(plan) {}

FaultyBackend::FaultyBackend(std::unique_ptr<MemoryBackend> inner, FaultPlan plan)
    : MemoryBackendWrapper(std::move(inner)), plan_(plan) {}

std::string FaultyBackend::name() const { return "faulty(" + target().name() + ")"; }

void FaultyBackend::set_plan(FaultPlan plan) {
  plan_ = plan;
  commit_calls_ = 0;
  decommit_calls_ = 0;
  copy_calls_ = 0;
}

FaultCounters FaultyBackend::counters() const {
  return {commit_calls_.load(), decommit_calls_.load(), copy_calls_.load(), faults_fired_.load()};
}

bool FaultyBackend::fires(FaultKind kind, uint64_t call) const {
  return plan_.kind == kind && plan_.fires_on(call);
}

Status FaultyBackend::injected(StatusCode code, const std::string& what) {
  faults_fired_.fetch_add(1);
  return Status(code, "injected " + what + " (fault plan: " + plan_.describe() + ")");
}

Status FaultyBackend::commit(DeviceRange range) {
  const uint64_t call = commit_calls_.fetch_add(1) + 1;
  if (!is_commit_fault(plan_.kind) || !plan_.fires_on(call)) return target().commit(range);
  const std::string what =
      "on commit call " + std::to_string(call) + " of " + std::to_string(range.size) + " bytes";
  if (plan_.kind == FaultKind::kCommitOutOfMemory) {
    return injected(StatusCode::kOutOfMemory, "out of device memory " + what);
  }
  if (plan_.kind == FaultKind::kCommitDeviceError) {
    return injected(StatusCode::kDeviceError, "driver error " + what);
  }
  // kPartialCommit: the memory is mapped, then setting its access "fails". A commit the inner
  // backend refuses by itself never got as far as access setup, so its own error stands.
  SIESTA_RETURN_IF_ERROR(target().commit(range));
  // Undo the mapping as a backend's own rollback would: the caller sees it decommitted.
  Status undone = target().decommit(range);
  if (!undone.ok()) {
    faults_fired_.fetch_add(1);
    return Internal("injected partial commit " + what + " could not be rolled back (" +
                    plan_.describe() + "): " + undone.to_string());
  }
  return injected(StatusCode::kDeviceError, "access setup failure after mapping " + what);
}

Status FaultyBackend::decommit(DeviceRange range) {
  const uint64_t call = decommit_calls_.fetch_add(1) + 1;
  if (!fires(FaultKind::kDecommitFails, call)) return target().decommit(range);
  return injected(StatusCode::kDeviceError, "driver error on decommit call " +
                                                std::to_string(call) + " of " +
                                                std::to_string(range.size) + " bytes");
}

Status FaultyBackend::count_copy(const char* direction) {
  const uint64_t call = copy_calls_.fetch_add(1) + 1;
  if (!fires(FaultKind::kCopyFails, call)) return Status::Ok();
  return injected(StatusCode::kDeviceError,
                  "copy failure on copy call " + std::to_string(call) + " (" + direction + ")");
}

Result<CopyTicket> FaultyBackend::copy_to_staging(DeviceAddress source, size_t bytes,
                                                  StagingBuffer& buffer) {
  SIESTA_RETURN_IF_ERROR(count_copy("to staging"));
  return target().copy_to_staging(source, bytes, buffer);
}

Result<CopyTicket> FaultyBackend::copy_from_staging(const StagingBuffer& buffer, size_t bytes,
                                                    DeviceAddress destination) {
  SIESTA_RETURN_IF_ERROR(count_copy("from staging"));
  return target().copy_from_staging(buffer, bytes, destination);
}

Result<CopyTicket> FaultyBackend::copy_to_host(DeviceAddress source, size_t bytes,
                                               std::byte* destination) {
  SIESTA_RETURN_IF_ERROR(count_copy("to host"));
  return target().copy_to_host(source, bytes, destination);
}

Result<CopyTicket> FaultyBackend::copy_from_host(const std::byte* source, size_t bytes,
                                                 DeviceAddress destination) {
  SIESTA_RETURN_IF_ERROR(count_copy("from host"));
  return target().copy_from_host(source, bytes, destination);
}

}  // namespace siesta
