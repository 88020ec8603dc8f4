#include "core/snapshot/snapshot_format.h"

#include <cstring>

namespace siesta::snapshot {
namespace {

// Appends little-endian fields to a byte vector.
class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}
  void bytes(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    out_.insert(out_.end(), p, p + size);
  }
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) {
    u8(static_cast<uint8_t>(v));
    u8(static_cast<uint8_t>(v >> 8));
  }
  void u32(uint32_t v) {
    uint8_t b[4];
    put_u32(b, v);
    bytes(b, 4);
  }
  void u64(uint64_t v) {
    uint8_t b[8];
    put_u64(b, v);
    bytes(b, 8);
  }

 private:
  std::vector<uint8_t>& out_;
};

// Reads little-endian fields from a bounded span. Every read checks the bytes left first, so
// no field can make the decoder look outside the span; `ok()` turns false at the first
// overrun and every later read returns zeroes.
class ByteSource {
 public:
  explicit ByteSource(std::span<const uint8_t> in) : in_(in) {}
  bool ok() const { return ok_; }
  size_t left() const { return in_.size() - pos_; }
  const uint8_t* take(size_t n) {
    if (!ok_ || left() < n) {
      ok_ = false;
      return nullptr;
    }
    const uint8_t* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <size_t N>
  void array(std::array<uint8_t, N>& out) {
    const uint8_t* p = take(N);
    if (p != nullptr) std::memcpy(out.data(), p, N);
  }
  uint8_t u8() {
    const uint8_t* p = take(1);
    return p != nullptr ? p[0] : 0;
  }
  uint16_t u16() {
    const uint8_t* p = take(2);
    return p != nullptr ? static_cast<uint16_t>(p[0] | (p[1] << 8)) : 0;
  }
  uint32_t u32() {
    const uint8_t* p = take(4);
    return p != nullptr ? get_u32(p) : 0;
  }
  uint64_t u64() {
    const uint8_t* p = take(8);
    return p != nullptr ? get_u64(p) : 0;
  }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

Result<SnapshotMode> mode_from_flags(uint32_t flags) {
  switch (flags) {
    case 0: return SnapshotMode::kSessionEncrypted;
    case kFlagDigest: return SnapshotMode::kSessionDigest;
    case kFlagDigest | kFlagDurable: return SnapshotMode::kDurableExport;
    default: return Corrupt("snapshot header has invalid flags " + std::to_string(flags));
  }
}

bool all_zero(const ProcessNonce& nonce) {
  for (uint8_t b : nonce) {
    if (b != 0) return false;
  }
  return true;
}

// Offset of header_bytes within the prefix (magic u8[8], version u32, flags u32).
constexpr size_t kHeaderBytesOffset = 16;

// The fixed fields, magic to region count, in the order docs/SNAPSHOT_FORMAT.md lists them.
// The magic is skipped (decode_prefix judges it). Corrupt for invalid flags or when `in` ends
// inside the fields.
Status decode_fixed(ByteSource& in, SnapshotHeader& header, uint32_t& header_bytes,
                    uint32_t& region_count) {
  in.take(kMagic.size());
  header.version = in.u32();
  SIESTA_ASSIGN_OR_RETURN(header.mode, mode_from_flags(in.u32()));
  header_bytes = in.u32();
  in.array(header.file_id);
  in.array(header.process_nonce);
  in.array(header.fingerprint);
  header.created_unix = static_cast<int64_t>(in.u64());
  header.expiry_unix = static_cast<int64_t>(in.u64());
  header.generation = in.u64();
  header.chunk_bytes = in.u32();
  region_count = in.u32();
  if (!in.ok()) return Corrupt("snapshot header ends inside its fixed fields");
  return Status::Ok();
}

}  // namespace

void put_u32(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}
void put_u64(uint8_t* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}
uint32_t get_u32(const uint8_t* in) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}
uint64_t get_u64(const uint8_t* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

std::array<uint8_t, 8> encode_u64(uint64_t value) {
  std::array<uint8_t, 8> out{};
  put_u64(out.data(), value);
  return out;
}

std::array<uint8_t, kSealPositionBytes> encode_seal_position(uint32_t domain, uint64_t index) {
  std::array<uint8_t, kSealPositionBytes> out{};
  put_u32(out.data(), domain);
  put_u64(out.data() + 4, index);
  return out;
}

std::string_view snapshot_mode_name(SnapshotMode mode) {
  switch (mode) {
    case SnapshotMode::kSessionEncrypted: return "session-encrypted";
    case SnapshotMode::kSessionDigest: return "session-digest";
    case SnapshotMode::kDurableExport: return "durable-export";
  }
  return "unknown";
}

uint32_t flags_for(SnapshotMode mode) {
  switch (mode) {
    case SnapshotMode::kSessionEncrypted: return 0;
    case SnapshotMode::kSessionDigest: return kFlagDigest;
    case SnapshotMode::kDurableExport: return kFlagDigest | kFlagDurable;
  }
  return 0;
}

Status validate_header(const SnapshotHeader& header) {
  if (header.version != kFormatVersion) {
    return InvalidArgument("snapshot version " + std::to_string(header.version) +
                           " is not the version this build writes");
  }
  if (header.chunk_bytes == 0 || header.chunk_bytes > kMaxChunkBytes) {
    return InvalidArgument("chunk size " + std::to_string(header.chunk_bytes) + " is outside 1.." +
                           std::to_string(kMaxChunkBytes));
  }
  if ((header.mode == SnapshotMode::kDurableExport) != all_zero(header.process_nonce)) {
    return InvalidArgument("the process nonce must be all zero exactly in durable export mode");
  }
  if (header.mode == SnapshotMode::kDurableExport && header.generation != 0) {
    return InvalidArgument("a durable export has no generation (it must be 0)");
  }
  if (header.owner.size() > kMaxOwnerBytes) {
    return InvalidArgument("the owner has " + std::to_string(header.owner.size()) +
                           " bytes; at most " + std::to_string(kMaxOwnerBytes));
  }
  if (header.route.size() > kMaxRouteBytes) {
    return InvalidArgument("the route has " + std::to_string(header.route.size()) +
                           " bytes; at most " + std::to_string(kMaxRouteBytes));
  }
  if (header.regions.size() > kMaxRegions) {
    return InvalidArgument(std::to_string(header.regions.size()) + " regions; at most " +
                           std::to_string(kMaxRegions));
  }
  uint64_t extents = 0;
  for (size_t r = 0; r < header.regions.size(); ++r) {
    const RegionLayout& region = header.regions[r];
    const std::string where = "region " + std::to_string(r);
    if (region.name.empty() || region.name.size() > kMaxNameBytes) {
      return InvalidArgument(where + " name must have 1.." + std::to_string(kMaxNameBytes) +
                             " bytes");
    }
    if (region.persist != PersistKind::kContents && region.persist != PersistKind::kReinit &&
        region.persist != PersistKind::kDiscard) {
      return InvalidArgument(where + " has an unknown persist kind");
    }
    if (region.persist != PersistKind::kContents && !region.extents.empty()) {
      return InvalidArgument(where + " is not saved by contents but lists extents");
    }
    extents += region.extents.size();
    if (extents > kMaxExtentsPerFile) {
      return InvalidArgument("more than " + std::to_string(kMaxExtentsPerFile) + " extents");
    }
    uint64_t end_of_previous = 0;
    for (const Extent& extent : region.extents) {
      if (extent.length == 0) return InvalidArgument(where + " has an empty extent");
      if (extent.offset < end_of_previous) {
        return InvalidArgument(where + " extents are not sorted and disjoint");
      }
      if (extent.offset > region.size || extent.length > region.size - extent.offset) {
        return InvalidArgument(where + " has an extent outside the region");
      }
      end_of_previous = extent.offset + extent.length;
    }
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> encode_header_body(const SnapshotHeader& header) {
  SIESTA_RETURN_IF_ERROR(validate_header(header));
  std::vector<uint8_t> out;
  ByteSink sink(out);
  sink.bytes(kMagic.data(), kMagic.size());
  sink.u32(header.version);
  sink.u32(flags_for(header.mode));
  sink.u32(0);  // header_bytes, patched below
  sink.bytes(header.file_id.data(), header.file_id.size());
  sink.bytes(header.process_nonce.data(), header.process_nonce.size());
  sink.bytes(header.fingerprint.data(), header.fingerprint.size());
  sink.u64(static_cast<uint64_t>(header.created_unix));
  sink.u64(static_cast<uint64_t>(header.expiry_unix));
  sink.u64(header.generation);
  sink.u32(header.chunk_bytes);
  sink.u32(static_cast<uint32_t>(header.regions.size()));
  sink.u8(static_cast<uint8_t>(header.owner.size()));
  sink.bytes(header.owner.data(), header.owner.size());
  sink.u32(static_cast<uint32_t>(header.route.size()));
  sink.bytes(header.route.data(), header.route.size());
  for (const RegionLayout& region : header.regions) {
    sink.u16(static_cast<uint16_t>(region.name.size()));
    sink.bytes(region.name.data(), region.name.size());
    sink.u8(static_cast<uint8_t>(region.persist));
    sink.u64(region.size);
    sink.u32(static_cast<uint32_t>(region.extents.size()));
    for (const Extent& extent : region.extents) {
      sink.u64(extent.offset);
      sink.u64(extent.length);
    }
  }
  const size_t total = out.size() + kTagBytes;
  if (total > kMaxHeaderBytes) return InvalidArgument("snapshot header exceeds its bound");
  put_u32(out.data() + kHeaderBytesOffset, static_cast<uint32_t>(total));
  return out;
}

Result<HeaderPrefix> decode_prefix(std::span<const uint8_t> bytes) {
  const size_t magic_present = std::min(bytes.size(), kMagic.size());
  if (magic_present > 0 && std::memcmp(bytes.data(), kMagic.data(), magic_present) != 0) {
    return Corrupt("not a siesta snapshot (bad magic)");
  }
  if (bytes.size() < kPrefixBytes) {
    return Truncated("snapshot is " + std::to_string(bytes.size()) +
                     " bytes, shorter than its fixed prefix");
  }
  ByteSource in(bytes.first(kPrefixBytes));
  in.take(kMagic.size());
  HeaderPrefix prefix;
  prefix.version = in.u32();
  prefix.flags = in.u32();
  prefix.header_bytes = in.u32();
  return prefix;
}

Status check_prefix(const HeaderPrefix& prefix, uint64_t file_bytes) {
  if (prefix.version != kFormatVersion) {
    return Unsupported("format version " + std::to_string(prefix.version) +
                       "; this build reads version " + std::to_string(kFormatVersion));
  }
  if (prefix.header_bytes < kMinHeaderBytes || prefix.header_bytes > kMaxHeaderBytes) {
    return Corrupt("the stated header length " + std::to_string(prefix.header_bytes) +
                   " is outside " + std::to_string(kMinHeaderBytes) + ".." +
                   std::to_string(kMaxHeaderBytes));
  }
  if (file_bytes < prefix.header_bytes) {
    return Truncated("the file is " + std::to_string(file_bytes) +
                     " bytes, shorter than its header (" + std::to_string(prefix.header_bytes) +
                     " bytes)");
  }
  return Status::Ok();
}

Result<SnapshotHeader> decode_header_body(std::span<const uint8_t> body) {
  ByteSource in(body);
  SnapshotHeader header;
  uint32_t header_bytes = 0;
  uint32_t region_count = 0;
  SIESTA_RETURN_IF_ERROR(decode_fixed(in, header, header_bytes, region_count));
  if (header_bytes != body.size() + kTagBytes) return Corrupt("header length mismatch");
  if (region_count > kMaxRegions) {
    return Corrupt("snapshot header lists " + std::to_string(region_count) + " regions");
  }
  const uint8_t owner_bytes = in.u8();
  const uint8_t* owner = in.take(owner_bytes);
  if (owner != nullptr) header.owner.assign(reinterpret_cast<const char*>(owner), owner_bytes);
  if (!in.ok()) return Corrupt("snapshot header ends inside its owner");
  const uint32_t route_bytes = in.u32();
  // Checked against what is left as well as the bound: no allocation larger than the input.
  if (route_bytes > kMaxRouteBytes || route_bytes > in.left()) {
    return Corrupt("snapshot header states a route of " + std::to_string(route_bytes) +
                   " bytes, more than fit");
  }
  const uint8_t* route = in.take(route_bytes);
  if (route != nullptr) header.route.assign(route, route + route_bytes);
  if (!in.ok()) return Corrupt("snapshot header ends inside its route");
  uint64_t extents_seen = 0;
  for (uint32_t r = 0; r < region_count && in.ok(); ++r) {
    RegionLayout region;
    const uint16_t name_bytes = in.u16();
    if (name_bytes > kMaxNameBytes) return Corrupt("region name longer than its bound");
    const uint8_t* name = in.take(name_bytes);
    if (name != nullptr) region.name.assign(reinterpret_cast<const char*>(name), name_bytes);
    const uint8_t persist = in.u8();
    if (persist > static_cast<uint8_t>(PersistKind::kDiscard)) {
      return Corrupt("region " + std::to_string(r) + " has unknown persist kind");
    }
    region.persist = static_cast<PersistKind>(persist);
    region.size = in.u64();
    const uint32_t extent_count = in.u32();
    extents_seen += extent_count;
    // Checked against what is left as well as the bound: no reservation larger than the input.
    if (extents_seen > kMaxExtentsPerFile || uint64_t{extent_count} * 16 > in.left()) {
      return Corrupt("region " + std::to_string(r) + " lists more extents than fit");
    }
    region.extents.resize(extent_count);
    for (Extent& extent : region.extents) {
      extent.offset = in.u64();
      extent.length = in.u64();
    }
    header.regions.push_back(std::move(region));
  }
  if (!in.ok()) return Corrupt("snapshot header ends inside its region table");
  if (in.left() != 0) return Corrupt("snapshot header has bytes after its region table");
  Status valid = validate_header(header);
  if (!valid.ok()) return Corrupt("malformed snapshot header: " + valid.message());
  return header;
}

FileShape file_shape(const SnapshotHeader& header, uint64_t header_bytes) {
  // A hostile header may describe more than 2^64 bytes in all (1024 regions of up to 2^64
  // bytes each): the sums saturate, so such a file reads as longer than any real file.
  auto add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  auto mul = [](uint64_t a, uint64_t b) {
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
  };
  FileShape shape;
  shape.header_bytes = header_bytes;
  for (const RegionLayout& region : header.regions) {
    for (const Extent& extent : region.extents) {
      shape.payload_bytes = add(shape.payload_bytes, extent.length);
      shape.chunk_count = add(shape.chunk_count, extent.length / header.chunk_bytes +
                                                     (extent.length % header.chunk_bytes != 0));
    }
  }
  shape.file_bytes = add(add(header_bytes, shape.payload_bytes),
                         add(mul(shape.chunk_count, kChunkHeaderBytes + kTagBytes), kTrailerBytes));
  return shape;
}

std::array<uint8_t, kChunkHeaderBytes> encode_chunk_header(uint64_t index, const ChunkSpan& span) {
  std::array<uint8_t, kChunkHeaderBytes> out{};
  put_u32(out.data(), span.region);
  put_u64(out.data() + 4, index);
  put_u32(out.data() + 12, span.length);
  return out;
}

Result<SnapshotHeader> decode_fixed_fields(std::span<const uint8_t> fixed) {
  SIESTA_ASSIGN_OR_RETURN(const HeaderPrefix prefix, decode_prefix(fixed));
  if (fixed.size() < kFixedHeaderBytes) {
    return Truncated("the file is " + std::to_string(fixed.size()) +
                     " bytes, shorter than the fixed header");
  }
  if (prefix.version != kFormatVersion) {
    return Unsupported("format version " + std::to_string(prefix.version) +
                       "; this build reads version " + std::to_string(kFormatVersion));
  }
  ByteSource in(fixed.first(kFixedHeaderBytes));
  SnapshotHeader header;
  uint32_t header_bytes = 0;
  uint32_t region_count = 0;
  SIESTA_RETURN_IF_ERROR(decode_fixed(in, header, header_bytes, region_count));
  return header;
}

SealedHeaderParts split_sealed_header(std::span<const uint8_t> header) {
  SealedHeaderParts parts;
  parts.body = header.first(header.size() - kTagBytes);
  std::memcpy(parts.tag.data(), header.data() + parts.body.size(), kTagBytes);
  return parts;
}

void append_header_tag(std::vector<uint8_t>& body, const Tag& tag) {
  body.insert(body.end(), tag.begin(), tag.end());
}

Status check_chunk_header(std::span<const uint8_t> record, uint64_t index, const ChunkSpan& span) {
  const auto expected = encode_chunk_header(index, span);
  if (record.size() < expected.size() ||
      std::memcmp(record.data(), expected.data(), expected.size()) != 0) {
    return Corrupt("is out of place (region, index or length differ)");
  }
  return Status::Ok();
}

std::array<uint8_t, kTrailerBodyBytes> encode_trailer_body(const FileShape& shape) {
  std::array<uint8_t, kTrailerBodyBytes> body{};
  std::memcpy(body.data(), kTrailerMagic.data(), kTrailerMagic.size());
  put_u64(body.data() + kTrailerMagic.size(), shape.chunk_count);
  put_u64(body.data() + kTrailerMagic.size() + 8, shape.payload_bytes);
  return body;
}

Result<TrailerParts> decode_trailer(std::span<const uint8_t> trailer, const FileShape& shape) {
  TrailerParts parts;
  parts.body = encode_trailer_body(shape);
  if (trailer.size() != kTrailerBytes ||
      std::memcmp(trailer.data(), parts.body.data(), kTrailerBodyBytes) != 0) {
    return Corrupt("the trailer does not match the header");
  }
  std::memcpy(parts.tag.data(), trailer.data() + kTrailerBodyBytes, kTagBytes);
  return parts;
}

std::array<uint8_t, kTrailerBytes> encode_trailer(
    const std::array<uint8_t, kTrailerBodyBytes>& body, const Tag& tag) {
  std::array<uint8_t, kTrailerBytes> out{};
  std::memcpy(out.data(), body.data(), kTrailerBodyBytes);
  std::memcpy(out.data() + kTrailerBodyBytes, tag.data(), kTagBytes);
  return out;
}

std::vector<uint8_t> record_aad(const FileId& file_id, const HeaderDigest& header_digest,
                                std::span<const uint8_t> record) {
  std::vector<uint8_t> aad(file_id.begin(), file_id.end());
  aad.insert(aad.end(), header_digest.begin(), header_digest.end());
  aad.insert(aad.end(), record.begin(), record.end());
  return aad;
}

}  // namespace siesta::snapshot
