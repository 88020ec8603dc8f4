// A test seam inside a backend's commit: called before each step of mapping each physical
// chunk, so that a test can make a real backend fail half-way through a commit (the chunk
// is created and mapped, then access setup fails) and check that its own rollback leaves
// the range decommitted. Production code leaves the hook empty.
#pragma once

#include <cstddef>
#include <functional>

#include "core/base/status.h"

namespace siesta {

enum class CommitStep {
  kCreate,     // physical memory for one chunk is created (cuMemCreate / memfd)
  kMap,        // the chunk is mapped at its address (cuMemMap / mmap MAP_FIXED)
  kSetAccess,  // the chunk is made read-write (cuMemSetAccess / mprotect)
};

// Returns OK to let the step run, or the error the step should fail with (the message
// should say "injected"). `chunk_index` counts chunks within one commit call from 0.
using CommitFaultHook = std::function<Status(CommitStep step, size_t chunk_index)>;

}  // namespace siesta
