#include "core/snapshot/snapshot_reader.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/base/hex.h"
#include "core/base/log_text.h"
#include "core/snapshot/internal/chunk_pipeline.h"
#include "core/snapshot/internal/snapshot_chunk_reader.h"

namespace siesta {
namespace {

using snapshot::ChunkSpan;

std::string hex_prefix(std::span<const uint8_t> bytes) {
  return to_hex(bytes.first(std::min<size_t>(bytes.size(), 4)));
}

// Reads exactly out.size() bytes at `offset`; a short read means the file shrank under us.
Status read_exact(ReadableFile& file, uint64_t offset, std::span<uint8_t> out,
                  const std::string& what) {
  SIESTA_ASSIGN_OR_RETURN(const size_t got, file.read_at(offset, std::as_writable_bytes(out)));
  if (got != out.size()) {
    return Truncated(what + " ends at byte " + std::to_string(offset + got) + ", expected " +
                     std::to_string(offset + out.size()));
  }
  return Status::Ok();
}

Status check_layout(const snapshot::SnapshotHeader& header,
                    std::span<const SnapshotRegion> regions) {
  if (header.regions.size() != regions.size()) {
    return Foreign("snapshot has " + std::to_string(header.regions.size()) +
                   " regions, the session " + std::to_string(regions.size()));
  }
  for (size_t r = 0; r < regions.size(); ++r) {
    const snapshot::RegionLayout& saved = header.regions[r];
    const snapshot::RegionLayout& live = regions[r].layout;
    if (saved.name != live.name || saved.persist != live.persist || saved.size != live.size) {
      return Foreign("snapshot region " + std::to_string(r) + " " + quote_for_log(saved.name) +
                     " (" + std::to_string(saved.size) + " bytes) is not the session's " +
                     quote_for_log(live.name) + " (" + std::to_string(live.size) + " bytes)");
    }
  }
  return Status::Ok();
}

// Reads and checks the fixed prefix (magic, version, flags, header length) of `file`: the
// version is this build's, the header length is within bounds and the file holds it.
Result<snapshot::HeaderPrefix> read_checked_prefix(ReadableFile& file, uint64_t file_size,
                                                   const std::string& name) {
  uint8_t prefix_bytes[snapshot::kPrefixBytes];
  const size_t prefix_len =
      static_cast<size_t>(std::min<uint64_t>(file_size, sizeof(prefix_bytes)));
  SIESTA_RETURN_IF_ERROR(read_exact(file, 0, {prefix_bytes, prefix_len}, name));
  Result<snapshot::HeaderPrefix> prefix = snapshot::decode_prefix({prefix_bytes, prefix_len});
  if (!prefix.ok()) return prefix.status().with_context(name);
  Status checked = snapshot::check_prefix(*prefix, file_size);
  if (!checked.ok()) return checked.with_context(name);
  return prefix;
}

// The first chunks' bytes the cache is asked about: enough pages (256) that a few cached by
// chance (the file's first page, read with its header) do not decide it, few enough that the
// question is cheap on every restore (mincore of 1 MiB: about 25 us on the CPU machine, of
// 8 MiB 130 us).
constexpr uint64_t kColdProbeBytes = uint64_t{1} << 20;

// Whether less than half of the first kColdProbeBytes of [begin, end) are in the page cache (a
// failed probe says no: the page cache's way reads the same bytes).
bool out_of_cache(ReadableFile& file, uint64_t begin, uint64_t end) {
  if (begin >= end) return false;
  const uint64_t probe = std::min(end - begin, kColdProbeBytes);
  Result<uint64_t> cached = file.cached_bytes(begin, probe);
  return cached.ok() && *cached * 2 < probe;
}

// A read-ahead of [begin, end) around the page cache, or null where the file system has no
// such reads or it cannot start (the chunks are then read through the cache).
std::unique_ptr<ReadAheadFile> read_ahead(ReadableFile& file, uint64_t begin, uint64_t end,
                                          const ReadAheadOptions& options) {
  Result<std::unique_ptr<ReadableFile>> direct = file.open_direct();
  if (!direct.ok()) return nullptr;
  Result<std::unique_ptr<ReadAheadFile>> started =
      ReadAheadFile::start(file, std::move(direct).value(), begin, end, options);
  return started.ok() ? std::move(started).value() : nullptr;
}

}  // namespace

// The steps read() and read_header() share: the file opened, its prefix, its header decoded,
// attributed (mode, process) and its seal verified, its size the header's, its fingerprint
// the caller's.
struct SnapshotReader::OpenedFile {
  std::unique_ptr<ReadableFile> file;
  uint32_t header_size = 0;
  snapshot::SnapshotHeader header;
  snapshot::HeaderDigest header_digest{};
  snapshot::FileShape shape;
  std::unique_ptr<ChunkSealer> sealer;
};

Result<SnapshotReader::OpenedFile> SnapshotReader::open_checked(
    const std::string& path, snapshot::SnapshotMode mode, const snapshot::Fingerprint& fingerprint,
    const std::optional<snapshot::ProcessNonce>& process_nonce, bool any_process,
    const std::string& name) {
  OpenedFile opened;
  SIESTA_ASSIGN_OR_RETURN(opened.file, fs_.open_readable(path));
  ReadableFile& file = *opened.file;
  SIESTA_ASSIGN_OR_RETURN(const uint64_t file_size, file.size());

  // ---- prefix: magic, version, flags, header length ----
  SIESTA_ASSIGN_OR_RETURN(const snapshot::HeaderPrefix prefix,
                          read_checked_prefix(file, file_size, name));
  opened.header_size = prefix.header_bytes;

  // ---- header: decoded untrusted, then attributed (mode, process), then verified ----
  std::vector<uint8_t> header_bytes(opened.header_size);  // bounded by the file's size
  SIESTA_RETURN_IF_ERROR(read_exact(file, 0, header_bytes, name));
  const snapshot::SealedHeaderParts sealed = snapshot::split_sealed_header(header_bytes);
  Result<snapshot::SnapshotHeader> decoded = snapshot::decode_header_body(sealed.body);
  if (!decoded.ok()) return decoded.status().with_context(name);
  snapshot::SnapshotHeader& header = opened.header = std::move(decoded).value();
  if (header.mode != mode) {
    return Foreign(name + " was written in " + std::string(snapshot_mode_name(header.mode)) +
                   " mode, expected " + std::string(snapshot_mode_name(mode)));
  }
  const snapshot::ProcessNonce& expected_nonce = process_nonce ? *process_nonce : key_.nonce();
  if (header.mode != snapshot::SnapshotMode::kDurableExport && !any_process &&
      CRYPTO_memcmp(header.process_nonce.data(), expected_nonce.data(), expected_nonce.size()) !=
          0) {
    return Foreign(name + " belongs to another process (nonce " + hex_prefix(header.process_nonce) +
                   "...)");
  }
  SIESTA_ASSIGN_OR_RETURN(opened.sealer, make_sealer(header.mode, key_, header.file_id));
  Status sealed_ok = opened.sealer->open(SealDomain::kHeader, 0, sealed.body, {}, sealed.tag, {});
  if (!sealed_ok.ok()) return sealed_ok.with_context(name + " header");
  if (!header.route.empty()) {
    // The route is sealed on its own within the header: opened in place.
    if (header.route.size() < snapshot::kTagBytes) return Corrupt(name + " has a cut route");
    const size_t length = header.route.size() - snapshot::kTagBytes;
    snapshot::Tag route_tag{};
    std::copy(header.route.begin() + static_cast<std::ptrdiff_t>(length), header.route.end(),
              route_tag.begin());
    const std::span<uint8_t> route(header.route.data(), length);
    Status opened_route =
        opened.sealer->open(SealDomain::kRoute, 0, header.file_id, route, route_tag, route);
    if (!opened_route.ok()) return opened_route.with_context(name + " route");
    header.route.resize(length);
  }
  SIESTA_ASSIGN_OR_RETURN(opened.header_digest, sha256(header_bytes));

  // ---- size: exactly what the header promises ----
  opened.shape = snapshot::file_shape(header, opened.header_size);
  if (file_size < opened.shape.file_bytes) {
    return Truncated(name + " is " + std::to_string(file_size) + " bytes, its header promises " +
                     std::to_string(opened.shape.file_bytes));
  }
  if (file_size > opened.shape.file_bytes) {
    return Corrupt(name + " has " + std::to_string(file_size - opened.shape.file_bytes) +
                   " bytes after its trailer");
  }

  // ---- whose? ----
  if (CRYPTO_memcmp(header.fingerprint.data(), fingerprint.data(), header.fingerprint.size()) !=
      0) {
    return Foreign(name + " was written for another session fingerprint (" +
                   hex_prefix(header.fingerprint) + "...)");
  }
  return opened;
}

Status SnapshotReader::check_expiry(const snapshot::SnapshotHeader& header,
                                    const std::string& name) const {
  const int64_t now = clock_.unix_seconds();
  if (snapshot::is_expired(header, now)) {
    return Expired(name + " expired at " + std::to_string(header.expiry_unix) + " (now " +
                   std::to_string(now) + ")");
  }
  return Status::Ok();
}

Result<SnapshotReadResult> SnapshotReader::read_header(const SnapshotHeaderCheck& check) {
  const std::string name = "snapshot " + quote_for_log(check.path);
  SIESTA_ASSIGN_OR_RETURN(OpenedFile opened,
                          open_checked(check.path, check.mode, check.fingerprint,
                                       check.process_nonce, check.any_process, name));
  if (check.check_expiry) SIESTA_RETURN_IF_ERROR(check_expiry(opened.header, name));
  return SnapshotReadResult{opened.shape.file_bytes, 0, std::move(opened.header)};
}

Result<SnapshotReadResult> SnapshotReader::read(const SnapshotReadOptions& options,
                                                std::span<const SnapshotRegion> regions) {
  const std::string name = "snapshot " + quote_for_log(options.path);
  SIESTA_ASSIGN_OR_RETURN(
      OpenedFile opened,
      open_checked(options.path, options.mode, options.fingerprint, options.process_nonce,
                   /*any_process=*/false, name));
  ReadableFile* const file = opened.file.get();
  const uint32_t header_size = opened.header_size;
  snapshot::SnapshotHeader& header = opened.header;
  const snapshot::HeaderDigest& header_digest = opened.header_digest;
  const snapshot::FileShape& shape = opened.shape;
  ChunkSealer* const sealer = opened.sealer.get();

  // ---- the session's, and still valid? ----
  SIESTA_RETURN_IF_ERROR(check_layout(header, regions));
  // After the seal: owner and generation are as authentic as the rest of the header.
  if (header.owner != options.owner) {
    return Foreign(name + " was written by " + quote_for_log(header.owner) + ", expected " +
                   quote_for_log(options.owner) + " (another owner's file put in its place)");
  }
  if (header.generation != options.generation) {
    return Foreign(name + " is generation " + std::to_string(header.generation) + ", expected " +
                   std::to_string(options.generation) +
                   " (an older or newer snapshot put in its place)");
  }
  if (options.check_expiry) SIESTA_RETURN_IF_ERROR(check_expiry(header, name));

  // ---- chunks: read here in file order, verified on the pipeline's threads ----
  bool any_device = false;
  SIESTA_RETURN_IF_ERROR(snapshot::for_each_chunk(header, [&](uint64_t, const ChunkSpan& span) {
    any_device |= regions[span.region].place == SnapshotRegion::Place::kDevice;
    if (regions[span.region].place == SnapshotRegion::Place::kHost &&
        regions[span.region].host == nullptr) {
      return InvalidArgument("host region " + quote_for_log(regions[span.region].layout.name) +
                             " has no memory");
    }
    return Status::Ok();
  }));
  if (any_device && backend_ == nullptr) {
    return InvalidArgument("a device region needs a memory backend");
  }
  // ---- out of the page cache? Then maybe around it (SnapshotReadOptions::cold_read) ----
  const uint64_t chunks_end = shape.file_bytes - snapshot::kTrailerBytes;
  const bool cold = options.cold_read == SnapshotReadOptions::ColdRead::kAroundCacheWhenCold &&
                    out_of_cache(*file, header_size, chunks_end);
  using Way = ColdReadChoice::Way;
  const Way way = cold && options.cold_read_choice != nullptr
                      ? options.cold_read_choice->next(shape.file_bytes)
                      : Way::kAroundCache;
  std::unique_ptr<ReadAheadFile> around =
      cold && way == Way::kAroundCache
          ? read_ahead(*file, header_size, chunks_end, options.read_ahead)
          : nullptr;
  ChunkReadJob job{header,  header_digest,
                   regions, any_device ? backend_ : nullptr,
                   key_,    resolve_snapshot_read_threads(options.threads),
                   name,    options.staging_wait};
  if (around) job.on_failure = [&around] { around->abandon(); };
  const auto started = std::chrono::steady_clock::now();
  SIESTA_ASSIGN_OR_RETURN(const uint64_t offset,
                          read_snapshot_chunks(job, around ? *around : *file, header_size));
  const bool read_around_cache = around != nullptr;
  around.reset();  // its loaders are done with the file before the trailer is read
  if (cold && options.cold_read_choice != nullptr) {
    options.cold_read_choice->record(
        read_around_cache ? Way::kAroundCache : Way::kThroughCache, shape.file_bytes,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }

  // ---- trailer ----
  uint8_t trailer[snapshot::kTrailerBytes];
  SIESTA_RETURN_IF_ERROR(read_exact(*file, offset, trailer, name + " trailer"));
  Result<snapshot::TrailerParts> parts = snapshot::decode_trailer(trailer, shape);
  if (!parts.ok()) return parts.status().with_context(name);
  const std::vector<uint8_t> trailer_aad =
      snapshot::record_aad(header.file_id, header_digest, parts->body);
  Status trailer_ok = sealer->open(SealDomain::kTrailer, 0, trailer_aad, {}, parts->tag, {});
  if (!trailer_ok.ok()) return trailer_ok.with_context(name + " trailer");

  return SnapshotReadResult{shape.file_bytes, shape.payload_bytes, std::move(header), cold,
                            read_around_cache};
}

Result<int64_t> read_snapshot_expiry(FileSystem& fs, const std::string& path) {
  const std::string name = "snapshot " + quote_for_log(path);
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, fs.open_readable(path));
  SIESTA_ASSIGN_OR_RETURN(const uint64_t file_size, file->size());
  SIESTA_RETURN_IF_ERROR(read_checked_prefix(*file, file_size, name).status());
  // The checked prefix guarantees a header, so at least the fixed fields, in the file.
  uint8_t fixed[snapshot::kFixedHeaderBytes];
  SIESTA_RETURN_IF_ERROR(read_exact(*file, 0, fixed, name));
  Result<snapshot::SnapshotHeader> header = snapshot::decode_fixed_fields(fixed);
  if (!header.ok()) return header.status().with_context(name);
  return snapshot::expiry_deadline(*header);
}

}  // namespace siesta
