#include "core/snapshot_writer.h"

#include <cstring>
#include <deque>
#include <future>
#include <optional>
#include <system_error>
#include <vector>

#include "core/hex.h"
#include "core/log_text.h"

namespace siesta {
namespace {

using snapshot::ChunkSpan;
using snapshot::kTagBytes;

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

// A device chunk whose bytes are being copied into a staging buffer ahead of its turn.
struct Prefetch {
  uint64_t index = 0;
  StagingBuffer buffer;
  CopyTicket ticket;
};

std::span<const std::byte> as_bytes(std::span<const uint8_t> s) { return std::as_bytes(s); }

Result<std::string> temp_name_for(const std::string& path) {
  uint8_t random[8];
  SIESTA_RETURN_IF_ERROR(random_bytes(random));
  return path + ".tmp-" + to_hex(random);
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
  SIESTA_ASSIGN_OR_RETURN(std::vector<uint8_t> header_bytes, snapshot::encode_header_body(header));
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ChunkSealer> sealer,
                          make_sealer(options.mode, key_, header.file_id));
  snapshot::Tag tag{};
  SIESTA_RETURN_IF_ERROR(sealer->seal(SealDomain::kHeader, 0, header_bytes, {}, {}, tag));
  header_bytes.insert(header_bytes.end(), tag.begin(), tag.end());
  SIESTA_ASSIGN_OR_RETURN(const snapshot::HeaderDigest header_digest, sha256(header_bytes));
  const snapshot::FileShape shape = snapshot::file_shape(header, header_bytes.size());

  // ---- space first: NoSpace without writing a byte ----
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
  SIESTA_RETURN_IF_ERROR(file.write_at(0, as_bytes(header_bytes)));

  // ---- chunks ----
  const size_t depth =
      backend_ != nullptr ? std::max<size_t>(1, backend_->staging_buffer_count()) : 0;
  std::deque<Prefetch> prefetched;
  // Two walks over the same chunks: `ahead` issues device copies up to `depth` chunks before
  // `current` seals them. `pending` is a chunk `ahead` produced but could not stage yet.
  snapshot::ChunkWalker ahead(header), current(header);
  uint64_t next_prefetch = 0;
  std::optional<ChunkSpan> pending;
  // Keeps up to `depth` device copies in flight ahead of the chunk being sealed.
  auto fill = [&]() -> Status {
    while (prefetched.size() < depth) {
      ChunkSpan span;
      if (pending.has_value()) {
        span = *pending;
        pending.reset();
      } else if (!ahead.next(span)) {
        return Status::Ok();
      }
      const SnapshotRegion& region = regions[span.region];
      if (region.place == SnapshotRegion::Place::kDevice) {
        Result<StagingBuffer> buffer = backend_->acquire_staging();
        if (!buffer.ok()) {
          // Another user holds part of the ring: go on with fewer buffers in flight.
          if (prefetched.empty()) return buffer.status();
          pending = span;
          return Status::Ok();
        }
        Prefetch next{next_prefetch, std::move(buffer).value(), {}};
        SIESTA_ASSIGN_OR_RETURN(next.ticket, backend_->copy_to_staging(region.device + span.offset,
                                                                       span.length, next.buffer));
        prefetched.push_back(std::move(next));
      }
      ++next_prefetch;
    }
    return Status::Ok();
  };

  // Encrypted chunks are sealed into one of two records (chunk header || ciphertext || tag)
  // while the other is being written by a helper thread, so sealing (~3.5 GB/s) overlaps the
  // storage instead of adding to it. Only that thread touches `file` while a write is in
  // flight; the future's destructor waits for it on every return path.
  std::vector<uint8_t> records[2];
  size_t which = 0;
  std::future<Status> write_in_flight;
  auto finish_write = [&]() -> Status {
    return write_in_flight.valid() ? write_in_flight.get() : Status::Ok();
  };
  uint64_t offset = header_bytes.size();
  ChunkSpan span;
  for (uint64_t index = 0; current.next(span); ++index) {
    if (options.cancel != nullptr && options.cancel->load(std::memory_order_acquire)) {
      return Cancelled("snapshot " + quoted + " cancelled after " + std::to_string(index) + " of " +
                       std::to_string(shape.chunk_count) + " chunks");
    }
    SIESTA_RETURN_IF_ERROR(fill());
    const SnapshotRegion& region = regions[span.region];
    std::span<const uint8_t> plaintext;
    if (region.place == SnapshotRegion::Place::kDevice) {
      if (prefetched.empty() || prefetched.front().index != index) {
        return Internal("snapshot writer lost track of its staging copies");
      }
      SIESTA_RETURN_IF_ERROR(backend_->wait(prefetched.front().ticket));
      plaintext = {reinterpret_cast<const uint8_t*>(prefetched.front().buffer.bytes().data()),
                   span.length};
    } else {
      plaintext = {reinterpret_cast<const uint8_t*>(region.host) + span.offset, span.length};
    }
    const auto chunk_header = snapshot::encode_chunk_header(index, span);
    const std::vector<uint8_t> aad = snapshot::record_aad(header.file_id, header_digest, chunk_header);
    if (sealer->encrypts()) {
      std::vector<uint8_t>& record = records[which];
      record.resize(chunk_header.size() + span.length + kTagBytes);
      std::memcpy(record.data(), chunk_header.data(), chunk_header.size());
      std::span<uint8_t> ciphertext(record.data() + chunk_header.size(), span.length);
      SIESTA_RETURN_IF_ERROR(
          sealer->seal(SealDomain::kChunk, index, aad, plaintext, ciphertext, tag));
      std::memcpy(record.data() + chunk_header.size() + span.length, tag.data(), kTagBytes);
      SIESTA_RETURN_IF_ERROR(finish_write());
      try {
        write_in_flight = std::async(std::launch::async, [&file, offset, &record] {
          return file.write_at(offset, as_bytes(record));
        });
      } catch (const std::system_error&) {  // no thread to be had: write it here
        SIESTA_RETURN_IF_ERROR(file.write_at(offset, as_bytes(record)));
      }
      which ^= 1;
    } else {
      // The digest leaves the plaintext as it is: write it straight from where it lies.
      SIESTA_RETURN_IF_ERROR(
          sealer->seal(SealDomain::kChunk, index, aad, plaintext,
                       {const_cast<uint8_t*>(plaintext.data()), plaintext.size()}, tag));
      SIESTA_RETURN_IF_ERROR(file.write_at(offset, as_bytes(chunk_header)));
      SIESTA_RETURN_IF_ERROR(file.write_at(offset + chunk_header.size(), as_bytes(plaintext)));
      SIESTA_RETURN_IF_ERROR(
          file.write_at(offset + chunk_header.size() + span.length, as_bytes(tag)));
    }
    offset += chunk_header.size() + span.length + kTagBytes;
    if (region.place == SnapshotRegion::Place::kDevice) prefetched.pop_front();
  }

  SIESTA_RETURN_IF_ERROR(finish_write());

  // ---- trailer: says how many chunks there are, so dropping whole chunks is caught ----
  uint8_t trailer[snapshot::kTrailerBytes];
  std::memcpy(trailer, snapshot::kTrailerMagic.data(), snapshot::kTrailerMagic.size());
  snapshot::put_u64(trailer + 8, shape.chunk_count);
  snapshot::put_u64(trailer + 16, shape.payload_bytes);
  const std::vector<uint8_t> trailer_aad =
      snapshot::record_aad(header.file_id, header_digest, {trailer, snapshot::kTrailerBytes - kTagBytes});
  SIESTA_RETURN_IF_ERROR(sealer->seal(SealDomain::kTrailer, 0, trailer_aad, {}, {}, tag));
  std::memcpy(trailer + snapshot::kTrailerBytes - kTagBytes, tag.data(), kTagBytes);
  SIESTA_RETURN_IF_ERROR(file.write_at(offset, as_bytes(std::span<const uint8_t>(trailer))));
  offset += snapshot::kTrailerBytes;
  if (offset != shape.file_bytes) return Internal("snapshot writer wrote an unexpected size");

  // ---- durability, then the name ----
  SIESTA_RETURN_IF_ERROR(file.sync());
  Status closed = file.close();
  guard.file().reset();
  SIESTA_RETURN_IF_ERROR(closed);
  SIESTA_RETURN_IF_ERROR(fs_.rename(temp_path, options.path));
  guard.disarm();
  SIESTA_RETURN_IF_ERROR(fs_.sync_directory(directory));
  return SnapshotWriteResult{shape.file_bytes, shape.payload_bytes, shape.chunk_count,
                             header.file_id};
}

}  // namespace siesta
