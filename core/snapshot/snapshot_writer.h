// SnapshotWriter: writes a session's regions into one snapshot file (docs/SNAPSHOT_FORMAT.md)
// atomically: either the complete, synced file appears under its final name or nothing
// changes there.
//
// Protocol, all through the FileSystem seam:
//   1. the whole file size is known from the layout; available_bytes(dir) is checked first,
//      so a snapshot that cannot fit fails with NoSpace before a byte is written;
//   2. "<final>.tmp-<16 random hex>" (kTemporarySuffix) is created with O_CREAT|O_EXCL|O_NOFOLLOW,
//   mode 0600;
//   3. header, chunks and trailer are written with pwrite at their offsets;
//   4. fdatasync, close, rename onto the final name, fsync of the directory.
// Chunks are sealed on `threads` worker threads started for each write (every worker with
// its own sealer) while the calling thread starts device copies through the backend's staging
// ring (up to staging_buffer_count() in flight ahead) and writes the sealed chunks in file
// order, each at the offset the header fixes (core/snapshot/internal/snapshot_chunk_writer.h). Each
// chunk is sealed straight from its staging buffer or host memory. The bytes on disk do not depend
// on the thread count. Only the listed extents of kContents regions are written.
//
// Thread rule: one write() at a time per writer; the regions' bytes must not change during
// it (the caller has synchronized the device and stopped the session's work). Every thread a
// write starts is joined before it returns, on every path.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "core/base/clock.h"
#include "core/base/file_system.h"
#include "core/memory/memory_backend.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/record_buffer_pool.h"
#include "core/snapshot/snapshot_region.h"

namespace siesta {

// What every temporary name contains: "<final>.tmp-<suffix>". The store recognises (and cleans
// up) such names, and no export name may contain it, so no import or erase can reach a file
// still being written.
inline constexpr std::string_view kTemporarySuffix = ".tmp-";

struct SnapshotWriteOptions {
  std::string path;  // the final name; its directory must exist
  snapshot::SnapshotMode mode = snapshot::SnapshotMode::kSessionEncrypted;
  snapshot::Fingerprint fingerprint{};  // the session's model + config + layout (opaque here)
  // Readers refuse the file from this second on; in kDurableExport mode snapshot::kNeverExpires
  // (0) means never (snapshot::is_expired).
  int64_t expiry_unix = 0;
  // Which save this is (SnapshotHeader::generation): a reader expecting another generation
  // refuses the file as Foreign. The Offloader takes a fresh one for every save from
  // ProcessKey::next_generation(); kDurableExport mode requires 0 (else InvalidArgument).
  uint64_t generation = 0;
  // Who writes the file and alone may read it back (SnapshotHeader::owner): the session's name,
  // or the export's. At most snapshot::kMaxOwnerBytes bytes (else InvalidArgument).
  std::string owner{};
  // What finds the conversation again after a restart (SnapshotHeader::route), opaque; sealed
  // on its own in the header (encrypted in AES mode: it may hold what a conversation said), and
  // given back by the reader opened; at most snapshot::kMaxRouteBytes - 16 bytes (else
  // InvalidArgument).
  std::vector<uint8_t> route{};
  // Largest plaintext per chunk; lowered to the staging buffer size when any device region is
  // written, so that a chunk is exactly one staging copy.
  uint32_t chunk_bytes = 4u << 20;
  // Checked before every chunk; when it reads true the write stops with Cancelled, after
  // waiting for the chunks being sealed (at most one per thread).
  const std::atomic<bool>* cancel = nullptr;
  // A second flag with the same effect (may be null): a RAM tier spill stops when either its
  // own session's command arrives or the save that asked for the room is cancelled.
  const std::atomic<bool>* cancel_also = nullptr;
  // Called once (may be empty), on the writing thread, with the file's exact size before
  // anything touches storage: a failure ends the write with that status, nothing written
  // (the Offloader reserves the size in the snapshot directory's budget here).
  std::function<Status(uint64_t file_bytes)> claim_space;
  // Called once, on the writing thread, as soon as no byte of the regions will be read again:
  // when the chunk stage ends, whether every chunk is copied, sealed and written (only the
  // trailer, fdatasync, rename and directory fsync remain) or it stopped (cancelled or
  // failed; the temporary file is removed after the call). A caller may then let the memory
  // change (the Offloader lets a waiting command run) while the file is finished or removed;
  // `cancel` is still read once more, before fdatasync. Not called when the write fails
  // before its first chunk (free space, the temporary file, the header).
  std::function<void()> on_memory_read;
  // Called once the complete file has its final name, before the directory's sync: a failure
  // reported after it leaves that file at `path` (replacing what was there), and the caller
  // removes it or accounts for it.
  std::function<void()> on_named;
  // Written bytes whose write-back has not been waited for stay below this plus one chunk
  // (WritableFile::start_writeback / wait_writeback): deep enough to keep a disk busy, short
  // enough that no write stalls long in the kernel's dirty-page throttling.
  uint64_t writeback_window_bytes = 64u << 20;
  // Threads that seal chunks; 0: default_snapshot_write_threads() (min(4, hardware threads)).
  // Memory: (threads + 1) chunk records in flight, or staging_buffer_count() when larger.
  uint32_t threads = 0;
  // Where those record buffers come from and go back to; null: allocated for this write alone.
  RecordBufferPool* record_buffers = nullptr;
  // How long to wait for a staging buffer when another session's pipeline holds the whole
  // ring and nothing of this one's is in flight (MemoryBackend::acquire_staging_waiting):
  // then the ring's FailedPrecondition.
  std::chrono::nanoseconds staging_wait = MemoryBackend::kStagingShareTimeout;
};

struct SnapshotWriteResult {
  uint64_t file_bytes = 0;
  uint64_t payload_bytes = 0;
  uint64_t chunk_count = 0;
  snapshot::FileId file_id{};
};

class SnapshotWriter {
 public:
  // `backend` may be null when no region is on the device. All references must outlive the
  // writer.
  SnapshotWriter(FileSystem& fs, const Clock& clock, const ProcessKey& key, MemoryBackend* backend)
      : fs_(fs), clock_(clock), key_(key), backend_(backend) {}

  // Writes `regions` (in this order: the reader must list the same regions the same way).
  // Success: the file is complete, synced, renamed to options.path and its directory synced;
  // an earlier file of that name has been replaced.
  // Failure (the temporary file is removed, its removal retried once; if both attempts fail it
  // stays for the store's start-up clean-up, and options.path is untouched, except as noted):
  //   InvalidArgument  a layout the format cannot hold (validate_header), a host region
  //                    without memory, a device region without a backend
  //   NoSpace          not enough free space for the whole file (nothing written), or ENOSPC
  //   Cancelled        *options.cancel or *options.cancel_also turned true
  //   IoError / FailedPrecondition / ...  from the file system or the backend's copies
  //   A failure of the final directory fsync is returned after the rename (on_named was
  //   called): the new, complete file is then in place but not known to be durable, and the
  //   caller must not rely on it. Any other failure leaves `path` as it was.
  Result<SnapshotWriteResult> write(const SnapshotWriteOptions& options,
                                    std::span<const SnapshotRegion> regions);

 private:
  FileSystem& fs_;
  const Clock& clock_;
  const ProcessKey& key_;
  MemoryBackend* backend_;
};

// The directory part of `path` ("." when there is none), for sync_directory.
std::string parent_directory(const std::string& path);

}  // namespace siesta
