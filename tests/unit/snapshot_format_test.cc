// The snapshot header codec: byte positions and order of every fixed field, the bounds a
// decoder enforces, and the chunk plan a header implies.
#include "core/snapshot/snapshot_format.h"

#include <gtest/gtest.h>

#include "tests/support/backend_test_util.h"

namespace siesta::snapshot {
namespace {

SnapshotHeader sample_header() {
  SnapshotHeader h;
  h.mode = SnapshotMode::kSessionEncrypted;
  for (size_t i = 0; i < h.file_id.size(); ++i) h.file_id[i] = static_cast<uint8_t>(0xa0 + i);
  for (size_t i = 0; i < h.process_nonce.size(); ++i)
    h.process_nonce[i] = static_cast<uint8_t>(i + 1);
  for (size_t i = 0; i < h.fingerprint.size(); ++i)
    h.fingerprint[i] = static_cast<uint8_t>(0x40 + i);
  h.created_unix = 0x0102030405060708;
  h.expiry_unix = -2;
  h.generation = 0x1112131415161718;
  h.chunk_bytes = 4096;
  h.owner = "owner";
  h.route = {0xc1, 0xc2, 0xc3};
  h.regions.push_back({"kv", PersistKind::kContents, 10000, {{0, 100}, {4096, 5000}}});
  h.regions.push_back({"rope", PersistKind::kReinit, 64, {}});
  return h;
}

// Offsets as docs/SNAPSHOT_FORMAT.md lists them (version 4), written out here on purpose: the
// format module is their one encoder, and this checks it against the document.
TEST(SnapshotFormatTest, FixedFieldsAreLittleEndianAtDocumentedOffsets) {
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, encode_header_body(sample_header()));
  ASSERT_GE(body.size(), kFixedHeaderBytes);
  EXPECT_EQ(kFixedHeaderBytes, 116u);
  EXPECT_EQ(std::string(body.begin(), body.begin() + 8), "SIESTASN");
  EXPECT_EQ(body[8], 4);  // version 4, little-endian
  EXPECT_EQ(body[9] | body[10] | body[11], 0);
  EXPECT_EQ(get_u32(body.data() + 12), 0u);  // flags: encrypted
  EXPECT_EQ(get_u32(body.data() + 16), body.size() + kTagBytes);
  EXPECT_EQ(body[20], 0xa0);  // file id
  EXPECT_EQ(body[36], 1);     // process nonce
  EXPECT_EQ(body[52], 0x40);  // fingerprint
  EXPECT_EQ(body[84], 0x08);  // created, low byte first
  EXPECT_EQ(body[91], 0x01);
  EXPECT_EQ(get_u64(body.data() + 92), static_cast<uint64_t>(-2));
  EXPECT_EQ(body[100], 0x18);  // generation, low byte first
  EXPECT_EQ(get_u64(body.data() + 100), 0x1112131415161718u);
  EXPECT_EQ(get_u32(body.data() + 108), 4096u);
  EXPECT_EQ(get_u32(body.data() + 112), 2u);  // region count
  EXPECT_EQ(body[116], 5);                    // owner length (u8)
  EXPECT_EQ(std::string(body.begin() + 117, body.begin() + 122), "owner");
  EXPECT_EQ(get_u32(body.data() + 122), 3u);  // route length (u32)
  EXPECT_EQ(body[126], 0xc1);
  EXPECT_EQ(body[128], 0xc3);
  EXPECT_EQ(body[129], 2);  // first name length (u16)
  EXPECT_EQ(body[130], 0);
  EXPECT_EQ(std::string(body.begin() + 131, body.begin() + 133), "kv");
}

TEST(SnapshotFormatTest, HeaderRoundTrips) {
  const SnapshotHeader h = sample_header();
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, encode_header_body(h));
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotHeader back, decode_header_body(body));
  EXPECT_EQ(back.mode, h.mode);
  EXPECT_EQ(back.file_id, h.file_id);
  EXPECT_EQ(back.process_nonce, h.process_nonce);
  EXPECT_EQ(back.fingerprint, h.fingerprint);
  EXPECT_EQ(back.created_unix, h.created_unix);
  EXPECT_EQ(back.expiry_unix, h.expiry_unix);
  EXPECT_EQ(back.generation, h.generation);
  EXPECT_EQ(back.chunk_bytes, h.chunk_bytes);
  EXPECT_EQ(back.owner, h.owner);
  EXPECT_EQ(back.route, h.route);
  EXPECT_EQ(back.regions, h.regions);
  // Every owner length the format holds, none included.
  for (size_t length : {size_t{0}, size_t{1}, size_t{kMaxOwnerBytes}}) {
    SnapshotHeader owned = sample_header();
    owned.owner = std::string(length, 'o');
    SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> encoded, encode_header_body(owned));
    SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotHeader decoded, decode_header_body(encoded));
    EXPECT_EQ(decoded.owner, owned.owner);
    EXPECT_EQ(decoded.regions, owned.regions);
  }
}

TEST(SnapshotFormatTest, ModesMapToFlags) {
  EXPECT_EQ(flags_for(SnapshotMode::kSessionEncrypted), 0u);
  EXPECT_EQ(flags_for(SnapshotMode::kSessionDigest), kFlagDigest);
  EXPECT_EQ(flags_for(SnapshotMode::kDurableExport), kFlagDigest | kFlagDurable);
  SnapshotHeader h = sample_header();
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, encode_header_body(h));
  put_u32(body.data() + 12, kFlagDurable);  // durable without digest: not a valid mode
  SIESTA_EXPECT_CODE(decode_header_body(body), StatusCode::kCorrupt);
  put_u32(body.data() + 12, 1u << 7);
  SIESTA_EXPECT_CODE(decode_header_body(body), StatusCode::kCorrupt);
}

TEST(SnapshotFormatTest, ValidateRejectsEveryBrokenRule) {
  auto expect_invalid = [](const SnapshotHeader& h, const char* why) {
    SCOPED_TRACE(why);
    SIESTA_EXPECT_CODE(validate_header(h), StatusCode::kInvalidArgument);
    SIESTA_EXPECT_CODE(encode_header_body(h), StatusCode::kInvalidArgument);
  };
  SIESTA_EXPECT_OK(validate_header(sample_header()));
  SnapshotHeader h = sample_header();
  h.chunk_bytes = 0;
  expect_invalid(h, "zero chunk");
  h = sample_header();
  h.chunk_bytes = kMaxChunkBytes + 1;
  expect_invalid(h, "huge chunk");
  h = sample_header();
  h.regions[0].name = "";
  expect_invalid(h, "empty name");
  h = sample_header();
  h.regions[0].name = std::string(kMaxNameBytes + 1, 'n');
  expect_invalid(h, "long name");
  h = sample_header();
  h.regions[0].extents = {{100, 10}, {50, 10}};
  expect_invalid(h, "unsorted");
  h = sample_header();
  h.regions[0].extents = {{0, 100}, {99, 10}};
  expect_invalid(h, "overlap");
  h = sample_header();
  h.regions[0].extents = {{9990, 11}};
  expect_invalid(h, "past the end");
  h = sample_header();
  h.regions[0].extents = {{UINT64_MAX, 2}};
  expect_invalid(h, "offset overflow");
  h = sample_header();
  h.regions[0].extents = {{0, 0}};
  expect_invalid(h, "empty extent");
  h = sample_header();
  h.regions[1].extents = {{0, 8}};
  expect_invalid(h, "extents on a reinit region");
  h = sample_header();
  h.mode = SnapshotMode::kDurableExport;
  expect_invalid(h, "export with a nonce");
  h = sample_header();
  h.process_nonce = {};
  expect_invalid(h, "session without a nonce");
  h = sample_header();
  h.mode = SnapshotMode::kDurableExport;
  h.process_nonce = {};
  expect_invalid(h, "export with a generation");
  h.generation = 0;
  SIESTA_EXPECT_OK(validate_header(h));
  h = sample_header();
  h.regions.resize(kMaxRegions + 1, {"r", PersistKind::kDiscard, 1, {}});
  expect_invalid(h, "too many regions");
  h = sample_header();
  h.owner = std::string(kMaxOwnerBytes + 1, 'o');
  expect_invalid(h, "long owner");
  h = sample_header();
  h.route.assign(kMaxRouteBytes + 1, 0);
  expect_invalid(h, "long route");
}

TEST(SnapshotFormatTest, DecoderBoundsHostileCounts) {
  SnapshotHeader h = sample_header();
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, encode_header_body(h));
  std::vector<uint8_t> bad = body;
  put_u32(bad.data() + 112, 0xffffffff);  // region count
  SIESTA_EXPECT_CODE(decode_header_body(bad), StatusCode::kCorrupt);
  bad = body;
  bad[116] = 0xff;  // owner length 255: more than the header holds
  SIESTA_EXPECT_CODE(decode_header_body(bad), StatusCode::kCorrupt);
  const size_t route = 116 + 1 + h.owner.size();  // the route's length
  bad = body;
  put_u32(bad.data() + route, 0x00ffffff);  // a route longer than the header (and the bound)
  SIESTA_EXPECT_CODE(decode_header_body(bad), StatusCode::kCorrupt);
  bad = body;
  put_u32(bad.data() + route, static_cast<uint32_t>(h.route.size() + 100));  // past the end
  SIESTA_EXPECT_CODE(decode_header_body(bad), StatusCode::kCorrupt);
  const size_t table = route + 4 + h.route.size();  // the region table's first byte
  bad = body;
  bad[table] = 0xff;  // name length 0xffff, beyond kMaxNameBytes
  bad[table + 1] = 0xff;
  SIESTA_EXPECT_CODE(decode_header_body(bad), StatusCode::kCorrupt);
  bad = body;
  put_u32(bad.data() + table + 2 + 2 + 1 + 8, 0x7fffffff);  // extent count of region 0
  SIESTA_EXPECT_CODE(decode_header_body(bad), StatusCode::kCorrupt);
  bad = body;
  bad.push_back(0);  // a byte after the table (and a matching stated length)
  put_u32(bad.data() + 16, static_cast<uint32_t>(bad.size() + kTagBytes));
  SIESTA_EXPECT_CODE(decode_header_body(bad), StatusCode::kCorrupt);
  for (size_t cut = 0; cut < body.size(); ++cut) {
    std::vector<uint8_t> shorter(body.begin(), body.begin() + cut);
    if (cut >= 20) put_u32(shorter.data() + 16, static_cast<uint32_t>(cut + kTagBytes));
    SIESTA_EXPECT_CODE(decode_header_body(shorter), StatusCode::kCorrupt);
  }
}

TEST(SnapshotFormatTest, PrefixTellsTruncatedFromForeignBytes) {
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, encode_header_body(sample_header()));
  SIESTA_EXPECT_CODE(decode_prefix({body.data(), 5}), StatusCode::kTruncated);
  SIESTA_EXPECT_CODE(decode_prefix({body.data(), 0}), StatusCode::kTruncated);
  SIESTA_EXPECT_CODE(decode_prefix({body.data(), 19}), StatusCode::kTruncated);
  std::vector<uint8_t> other = body;
  other[3] = 'x';
  SIESTA_EXPECT_CODE(decode_prefix({other.data(), 5}), StatusCode::kCorrupt);
  SIESTA_ASSERT_OK_AND_ASSIGN(HeaderPrefix prefix, decode_prefix({body.data(), 20}));
  EXPECT_EQ(prefix.version, kFormatVersion);
}

TEST(SnapshotFormatTest, CheckedPrefixRefusesOtherVersionsHostileLengthsAndShortFiles) {
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, encode_header_body(sample_header()));
  SIESTA_ASSERT_OK_AND_ASSIGN(const HeaderPrefix prefix, decode_prefix({body.data(), 20}));
  const uint64_t whole = prefix.header_bytes;
  SIESTA_EXPECT_OK(check_prefix(prefix, whole));
  HeaderPrefix p = prefix;
  p.version = 1;  // the layout without a generation
  SIESTA_EXPECT_CODE(check_prefix(p, whole), StatusCode::kUnsupported);
  p.version = 2;  // the layout without an owner
  SIESTA_EXPECT_CODE(check_prefix(p, whole), StatusCode::kUnsupported);
  p = prefix;
  p.header_bytes = kMinHeaderBytes - 1;
  SIESTA_EXPECT_CODE(check_prefix(p, whole), StatusCode::kCorrupt);
  p.header_bytes = kMaxHeaderBytes + 1;
  SIESTA_EXPECT_CODE(check_prefix(p, UINT64_MAX), StatusCode::kCorrupt);
  SIESTA_EXPECT_CODE(check_prefix(prefix, whole - 1), StatusCode::kTruncated);
}

TEST(SnapshotFormatTest, FixedFieldsDecodeWithoutTheTable) {
  const SnapshotHeader h = sample_header();
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, encode_header_body(h));
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotHeader fixed,
                              decode_fixed_fields({body.data(), kFixedHeaderBytes}));
  EXPECT_EQ(fixed.mode, h.mode);
  EXPECT_EQ(fixed.expiry_unix, h.expiry_unix);
  EXPECT_EQ(fixed.generation, h.generation);
  EXPECT_EQ(fixed.chunk_bytes, h.chunk_bytes);
  EXPECT_TRUE(fixed.regions.empty());
  SIESTA_EXPECT_CODE(decode_fixed_fields({body.data(), kFixedHeaderBytes - 1}),
                     StatusCode::kTruncated);
  std::vector<uint8_t> bad = body;
  put_u32(bad.data() + 12, 7);
  SIESTA_EXPECT_CODE(decode_fixed_fields(bad), StatusCode::kCorrupt);
  bad = body;
  put_u32(bad.data() + 8, kFormatVersion + 1);
  SIESTA_EXPECT_CODE(decode_fixed_fields(bad), StatusCode::kUnsupported);
  bad = body;
  bad[1] = 'x';
  SIESTA_EXPECT_CODE(decode_fixed_fields(bad), StatusCode::kCorrupt);
  // The deadline: expiry_unix, except "never" for an export without one.
  EXPECT_EQ(expiry_deadline(h), h.expiry_unix);
  SnapshotHeader exported = h;
  exported.mode = SnapshotMode::kDurableExport;
  exported.expiry_unix = kNeverExpires;
  EXPECT_EQ(expiry_deadline(exported), INT64_MAX);
}

TEST(SnapshotFormatTest, RecordsAndTrailerHaveTheirDocumentedShape) {
  const ChunkRecordLayout layout = chunk_record_layout(1000);
  EXPECT_EQ(layout.payload_at, 16u);
  EXPECT_EQ(layout.tag_at, 1016u);
  EXPECT_EQ(layout.size, 1032u);
  const ChunkSpan span{3, 4096, 1000};
  const auto chunk_header = encode_chunk_header(7, span);
  EXPECT_EQ(get_u32(chunk_header.data()), 3u);
  EXPECT_EQ(get_u64(chunk_header.data() + 4), 7u);
  EXPECT_EQ(get_u32(chunk_header.data() + 12), 1000u);
  SIESTA_EXPECT_OK(check_chunk_header(chunk_header, 7, span));
  SIESTA_EXPECT_CODE(check_chunk_header(chunk_header, 8, span), StatusCode::kCorrupt);
  SIESTA_EXPECT_CODE(check_chunk_header(std::span(chunk_header).first(15), 7, span),
                     StatusCode::kCorrupt);

  FileShape shape;
  shape.chunk_count = 5;
  shape.payload_bytes = 0x0102;
  const auto body = encode_trailer_body(shape);
  EXPECT_EQ(std::string(body.begin(), body.begin() + 8), "SIESTAEN");
  EXPECT_EQ(get_u64(body.data() + 8), 5u);
  EXPECT_EQ(get_u64(body.data() + 16), 0x0102u);
  Tag tag{};
  tag[0] = 0xee;
  const auto trailer = encode_trailer(body, tag);
  EXPECT_EQ(trailer.size(), kTrailerBytes);
  EXPECT_EQ(trailer[24], 0xee);
  SIESTA_ASSERT_OK_AND_ASSIGN(const TrailerParts parts, decode_trailer(trailer, shape));
  EXPECT_EQ(parts.tag, tag);
  EXPECT_EQ(parts.body, body);
  FileShape other = shape;
  other.chunk_count = 4;
  SIESTA_EXPECT_CODE(decode_trailer(trailer, other), StatusCode::kCorrupt);
  SIESTA_EXPECT_CODE(decode_trailer(std::span(trailer).first(39), shape), StatusCode::kCorrupt);

  const auto position = encode_seal_position(2, 0x0a0b);
  EXPECT_EQ(get_u32(position.data()), 2u);
  EXPECT_EQ(get_u64(position.data() + 4), 0x0a0bu);

  std::vector<uint8_t> header = {1, 2, 3};
  append_header_tag(header, tag);
  ASSERT_EQ(header.size(), 3 + kTagBytes);
  const SealedHeaderParts sealed = split_sealed_header(header);
  EXPECT_EQ(sealed.body.size(), 3u);
  EXPECT_EQ(sealed.tag, tag);
}

TEST(SnapshotFormatTest, ChunkPlanCutsExtentsAndSizesTheFile) {
  const SnapshotHeader h = sample_header();  // extents 100 and 5000 bytes, chunks of 4096
  std::vector<ChunkSpan> spans;
  SIESTA_ASSERT_OK(for_each_chunk(h, [&](uint64_t index, const ChunkSpan& s) {
    EXPECT_EQ(index, spans.size());
    spans.push_back(s);
    return Status::Ok();
  }));
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].offset, 0u);
  EXPECT_EQ(spans[0].length, 100u);
  EXPECT_EQ(spans[1].offset, 4096u);
  EXPECT_EQ(spans[1].length, 4096u);
  EXPECT_EQ(spans[2].offset, 8192u);
  EXPECT_EQ(spans[2].length, 904u);
  const FileShape shape = file_shape(h, 500);
  EXPECT_EQ(shape.chunk_count, 3u);
  EXPECT_EQ(shape.payload_bytes, 5100u);
  EXPECT_EQ(shape.file_bytes, 500u + 5100u + 3 * 32u + kTrailerBytes);
}

TEST(SnapshotFormatTest, ShapeSaturatesInsteadOfOverflowing) {
  SnapshotHeader h = sample_header();
  h.regions.clear();
  for (int i = 0; i < 4; ++i) {
    h.regions.push_back(
        {"r" + std::to_string(i), PersistKind::kContents, UINT64_MAX, {{0, UINT64_MAX - 1}}});
  }
  EXPECT_EQ(file_shape(h, 1000).file_bytes, UINT64_MAX);
}

}  // namespace
}  // namespace siesta::snapshot
