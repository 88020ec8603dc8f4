// The chunk stage of SnapshotWriter::write (core/snapshot/snapshot_writer.h): seals every chunk on
// a ChunkPipeline and writes each at its offset, in file order, from the calling thread.
//
// Threads and buffers:
//   - `threads` workers seal, each with its own ChunkSealer for this file (chunk_pipeline.h);
//   - the calling thread walks the chunks in file order: it checks cancellation, starts the
//     device copy of a chunk into a staging buffer, submits the seal, and retires sealed chunks
//     in order, writing each with write_at at its offset (so the one file handle is used by
//     one thread, and writes reach the file system in file order: the same calls, in the
//     same order, as a one-thread writer);
//   - at most `threads + 1` chunks are in flight (the one being written and one per worker),
//     raised to staging_buffer_count() when device regions are written, so that many device
//     copies run ahead; never more staging buffers are held than the ring has. Each in-flight
//     encrypted chunk owns one record buffer (chunk header || ciphertext || tag); a digest
//     chunk is written from where its plaintext lies (host memory or its staging buffer).
//
// Internal to the snapshot writer; not a public interface.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>

#include "core/base/file_system.h"
#include "core/memory/memory_backend.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/record_buffer_pool.h"
#include "core/snapshot/snapshot_region.h"

namespace siesta {

struct ChunkWriteJob {
  const snapshot::SnapshotHeader& header;  // validated; its chunk_bytes is final
  const snapshot::HeaderDigest& header_digest;
  std::span<const SnapshotRegion> regions;  // as validated by the writer
  MemoryBackend* backend;                   // non-null when a device region has extents
  const ProcessKey& key;
  const std::atomic<bool>* cancel;        // may be null
  const std::atomic<bool>* cancel_also;   // may be null: either stops the write
  size_t threads;                         // sealing threads, >= 1
  std::string name;                       // "snapshot '<path>'", for messages
  uint64_t writeback_window;              // dirty bytes allowed behind the last write (> 0)
  RecordBufferPool* record_buffers;       // null: the write's own buffers
  std::chrono::nanoseconds staging_wait;  // for a ring another pipeline holds whole
};

// Writes chunk 0 at `first_offset` and every later one right after the previous.
// Success: every chunk is written; returns the offset just past the last one.
// Failure: the first error in file order of a seal, device copy or write (chunks after it may
// or may not have been written), or Cancelled when *job.cancel or *job.cancel_also was true before
// some chunk. Every thread is joined and every staging buffer given back before it returns.
Result<uint64_t> write_snapshot_chunks(const ChunkWriteJob& job, WritableFile& file,
                                       uint64_t first_offset, uint64_t chunk_count);

}  // namespace siesta
