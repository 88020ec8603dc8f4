// SnapshotExporter: explicit, durable copies of a session's state under a name the user chose.
// The server's `POST /slots/0?action=save|restore|erase` with a filename under
// `--slot-save-path` reaches it through the engine.
//
// An export is an ordinary snapshot file (docs/SNAPSHOT_FORMAT.md) in durable export mode,
// written and read by SnapshotWriter and SnapshotReader:
//   - no process binding: the nonce is all zero, so any later process may import it;
//   - digest seals instead of the process key (no key outlives a process); a digest detects
//     damage but not forgery, which is why the directory must be writable only by its owner;
//   - bound to the session fingerprint (model + config + layout): another model's file is
//     Foreign, as is a cache snapshot (session mode) renamed into the directory;
//   - expiry_unix = snapshot::kNeverExpires: an export lasts until it is erased;
//   - generation 0: an export is meant to be imported again and again, so no later save makes
//     an earlier one stale (a session snapshot's generation is what refuses a replay). Putting
//     an older export back under a name is no attack the exporter can see: anyone who can
//     write the directory can write any export (digests do not stop forgery), which is why
//     the directory must be private.
// Files are "<dir>/<name>" with names checked by validate_export_name(). The directory obeys
// the cache directory's rule (PrivateDirectory): private to this user, created 0700 when
// missing. Every file is opened without blocking and must be a regular file, so a FIFO put
// under an export's name is refused at once (FailedPrecondition), never waited on.
//
// Thread rule: after open() the exporter holds no mutable state; its methods may be called
// from any thread at once. Each export writes its own temporary file and renames it into
// place atomically, so a concurrent import of the same name reads the old or the new file,
// whole; the last export to rename wins. The regions passed in must not change (export) or be
// used (import) during the call, as for the writer and the reader, and device regions share
// the backend's staging ring with every other writer and reader.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/base/clock.h"
#include "core/base/file_system.h"
#include "core/base/private_directory.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_region.h"
#include "core/snapshot/snapshot_writer.h"

namespace siesta {

inline constexpr size_t kMaxExportNameBytes = 128;

// An export name is [A-Za-z0-9._-]{1,128}, does not start with '.', and contains neither ".."
// nor ".tmp-" (the writer's temporary suffix, so that no import or erase can reach a file
// still being written). So it can never name a path outside the directory, a hidden file,
// "." or "..", and never holds '/', NUL or a control byte.
// Failure: InvalidArgument, one line, quoting the name with quote_for_log.
Status validate_export_name(std::string_view name);

class SnapshotExporter {
 public:
  struct Options {
    // The user the directory must belong to; unset: the effective user (geteuid()).
    std::optional<uint32_t> owner_uid;
    // Largest plaintext per chunk (the writer lowers it to the staging buffer size for device
    // regions).
    uint32_t chunk_bytes = 4u << 20;
  };

  // Makes `dir` ready with PrivateDirectory (noun "export directory"; the cache directory's
  // rule and errors: InvalidArgument, FailedPrecondition, NotFound, ...), and makes the
  // exporter's own throwaway ProcessKey (Internal if the random generator fails): the writer
  // and reader take a key, durable mode never uses it, and a key of its own means an export
  // can never depend on the process's key.
  // `backend` may be null when no region is on the device. `fs`, `clock` and `backend` must
  // outlive the exporter.
  static Result<std::unique_ptr<SnapshotExporter>> open(FileSystem& fs, const Clock& clock,
                                                        MemoryBackend* backend,
                                                        const std::string& dir, Options options);

  SnapshotExporter(const SnapshotExporter&) = delete;
  SnapshotExporter& operator=(const SnapshotExporter&) = delete;

  const std::string& directory() const { return dir_.path(); }

  // "<dir>/<name>". Failure: validate_export_name()'s.
  Result<std::string> path_of(std::string_view name) const;

  // Writes `regions` (in this order; an import must list the same regions the same way) as
  // the export `name`, bound to `fingerprint`, through SnapshotWriter's protocol (temporary
  // name, O_EXCL|O_NOFOLLOW, 0600, fdatasync, rename, directory fsync).
  // Success: the complete, synced file is "<dir>/<name>", replacing an earlier export of that
  // name.
  // Failure: InvalidArgument for a bad name (nothing touched); otherwise the writer's errors
  // (NoSpace before a byte when the file cannot fit, Cancelled when *cancel turns true,
  // IoError, ...), the temporary file removed and an earlier export of that name untouched
  // (except after a failed directory fsync, as SnapshotWriter::write says).
  Result<SnapshotWriteResult> export_session(std::string_view name,
                                             const snapshot::Fingerprint& fingerprint,
                                             std::span<const SnapshotRegion> regions,
                                             const std::atomic<bool>* cancel = nullptr);

  // Validates the export `name` and restores it into `regions` (SnapshotReader::read).
  // Failure: InvalidArgument for a bad name (nothing touched); NotFound when there is no such
  // export; FailedPrecondition for a symlink or anything but a regular file; Foreign for a file of
  // another fingerprint or region layout, or one not written in durable export mode (a cache
  // snapshot); Unsupported for another format version; Corrupt / Truncated as the reader finds them
  // (then the regions hold a mix of old and restored bytes and the caller must discard the session
  // state).
  Result<SnapshotReadResult> import_session(std::string_view name,
                                            const snapshot::Fingerprint& expected_fingerprint,
                                            std::span<const SnapshotRegion> regions);

  // Removes the export `name`, then syncs the directory so the removal is durable.
  // Failure: InvalidArgument for a bad name (nothing touched); NotFound when there is none;
  // the file system's error otherwise.
  Status erase(std::string_view name);

 private:
  SnapshotExporter(FileSystem& fs, const Clock& clock, MemoryBackend* backend, PrivateDirectory dir,
                   Options options, ProcessKey key)
      : fs_(fs),
        clock_(clock),
        backend_(backend),
        dir_(std::move(dir)),
        options_(options),
        key_(std::move(key)) {}

  FileSystem& fs_;
  const Clock& clock_;
  MemoryBackend* const backend_;
  const PrivateDirectory dir_;
  const Options options_;
  const ProcessKey key_;
};

}  // namespace siesta
