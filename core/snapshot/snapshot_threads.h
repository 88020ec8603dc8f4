// How many threads a snapshot write or read seals or verifies its chunks on
// (SnapshotWriteOptions::threads, SnapshotReadOptions::threads; 0 asks for the default), for
// the callers that report it, such as the benchmarks. The threads are the chunk pipeline's
// (core/snapshot/internal/chunk_pipeline.h), which defines these two in chunk_pipeline.cc.
//
// Thread rule: none (pure functions).
#pragma once

#include <cstddef>
#include <cstdint>

namespace siesta {

// The default thread count for snapshot reads and writes: min(4, hardware threads), at least
// 1. Past 4 the file and the device copies, which stay on one thread, are the limit.
size_t default_snapshot_threads();

// `requested` threads, or default_snapshot_threads() for 0; at most 64.
size_t resolve_snapshot_threads(uint32_t requested);

}  // namespace siesta
