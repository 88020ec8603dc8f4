#include "core/snapshot/snapshot_writer.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/base/hex.h"
#include "core/base/log_text.h"
#include "core/snapshot/internal/chunk_pipeline.h"
#include "core/snapshot/internal/snapshot_chunk_writer.h"

namespace siesta {
namespace {

// Removes the temporary file unless the write got as far as renaming it.
class TempFileGuard {
 public:
  TempFileGuard(FileSystem& fs, std::string path) : fs_(fs), path_(std::move(path)) {}
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  ~TempFileGuard() {
    if (file_ != nullptr) file_->close().ignore();
    if (!armed_) return;
    // One retry: a transient failure (EIO, EINTR on a network file system) would otherwise
    // leave the temporary behind until the store's next start-up clean-up. A failure that
    // persists is left to that clean-up; the temporary is never mistaken for a snapshot.
    Status removed = fs_.remove(path_);
    if (!removed.ok() && removed.code() != StatusCode::kNotFound) fs_.remove(path_).ignore();
  }
  std::unique_ptr<WritableFile>& file() { return file_; }
  void disarm() { armed_ = false; }

 private:
  FileSystem& fs_;
  std::string path_;
  std::unique_ptr<WritableFile> file_;
  bool armed_ = true;
};

std::span<const std::byte> byte_span(std::span<const uint8_t> s) { return std::as_bytes(s); }

Result<std::string> temp_name_for(const std::string& path) {
  uint8_t random[8];
  SIESTA_RETURN_IF_ERROR(random_bytes(random));
  return path + std::string(kTemporarySuffix) + to_hex(random);
}

}  // namespace

std::string parent_directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Result<SnapshotWriteResult> SnapshotWriter::write(const SnapshotWriteOptions& options,
                                                  std::span<const SnapshotRegion> regions) {
  const std::string quoted = quote_for_log(options.path);
  // ---- the header, fully known before anything touches storage ----
  snapshot::SnapshotHeader header;
  header.mode = options.mode;
  SIESTA_RETURN_IF_ERROR(random_bytes(header.file_id));
  if (options.mode != snapshot::SnapshotMode::kDurableExport) header.process_nonce = key_.nonce();
  header.fingerprint = options.fingerprint;
  header.created_unix = clock_.unix_seconds();
  header.expiry_unix = options.expiry_unix;
  header.generation = options.generation;
  header.owner = options.owner;
  header.chunk_bytes = options.chunk_bytes;
  bool any_device = false;
  for (const SnapshotRegion& region : regions) {
    header.regions.push_back(region.layout);
    if (region.layout.extents.empty()) continue;
    if (region.place == SnapshotRegion::Place::kDevice) {
      any_device = true;
    } else if (region.host == nullptr) {
      return InvalidArgument("host region " + quote_for_log(region.layout.name) + " has no memory");
    }
  }
  if (any_device) {
    if (backend_ == nullptr) return InvalidArgument("a device region needs a memory backend");
    const size_t staging = backend_->staging_buffer_bytes();
    if (staging == 0) return Internal(backend_->name() + " has no staging buffers");
    if (staging < header.chunk_bytes) header.chunk_bytes = static_cast<uint32_t>(staging);
  }
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ChunkSealer> sealer,
                          make_sealer(options.mode, key_, header.file_id));
  snapshot::Tag tag{};
  if (!options.route.empty()) {
    // Sealed on its own (encrypted under the file key in AES mode), then covered by the
    // header's seal with the rest: a route holds what a conversation said.
    header.route.resize(options.route.size() + snapshot::kTagBytes);
    const std::span<uint8_t> ciphertext(header.route.data(), options.route.size());
    SIESTA_RETURN_IF_ERROR(
        sealer->seal(SealDomain::kRoute, 0, header.file_id, options.route, ciphertext, tag));
    std::copy(tag.begin(), tag.end(), header.route.end() - snapshot::kTagBytes);
  }
  SIESTA_ASSIGN_OR_RETURN(std::vector<uint8_t> header_bytes, snapshot::encode_header_body(header));
  SIESTA_RETURN_IF_ERROR(sealer->seal(SealDomain::kHeader, 0, header_bytes, {}, {}, tag));
  snapshot::append_header_tag(header_bytes, tag);
  SIESTA_ASSIGN_OR_RETURN(const snapshot::HeaderDigest header_digest, sha256(header_bytes));
  const snapshot::FileShape shape = snapshot::file_shape(header, header_bytes.size());

  // ---- space first: NoSpace without writing a byte ----
  if (options.claim_space) SIESTA_RETURN_IF_ERROR(options.claim_space(shape.file_bytes));
  const std::string directory = parent_directory(options.path);
  SIESTA_ASSIGN_OR_RETURN(const uint64_t available, fs_.available_bytes(directory));
  if (available < shape.file_bytes) {
    return NoSpace("snapshot " + quoted + " needs " + std::to_string(shape.file_bytes) +
                   " bytes, " + std::to_string(available) + " available");
  }

  SIESTA_ASSIGN_OR_RETURN(const std::string temp_path, temp_name_for(options.path));
  TempFileGuard guard(fs_, temp_path);
  {
    auto created = fs_.create_exclusive(temp_path, 0600);
    if (!created.ok()) return created.status();  // nothing was created: nothing to remove
    guard.file() = std::move(created).value();
  }
  WritableFile& file = *guard.file();
  SIESTA_RETURN_IF_ERROR(file.write_at(0, byte_span(header_bytes)));

  // ---- chunks: sealed on the pipeline's threads, written here in file order ----
  const ChunkWriteJob job{header,
                          header_digest,
                          regions,
                          any_device ? backend_ : nullptr,
                          key_,
                          options.cancel,
                          options.cancel_also,
                          resolve_snapshot_write_threads(options.threads),
                          "snapshot " + quoted,
                          std::max<uint64_t>(1, options.writeback_window_bytes),
                          options.record_buffers,
                          options.staging_wait};
  Result<uint64_t> chunks =
      write_snapshot_chunks(job, file, header_bytes.size(), shape.chunk_count);
  // Whether the chunk stage completed or stopped, its copies and seals are over: the regions
  // are not read again. Said before anything else, above all before the guard unlinks a
  // cancelled file (~0.2 s per GiB of cached data), which a waiting command must not pay.
  if (options.on_memory_read) options.on_memory_read();
  SIESTA_ASSIGN_OR_RETURN(uint64_t offset, std::move(chunks));

  // ---- trailer: says how many chunks there are, so dropping whole chunks is caught ----
  const auto trailer_body = snapshot::encode_trailer_body(shape);
  const std::vector<uint8_t> trailer_aad =
      snapshot::record_aad(header.file_id, header_digest, trailer_body);
  SIESTA_RETURN_IF_ERROR(sealer->seal(SealDomain::kTrailer, 0, trailer_aad, {}, {}, tag));
  const auto trailer = snapshot::encode_trailer(trailer_body, tag);
  SIESTA_RETURN_IF_ERROR(file.write_at(offset, byte_span(trailer)));
  offset += trailer.size();
  if (offset != shape.file_bytes) return Internal("snapshot writer wrote an unexpected size");

  // ---- durability, then the name ----
  // fdatasync is the one step that cannot stop part-way, and the slowest (it waits for the
  // disk): a write cancelled by now is abandoned instead (the guard removes the file).
  const auto raised = [](const std::atomic<bool>* flag) {
    return flag != nullptr && flag->load(std::memory_order_acquire);
  };
  if (raised(options.cancel) || raised(options.cancel_also)) {
    return Cancelled("snapshot " + quoted + " cancelled before fdatasync");
  }
  SIESTA_RETURN_IF_ERROR(file.sync());
  Status closed = file.close();
  guard.file().reset();
  SIESTA_RETURN_IF_ERROR(closed);
  SIESTA_RETURN_IF_ERROR(fs_.rename(temp_path, options.path));
  guard.disarm();
  if (options.on_named) options.on_named();
  SIESTA_RETURN_IF_ERROR(fs_.sync_directory(directory));
  return SnapshotWriteResult{shape.file_bytes, shape.payload_bytes, shape.chunk_count,
                             header.file_id};
}

}  // namespace siesta
