// The snapshot file format: its constants, the header it starts with, and the plan of chunks
// that follows from a header. docs/SNAPSHOT_FORMAT.md is the grammar, byte by byte; this file
// and snapshot_format.cc are its only encoder and decoder.
//
// Every integer is little-endian, written byte by byte (never a native-order store), so a file
// means the same thing on every machine. Every length a file states is bounded by a constant
// here, so a hostile header cannot make a reader allocate or loop without limit.
//
// Thread rule: plain values and pure functions; safe from any thread.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace siesta::snapshot {

inline constexpr std::string_view kMagic = "SIESTASN";         // first 8 bytes of a file
inline constexpr std::string_view kTrailerMagic = "SIESTAEN";  // first 8 bytes of the trailer
// Version 2 added the generation (u64 at offset 100) to the fixed header; version 3 the owner
// (the writer's identity, before the region table); version 4 the route (after the owner).
// Files of other versions are Unsupported.
inline constexpr uint32_t kFormatVersion = 4;

// Bounds a reader enforces before it trusts a header. Generous for any real session (the
// reference model has a few dozen regions), small enough that a header can never cost more
// than a few MiB of memory.
inline constexpr uint32_t kMaxRegions = 1024;
inline constexpr uint32_t kMaxNameBytes = 255;
inline constexpr uint32_t kMaxOwnerBytes = 255;
inline constexpr uint32_t kMaxRouteBytes = 1u << 20;
inline constexpr uint32_t kMaxExtentsPerFile = 1u << 16;
inline constexpr uint32_t kMaxChunkBytes = 64u << 20;
inline constexpr uint32_t kMaxHeaderBytes = 4u << 20;

inline constexpr size_t kTagBytes = 16;
inline constexpr size_t kPrefixBytes = 20;        // magic, version, flags, header_bytes
inline constexpr size_t kFixedHeaderBytes = 116;  // everything before the owner
// An empty owner (one length byte), an empty route (four length bytes), no regions, the tag.
inline constexpr uint32_t kMinHeaderBytes = kFixedHeaderBytes + 1 + 4 + kTagBytes;
inline constexpr size_t kChunkHeaderBytes = 16;         // region u32, index u64, length u32
inline constexpr size_t kTrailerBodyBytes = 8 + 8 + 8;  // end magic, chunk count, payload bytes
inline constexpr size_t kTrailerBytes = kTrailerBodyBytes + kTagBytes;

// Flag bits. Exactly three combinations are valid (see SnapshotMode); any other is Corrupt.
inline constexpr uint32_t kFlagDigest = 1u << 0;   // chunks carry a digest, not AES-GCM
inline constexpr uint32_t kFlagDurable = 1u << 1;  // export: no process binding

using FileId = std::array<uint8_t, 16>;
using ProcessNonce = std::array<uint8_t, 16>;
using Fingerprint = std::array<uint8_t, 32>;
using Tag = std::array<uint8_t, kTagBytes>;
using HeaderDigest = std::array<uint8_t, 32>;

// How a file is sealed and whom it belongs to.
enum class SnapshotMode : uint8_t {
  kSessionEncrypted,  // AES-256-GCM under this process's key; readable by this process only
  kSessionDigest,     // --cache-encrypt=off: truncated SHA-256; bound to this process's nonce
  kDurableExport,     // truncated SHA-256; process nonce all zero; readable by any process
};
std::string_view snapshot_mode_name(SnapshotMode mode);
uint32_t flags_for(SnapshotMode mode);

// What a restore does with a region: its bytes are saved, recomputed, or scratch. Only kContents
// regions have saved extents; the others are listed so that the layout check covers them.
enum class PersistKind : uint8_t { kContents = 0, kReinit = 1, kDiscard = 2 };

struct Extent {
  uint64_t offset = 0;
  uint64_t length = 0;
  friend bool operator==(const Extent&, const Extent&) = default;
};

struct RegionLayout {
  std::string name;
  PersistKind persist = PersistKind::kContents;
  uint64_t size = 0;
  std::vector<Extent> extents;  // the saved bytes; sorted, disjoint, non-empty, inside size
  friend bool operator==(const RegionLayout&, const RegionLayout&) = default;
};

struct SnapshotHeader {
  uint32_t version = kFormatVersion;
  SnapshotMode mode = SnapshotMode::kSessionEncrypted;
  FileId file_id{};
  ProcessNonce process_nonce{};
  Fingerprint fingerprint{};
  int64_t created_unix = 0;
  int64_t expiry_unix = 0;
  // Which save this file is: unique among the files sealed under one process key
  // (ProcessKey::next_generation()), so that a reader expecting the one it wrote last refuses
  // any other file of the same process -- an older one of the same session put back (a
  // replay), or another session's put in its place. Always 0 in durable export mode: an export
  // is meant to be imported again and again, and no later save makes it stale.
  uint64_t generation = 0;
  uint32_t chunk_bytes = 0;
  // Who wrote the file and alone may read it back: the session's name for a session file
  // (the store's <session>), the export's name for an export. 0..kMaxOwnerBytes bytes, never
  // interpreted; a reader requires the one it expects (else Foreign), so a file renamed or
  // copied under another owner's name is refused before a byte of it is restored.
  std::string owner;
  // What the writer needs to find the conversation again after a restart (the engine's: its
  // key's HMAC and its history's tokens), 0..kMaxRouteBytes bytes, never interpreted here and
  // authenticated with the rest of the header. Empty in exports.
  std::vector<uint8_t> route;
  std::vector<RegionLayout> regions;
};

// Expiry. A session file always carries a deadline. A durable export is kept until someone
// erases it, so the exporter writes kNeverExpires (0) there; in that mode, and only in it, 0
// means "never" (in the session modes 0 is simply a deadline long past). Any other value is a
// deadline in every mode, so an export written with one is honoured like a session file.
inline constexpr int64_t kNeverExpires = 0;
// The second from which a file with this header is refused: expiry_unix, or INT64_MAX for a
// durable export that never expires (so that "deadline <= now" never holds for it).
inline int64_t expiry_deadline(const SnapshotHeader& header) {
  if (header.mode == SnapshotMode::kDurableExport && header.expiry_unix == kNeverExpires) {
    return INT64_MAX;
  }
  return header.expiry_unix;
}
// True when a file with this header must be refused at `now_unix`: at, not after, its deadline.
inline bool is_expired(const SnapshotHeader& header, int64_t now_unix) {
  if (header.mode == SnapshotMode::kDurableExport && header.expiry_unix == kNeverExpires) {
    return false;
  }
  return now_unix >= header.expiry_unix;
}

// Checks what the grammar requires of a header's values: chunk_bytes in 1..kMaxChunkBytes,
// at most kMaxRegions regions with names of 1..kMaxNameBytes bytes, at most
// kMaxExtentsPerFile extents in all, extents sorted, disjoint, non-empty and inside their
// region, extents only on kContents regions, a zero nonce exactly in durable mode, a zero
// generation in durable mode, an owner of at most kMaxOwnerBytes bytes and a route of at most
// kMaxRouteBytes.
// Failure: InvalidArgument naming the first broken rule.
Status validate_header(const SnapshotHeader& header);

// The bytes of a header without its tag (the tag is computed over them).
// REQUIRES: validate_header(header) is OK (else InvalidArgument).
Result<std::vector<uint8_t>> encode_header_body(const SnapshotHeader& header);

// The fixed prefix every file starts with.
struct HeaderPrefix {
  uint32_t version = 0;
  uint32_t flags = 0;
  uint32_t header_bytes = 0;  // the whole header, prefix and tag included
};
// Decodes the first kPrefixBytes of a file. Failure: Corrupt for a wrong magic.
// Truncated when `bytes` is shorter than the prefix but every byte present matches the magic.
Result<HeaderPrefix> decode_prefix(std::span<const uint8_t> bytes);

// What a reader checks of a decoded prefix before it reads the header, in this order:
// Unsupported for a version other than kFormatVersion (a file of another build); Corrupt for
// a header length outside kMinHeaderBytes..kMaxHeaderBytes; Truncated when the file
// (`file_bytes` long) is shorter than the header it states. Messages name no file: the caller
// adds that as context.
Status check_prefix(const HeaderPrefix& prefix, uint64_t file_bytes);

// Decodes a whole header (prefix to tag exclusive) of a file of this version.
// REQUIRES: body.size() == prefix.header_bytes - kTagBytes.
// Failure: Corrupt for any grammar or bound violation; never reads outside `body`.
Result<SnapshotHeader> decode_header_body(std::span<const uint8_t> body);

// Decodes only the fixed fields (the first kFixedHeaderBytes: magic to region count) into a
// header without owner and regions, checking neither the seal nor the table: for a caller that must
// look at files it cannot authenticate (the store deciding whether a snapshot has expired).
// Failure: Truncated when `fixed` is shorter than kFixedHeaderBytes; Corrupt for a bad magic
// or flags; Unsupported for another version.
Result<SnapshotHeader> decode_fixed_fields(std::span<const uint8_t> fixed);

// A sealed header as stored: its body (the bytes the header seal covers) and its tag, which
// follows the body.
struct SealedHeaderParts {
  std::span<const uint8_t> body;
  Tag tag{};
};
// REQUIRES: header.size() >= kTagBytes (a checked prefix guarantees kMinHeaderBytes).
SealedHeaderParts split_sealed_header(std::span<const uint8_t> header);
// Appends `tag` to an encoded header body: the header as written.
void append_header_tag(std::vector<uint8_t>& body, const Tag& tag);

// One chunk as the header determines it: which bytes of which region it carries.
struct ChunkSpan {
  uint32_t region = 0;
  uint64_t offset = 0;  // within the region
  uint32_t length = 0;
};

// The file's shape as its header determines it. Chunks follow the regions in table order and
// each extent in order, cut into pieces of at most chunk_bytes; a chunk never spans two
// extents. So a reader knows every chunk's region, length and the exact file size before it
// reads a single chunk.
struct FileShape {
  uint64_t header_bytes = 0;
  uint64_t chunk_count = 0;
  uint64_t payload_bytes = 0;
  uint64_t file_bytes = 0;
};
// REQUIRES: validate_header(header) is OK.
FileShape file_shape(const SnapshotHeader& header, uint64_t header_bytes);

// Calls `visit(index, span)` for every chunk in file order; stops at the first non-OK status
// and returns it.
template <class Visit>
Status for_each_chunk(const SnapshotHeader& header, Visit&& visit) {
  uint64_t index = 0;
  for (uint32_t r = 0; r < header.regions.size(); ++r) {
    for (const Extent& extent : header.regions[r].extents) {
      for (uint64_t done = 0; done < extent.length;) {
        const uint64_t length = std::min<uint64_t>(header.chunk_bytes, extent.length - done);
        SIESTA_RETURN_IF_ERROR(
            visit(index, ChunkSpan{r, extent.offset + done, static_cast<uint32_t>(length)}));
        done += length;
        ++index;
      }
    }
  }
  return Status::Ok();
}

// Walks the chunks in file order one at a time, holding no list of them (a writer given a tiny
// chunk size and gigabytes of extents must not allocate a span per chunk).
// REQUIRES: validate_header(header) is OK; the header outlives the walker.
class ChunkWalker {
 public:
  explicit ChunkWalker(const SnapshotHeader& header) : header_(header) { skip_empty(); }
  // The next chunk, or false after the last one.
  bool next(ChunkSpan& span) {
    if (region_ >= header_.regions.size()) return false;
    const Extent& extent = header_.regions[region_].extents[extent_];
    const uint64_t length = std::min<uint64_t>(header_.chunk_bytes, extent.length - done_);
    span = ChunkSpan{region_, extent.offset + done_, static_cast<uint32_t>(length)};
    done_ += length;
    if (done_ == extent.length) {
      done_ = 0;
      ++extent_;
      skip_empty();
    }
    return true;
  }

 private:
  // Moves to the next extent that exists, across regions without extents.
  void skip_empty() {
    while (region_ < header_.regions.size() && extent_ >= header_.regions[region_].extents.size()) {
      ++region_;
      extent_ = 0;
    }
  }
  const SnapshotHeader& header_;
  uint32_t region_ = 0;
  size_t extent_ = 0;
  uint64_t done_ = 0;
};

// ---- little-endian helpers (used by the codec and by tests that build files by hand) ----
void put_u32(uint8_t* out, uint32_t value);
void put_u64(uint8_t* out, uint64_t value);
uint32_t get_u32(const uint8_t* in);
uint64_t get_u64(const uint8_t* in);
std::array<uint8_t, 8> encode_u64(uint64_t value);

// ---- seals ----

// A seal's position: domain u32 || index u64, the AES-GCM nonce and the start of what a
// digest hashes (docs/SNAPSHOT_FORMAT.md, "Seals").
inline constexpr size_t kSealPositionBytes = 4 + 8;
std::array<uint8_t, kSealPositionBytes> encode_seal_position(uint32_t domain, uint64_t index);

// ---- chunk records ----

// Where the parts of one chunk record lie, counted from the record's first byte:
// chunk header (region u32, index u64, length u32), payload, tag.
struct ChunkRecordLayout {
  size_t payload_at = kChunkHeaderBytes;
  size_t tag_at = 0;
  size_t size = 0;  // the whole record
};
constexpr ChunkRecordLayout chunk_record_layout(uint32_t payload_bytes) {
  return {kChunkHeaderBytes, kChunkHeaderBytes + payload_bytes,
          kChunkHeaderBytes + payload_bytes + kTagBytes};
}

// The 16-byte chunk header: region u32, chunk index u64, plaintext length u32.
std::array<uint8_t, kChunkHeaderBytes> encode_chunk_header(uint64_t index, const ChunkSpan& span);

// Checks that `record` starts with the chunk header of chunk `index` at `span`.
// Failure: Corrupt ("out of place": region, index or length differ). Names no file.
Status check_chunk_header(std::span<const uint8_t> record, uint64_t index, const ChunkSpan& span);

// ---- the trailer ----

// The trailer's sealed statement: end magic, chunk count, payload bytes.
std::array<uint8_t, kTrailerBodyBytes> encode_trailer_body(const FileShape& shape);
// A trailer as read (kTrailerBytes) split into its body and its tag, after checking that the
// body states exactly `shape`'s counts. Failure: Corrupt. Names no file.
struct TrailerParts {
  std::array<uint8_t, kTrailerBodyBytes> body{};
  Tag tag{};
};
Result<TrailerParts> decode_trailer(std::span<const uint8_t> trailer, const FileShape& shape);
// The trailer as written: body || tag.
std::array<uint8_t, kTrailerBytes> encode_trailer(
    const std::array<uint8_t, kTrailerBodyBytes>& body, const Tag& tag);

// The authenticated data of a chunk or the trailer: file id || header digest || the record's
// own header bytes. Binds the record to this file, this exact header and its position, so
// records cannot be swapped, reordered or replayed from another file. Writer and reader both
// call this, so they cannot disagree.
std::vector<uint8_t> record_aad(const FileId& file_id, const HeaderDigest& header_digest,
                                std::span<const uint8_t> record);

}  // namespace siesta::snapshot
