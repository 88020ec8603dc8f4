// The chunk stage of SnapshotReader::read (core/snapshot/snapshot_reader.h): reads and verifies
// (decrypts) every chunk record on a ChunkPipeline's threads and restores them into their
// regions, in file order.
//
// Threads and buffers:
//   - the calling thread places each chunk (its record's offset, which the header fixes; its
//     destination) and submits it. Device chunks whose destinations follow one another share
//     a staging buffer (a run, up to 2 MiB or one chunk when chunks are larger), each at its
//     place in it;
//   - `threads` workers each read a record at its offset (ReadableFile::read_at is safe from
//     several threads): its chunk header, checked for its place (region, index, length), then
//     its payload straight into host memory or into its run's staging buffer, then its tag; and
//     open the seal there, in place, with their own ChunkSealer. Reading on the workers spreads
//     the copy out of the page cache over several cores (on the H200 one thread's copy was the
//     restore's limit), and reading into the destination spares a pass over the bytes;
//   - the calling thread retires chunks in file order; when a run's last chunk retires it
//     starts the run's copy_from_staging, one copy for the run. Waiting for the oldest chunk, it
//     reads and opens chunks the pool's threads have not come for yet (they may still be
//     waking), as a worker would. Never more staging buffers are held (filling or copying) than
//     the ring has, nor more than staging_buffer_count() when that is the tighter bound;
//   - at most `threads + 1` chunks are in flight, raised to staging_buffer_count() when device
//     regions are restored; none needs a buffer of its own.
// A device chunk larger than a staging buffer (a file written with another backend) is a
// barrier: everything before it is finished, then it is read, opened and copied on the calling
// thread.
//
// Outcome: the first failure in file order -- a short read (Truncated), a read error, a chunk
// out of place or failing its seal (Corrupt), a device copy -- is the one returned, whatever
// the thread count and whichever read the file system saw first: every chunk's failure comes
// back when it is retired, and chunks are retired in order.
//
// Internal to the snapshot reader; not a public interface.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "core/base/file_system.h"
#include "core/memory/memory_backend.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_region.h"

namespace siesta {

struct ChunkReadJob {
  const snapshot::SnapshotHeader& header;  // verified, and matching `regions`
  const snapshot::HeaderDigest& header_digest;
  std::span<const SnapshotRegion> regions;  // host regions with extents have memory
  MemoryBackend* backend;                   // non-null when a device region has extents
  const ProcessKey& key;
  size_t threads;                         // verifying threads, >= 1
  std::string name;                       // "snapshot '<path>'", for messages
  std::chrono::nanoseconds staging_wait;  // for a ring another pipeline holds whole
  // Called, on whichever thread sees it, when a chunk fails or the read ends in failure: not
  // every byte of the file will then be read (a chunk that fails its header's check is read no
  // further), so a file that waits for its bytes to be read in order must stop waiting
  // (ReadAheadFile::abandon). May be called more than once. Empty: nothing to tell.
  std::function<void()> on_failure = {};
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
