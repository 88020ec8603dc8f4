// Committing device memory under an address range as a few large physical chunks, each
// created (cuMemCreate), mapped (cuMemMap) and made read-write (cuMemSetAccess), with
// all-or-nothing semantics: a failure at any step of any chunk releases every chunk the
// call made.
//
// Thread rule: callers serialise commits (the backend's mutex); a context must be current.
#pragma once

#include <cstddef>
#include <vector>

#include "backends/cuda_vmm/cuda_driver_api.h"
#include "backends/cuda_vmm/cuda_handles.h"
#include "core/base/status.h"
#include "core/memory/commit_fault_hook.h"
#include "core/memory/memory_backend.h"

namespace siesta::cuda {

// One physical chunk and its mapping. Members are destroyed in reverse order, so a chunk
// that goes away is unmapped before its memory is released.
struct Chunk {
  PhysicalMemory memory;
  Mapping mapping;

  // Unmaps, then releases; returns the first error. Owns nothing afterwards.
  Status release();
};

// The chunks of one commit call, in address order.
using Allocation = std::vector<Chunk>;

// How a device's memory is committed; fixed when the backend is created.
struct CommitPlan {
  CUdevice device = 0;
  size_t granularity = 0;                       // every chunk is a multiple of it
  size_t chunk_bytes = 0;                       // largest chunk; a multiple of granularity
  const CommitFaultHook* fault_hook = nullptr;  // tests only; may be null or empty
};

// Fresh physical memory, read-write for plan.device, at exactly `range`, in chunks of at
// most plan.chunk_bytes. The fault hook is asked before each step of each chunk.
// REQUIRES: range is granularity-aligned, reserved and not committed (the ledger checked).
// Success: the chunks; the range is committed. Failure: the mapped status of the first
// failed step (or the hook's status); no byte of `range` stays committed.
Result<Allocation> commit_chunks(const DriverApi& api, const CommitPlan& plan, DeviceRange range);

// Releases every chunk of `allocation` (unmap, then release); keeps going after an error
// so that nothing leaks, and returns the first error. `allocation` is empty afterwards.
// REQUIRES: no device work still uses the memory (the caller synchronised).
Status release_chunks(Allocation& allocation);

// The allocation properties for pinned device memory on `device` (cuMemCreate and
// cuMemGetAllocationGranularity take the same description).
CUmemAllocationProp device_allocation_properties(CUdevice device);

}  // namespace siesta::cuda
