// The chunk stage of SnapshotReader::read (core/snapshot_reader.h): reads every chunk record
// in file order on the calling thread, verifies (decrypts) them on a ChunkPipeline, and
// restores them into their regions.
//
// Threads and buffers:
//   - the calling thread reads each record with one read_at at its offset (the one file handle
//     stays on one thread), checks its place (region, index, length), and submits it;
//   - `threads` workers open the seals, each with its own ChunkSealer, writing the plaintext
//     straight into host memory or into a staging buffer lent for a device chunk;
//   - the calling thread retires opened chunks in file order and starts each device chunk's
//     copy_from_staging; never more staging buffers are held (opening or copying) than the ring
//     has, nor more than staging_buffer_count() when that is the tighter bound.
//   - at most `threads + 1` records are in flight (one being read, one per worker), raised to
//     staging_buffer_count() when device regions are restored; each owns one record buffer.
// A device chunk larger than a staging buffer (a file written with another backend) is a
// barrier: everything before it is finished, then it is opened and copied on the calling
// thread.
//
// Outcome: the first failure in file order -- a short read (Truncated), a read error, a chunk
// out of place or failing its seal (Corrupt), a device copy -- is the one returned, whatever
// the thread count: a failure the calling thread sees is returned only after every earlier
// chunk has been retired, and chunks are retired in order.
//
// Internal to the snapshot reader; not a public interface.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/chunk_sealer.h"
#include "core/file_system.h"
#include "core/memory_backend.h"
#include "core/record_buffer_pool.h"
#include "core/snapshot_region.h"

namespace siesta {

struct ChunkReadJob {
  const snapshot::SnapshotHeader& header;  // verified, and matching `regions`
  const snapshot::HeaderDigest& header_digest;
  std::span<const SnapshotRegion> regions;  // host regions with extents have memory
  MemoryBackend* backend;                   // non-null when a device region has extents
  const ProcessKey& key;
  size_t threads;    // verifying threads, >= 1
  std::string name;  // "snapshot '<path>'", for messages
  RecordBufferPool* record_buffers;  // null: the read's own buffers
};

// Reads chunk 0 at `first_offset` and every later one right after the previous.
// Success: every chunk verified and restored (device copies complete); returns the offset just
// past the last one (where the trailer starts).
// Failure: the first failure in file order (above); regions then hold an unspecified mix of old
// and restored bytes. Every thread is joined, every copy waited for and every staging buffer
// given back before it returns.
Result<uint64_t> read_snapshot_chunks(const ChunkReadJob& job, ReadableFile& file,
                                      uint64_t first_offset);

}  // namespace siesta
