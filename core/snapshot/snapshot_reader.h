// SnapshotReader: validates a snapshot file before it trusts it, then restores its chunks
// into the live session's regions (device regions through the backend's staging ring, host
// regions directly).
//
// Checks, in this order; the first that fails decides the outcome:
//   NotFound     no file (FailedPrecondition for a symlink or anything but a regular file --
//                a FIFO, a directory, a device --, from the file system, which opens without
//                blocking: a FIFO planted in a snapshot's place cannot stall a read)
//   Corrupt      bad magic
//   Truncated    shorter than the fixed prefix or than the header says it is
//   Unsupported  another format version (a file of another siesta build: discard it)
//   Corrupt      header length out of bounds, malformed header (bounds, grammar)
//   Foreign      written in another mode (encrypted / digest / export), or, in the session
//                modes, by another process (its nonce is not ours, so its key is not ours)
//   Corrupt      the header's seal does not verify
//   Truncated    the file is shorter than the header's chunks and trailer need
//   Corrupt      the file is longer than that (bytes after the trailer)
//   Foreign      another session fingerprint, or a region table that is not the live one
//                (count, names, persist kinds, sizes), another owner (another session's file,
//                or an export renamed), or another generation than the one the caller expects
//                (an older snapshot of the same session put back: a replay)
//   Expired      clock.unix_seconds() >= the header's expiry (snapshot::is_expired: an
//                export with expiry kNeverExpires never expires), unless the caller reads
//                an older segment (SnapshotReadOptions::check_expiry)
//   Corrupt      any chunk out of place (region, index, length) or failing its seal, or a
//                trailer that does not match
// The file's size is read once; a file that shrinks while being read is Truncated. Nothing
// is allocated beyond what the (size-checked) file holds, whatever its bytes say.
//
// Chunks are read, each with one read_at at the offset the header fixes, and verified
// (decrypted) on `threads` worker threads straight into host regions or staging buffers, whose
// copies to the device are started in file order (core/snapshot/internal/snapshot_chunk_reader.h).
// With several threads the outcome is the same as with one: the first failing chunk in file
// order decides it.
//
// Thread rule: one read() at a time per reader. Every thread a read starts is joined before it
// returns, on every path.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/base/clock.h"
#include "core/base/file_system.h"
#include "core/base/read_ahead_file.h"
#include "core/memory/memory_backend.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/cold_read_choice.h"
#include "core/snapshot/snapshot_region.h"

namespace siesta {

struct SnapshotReadOptions {
  std::string path;
  snapshot::SnapshotMode mode = snapshot::SnapshotMode::kSessionEncrypted;  // expected mode
  snapshot::Fingerprint fingerprint{};                                      // the live session's
  // The generation the file must carry (SnapshotWriteOptions::generation): the one the caller
  // last wrote; 0 for exports, which have none.
  uint64_t generation = 0;
  // The owner the file must name (SnapshotWriteOptions::owner): the session's name, or the
  // export's.
  std::string owner{};
  // The process the file must name (session modes): unset, this key's; a file adopted from an
  // earlier process under the same key (a restart with the same key file) names its writer.
  std::optional<snapshot::ProcessNonce> process_nonce{};
  // False for an older segment of a snapshot in segments (the Offloader's delta saves): the
  // expiry that counts is the newest segment's, which is read, and checked, last. Every other
  // check stands.
  bool check_expiry = true;
  // Threads that read and verify chunks; 0: default_snapshot_read_threads() (three quarters
  // of the hardware threads, 4 to 16; core/snapshot/snapshot_threads.h).
  uint32_t threads = 0;
  // How long to wait for a staging buffer when another session's pipeline holds the whole
  // ring and nothing of this one's is in flight (MemoryBackend::acquire_staging_waiting):
  // then the ring's FailedPrecondition.
  std::chrono::nanoseconds staging_wait = MemoryBackend::kStagingShareTimeout;
  // How a file out of the page cache is read. It is "out" when less than half of its first
  // chunks' bytes (up to 1 MiB) are cached (ReadableFile::cached_bytes). kAroundCacheWhenCold:
  // such a file is read in order around the cache (O_DIRECT) by `read_ahead`'s loader threads,
  // ahead of the chunk threads (core/base/read_ahead_file.h), where the file system has such
  // reads, or the way `cold_read_choice` picks when one is given (it learns from each such
  // read, core/snapshot/cold_read_choice.h). kThroughCache: every read goes through the cache.
  enum class ColdRead { kAroundCacheWhenCold, kThroughCache };
  ColdRead cold_read = ColdRead::kAroundCacheWhenCold;
  ColdReadChoice* cold_read_choice = nullptr;  // outlives the read
  ReadAheadOptions read_ahead{};
};

// What read_header() checks: read()'s checks down to the fingerprint (the region table is one
// of the fingerprint's inputs), and the expiry, but not the owner or the generation, which the
// caller learns from the result.
struct SnapshotHeaderCheck {
  std::string path;
  snapshot::SnapshotMode mode = snapshot::SnapshotMode::kSessionEncrypted;
  snapshot::Fingerprint fingerprint{};
  std::optional<snapshot::ProcessNonce> process_nonce{};  // as in SnapshotReadOptions
  // Any process under this key may have written it (process_nonce then unused): what a
  // restart's adoption reads, since a file adopted once keeps its first writer's nonce in its
  // header under the adopter's file name. The header names its writer (header.process_nonce),
  // and the restore expects that one.
  bool any_process = false;
  bool check_expiry = true;
};

struct SnapshotReadResult {
  uint64_t file_bytes = 0;
  uint64_t payload_bytes = 0;  // bytes restored into the regions
  snapshot::SnapshotHeader header;
  bool cold = false;               // the file was found out of the page cache
  bool read_around_cache = false;  // and read around it
};

class SnapshotReader {
 public:
  // `backend` may be null when no region is on the device. All references must outlive the
  // reader.
  SnapshotReader(FileSystem& fs, const Clock& clock, const ProcessKey& key, MemoryBackend* backend)
      : fs_(fs), clock_(clock), key_(key), backend_(backend) {}

  // Validates the file (above) and copies each saved extent into `regions`, which must list
  // the live session's regions in the order they were written. Only the extents the file
  // saved are written; other bytes of the regions are left as they are.
  // Success: every saved byte is in place (device copies complete), the whole file verified.
  // Failure: the typed outcome above; once chunks are being restored, the regions hold an
  // unspecified mix of old and restored bytes and the caller must discard the session state.
  Result<SnapshotReadResult> read(const SnapshotReadOptions& options,
                                  std::span<const SnapshotRegion> regions);

  // Authenticates a file's header without reading a chunk: what a restart reads of each
  // snapshot it may adopt. Success: the header (whose owner, generation, expiry and regions
  // are then as authentic as a read's) and the file's size; payload_bytes 0. Failure: read()'s
  // outcomes above, in its order, down to the fingerprint, then Expired (unless not checked).
  // Nothing is proven about the chunks: a read() of the file still checks every one.
  Result<SnapshotReadResult> read_header(const SnapshotHeaderCheck& check);

 private:
  struct OpenedFile;
  Result<OpenedFile> open_checked(const std::string& path, snapshot::SnapshotMode mode,
                                  const snapshot::Fingerprint& fingerprint,
                                  const std::optional<snapshot::ProcessNonce>& process_nonce,
                                  bool any_process, const std::string& name);
  Status check_expiry(const snapshot::SnapshotHeader& header, const std::string& name) const;

  FileSystem& fs_;
  const Clock& clock_;
  const ProcessKey& key_;
  MemoryBackend* backend_;
};

// Reads only the fixed start of the file at `path` (its prefix and fixed fields, decoded by
// snapshot::decode_fixed_fields) and returns its expiry (snapshot::expiry_deadline). The
// store calls it on the snapshots of other owners, dead ones included, whose key is gone, so
// the header seal cannot be checked and the value is taken unauthenticated. That is enough
// for its one use, deciding whether to delete a file in a directory only this user can
// write. A durable export whose expiry_unix is 0 ("never") gives INT64_MAX, so that
// "expiry <= now" never holds for it.
// Failure: NotFound (no file); FailedPrecondition for a symlink or anything but a regular
// file, found without blocking; Corrupt (bad magic, flags or header length); Truncated
// (shorter than the fixed header or than its header length); Unsupported (another format
// version); IoError.
Result<int64_t> read_snapshot_expiry(FileSystem& fs, const std::string& path);

}  // namespace siesta
