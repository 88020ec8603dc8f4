#include "backends/cuda_vmm/chunked_commit.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/memory/range_ledger.h"

namespace siesta::cuda {
namespace {

Status ask_hook(const CommitPlan& plan, CommitStep step, size_t chunk_index) {
  if (plan.fault_hook == nullptr || !*plan.fault_hook) return Status::Ok();
  return (*plan.fault_hook)(step, chunk_index);
}

// Creates, maps and opens one chunk at `at`. On failure, what was made so far is released
// by the returned-into Chunk's destructor.
Status commit_one(const DriverApi& api, const CommitPlan& plan, DeviceRange at, size_t index,
                  Chunk& chunk) {
  const std::string what = "chunk " + std::to_string(index) + " " + range_string(at);

  SIESTA_RETURN_IF_ERROR(ask_hook(plan, CommitStep::kCreate, index));
  const CUmemAllocationProp prop = device_allocation_properties(plan.device);
  CUmemGenericAllocationHandle handle{};
  SIESTA_RETURN_IF_ERROR(
      status_from_cu(api, api.cuMemCreate(&handle, at.size, &prop, 0),
                     "cuMemCreate(" + what + ", device " + std::to_string(plan.device) + ")"));
  chunk.memory = PhysicalMemory(api, handle);

  SIESTA_RETURN_IF_ERROR(ask_hook(plan, CommitStep::kMap, index));
  SIESTA_RETURN_IF_ERROR(
      status_from_cu(api, api.cuMemMap(at.base, at.size, 0, handle, 0), "cuMemMap(" + what + ")"));
  chunk.mapping = Mapping(api, at);

  SIESTA_RETURN_IF_ERROR(ask_hook(plan, CommitStep::kSetAccess, index));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = plan.device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return status_from_cu(
      api, api.cuMemSetAccess(at.base, at.size, &access, 1),
      "cuMemSetAccess(" + what + ", read-write for device " + std::to_string(plan.device) + ")");
}

}  // namespace

Status Chunk::release() {
  Status unmapped = mapping.reset();
  Status released = memory.reset();
  return unmapped.ok() ? released : unmapped;
}

CUmemAllocationProp device_allocation_properties(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;  // never exported
  return prop;
}

Result<Allocation> commit_chunks(const DriverApi& api, const CommitPlan& plan, DeviceRange range) {
  Allocation chunks;
  chunks.reserve((range.size + plan.chunk_bytes - 1) / plan.chunk_bytes);
  for (size_t offset = 0; offset < range.size; offset += plan.chunk_bytes) {
    const DeviceRange at{range.base + offset, std::min(plan.chunk_bytes, range.size - offset)};
    chunks.emplace_back();
    Status status = commit_one(api, plan, at, chunks.size() - 1, chunks.back());
    if (!status.ok()) {
      // Rollback. Nothing can have used the new memory yet (the call has not returned), so
      // there is no device work to wait for before unmapping.
      Status rollback = release_chunks(chunks);
      if (rollback.ok()) return status;
      return Status(status.code(),
                    status.message() + "; rollback failed too: " + rollback.to_string());
    }
  }
  return chunks;
}

Status release_chunks(Allocation& allocation) {
  Status first;
  for (Chunk& chunk : allocation) {
    Status status = chunk.release();
    if (first.ok() && !status.ok()) first = status;
  }
  allocation.clear();
  return first;
}

}  // namespace siesta::cuda
