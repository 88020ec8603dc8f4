// How many threads a snapshot write seals its chunks on and a read reads and opens them on
// (SnapshotWriteOptions::threads, SnapshotReadOptions::threads; 0 asks for the default), for
// the callers that report it, such as the benchmarks. The threads are the chunk pipeline's
// (core/snapshot/internal/chunk_pipeline.h), which defines these in chunk_pipeline.cc.
//
// Thread rule: none (pure functions).
#pragma once

#include <cstddef>
#include <cstdint>

namespace siesta {

// The default for writes: min(4, hardware threads), at least 1. A save is bounded by the disk
// (about 1.5 GB/s with its sync on the H100 and H200 machines, sealing on 4 threads), and each
// write thread holds a record buffer of its own.
size_t default_snapshot_write_threads();

// The default for reads: three quarters of the hardware threads, at least min(4, hardware
// threads) and at most 16. A read from the page cache is bounded by the cores that copy out of
// it and decrypt (one thread: about 3 GB/s), and its threads need no buffer (each chunk is
// read into its destination). On the 16-core H100 machine (2026-12-05, 1 GiB): 4 threads
// 10.6 GB/s, 8 23.8, 12 30.6, 15 37.9; the rest of the cores are left to the engine.
size_t default_snapshot_read_threads();

// The chunk size a file of `payload_bytes` is written in when its writer leaves the choice to
// the reader's threads: the largest power of two no larger than payload / (2 x
// default_snapshot_read_threads()), within [kMinSpreadChunkBytes, largest]. A chunk is read and
// opened on one thread, so a small snapshot in 4 MiB chunks keeps most read threads idle (8 MiB
// in two chunks: each ~1 ms of copy and decryption on one core); cut finer, every thread has
// work, at a cost per chunk of three small reads and a seal's set-up (microseconds).
inline constexpr uint32_t kMinSpreadChunkBytes = 256u << 10;
uint32_t chunk_bytes_for_readers(uint64_t payload_bytes, uint32_t largest);

// `requested` threads, or the default above for 0; at most 64.
size_t resolve_snapshot_write_threads(uint32_t requested);
size_t resolve_snapshot_read_threads(uint32_t requested);

}  // namespace siesta
