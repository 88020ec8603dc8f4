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
  h.chunk_bytes = 4096;
  h.regions.push_back({"kv", PersistKind::kContents, 10000, {{0, 100}, {4096, 5000}}});
  h.regions.push_back({"rope", PersistKind::kReinit, 64, {}});
  return h;
}

TEST(SnapshotFormatTest, FixedFieldsAreLittleEndianAtDocumentedOffsets) {
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, encode_header_body(sample_header()));
  ASSERT_GE(body.size(), kFixedHeaderBytes);
  EXPECT_EQ(std::string(body.begin(), body.begin() + 8), "SIESTASN");
  EXPECT_EQ(body[8], 1);  // version 1, little-endian
  EXPECT_EQ(body[9] | body[10] | body[11], 0);
  EXPECT_EQ(get_u32(body.data() + 12), 0u);  // flags: encrypted
  EXPECT_EQ(get_u32(body.data() + 16), body.size() + kTagBytes);
  EXPECT_EQ(body[20], 0xa0);  // file id
  EXPECT_EQ(body[36], 1);     // process nonce
  EXPECT_EQ(body[52], 0x40);  // fingerprint
  EXPECT_EQ(body[84], 0x08);  // created, low byte first
  EXPECT_EQ(body[91], 0x01);
  EXPECT_EQ(get_u64(body.data() + 92), static_cast<uint64_t>(-2));
  EXPECT_EQ(get_u32(body.data() + 100), 4096u);
  EXPECT_EQ(get_u32(body.data() + 104), 2u);  // region count
  EXPECT_EQ(body[108], 2);                    // first name length (u16)
  EXPECT_EQ(body[109], 0);
  EXPECT_EQ(std::string(body.begin() + 110, body.begin() + 112), "kv");
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
  EXPECT_EQ(back.chunk_bytes, h.chunk_bytes);
  EXPECT_EQ(back.regions, h.regions);
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
  h.regions.resize(kMaxRegions + 1, {"r", PersistKind::kDiscard, 1, {}});
  expect_invalid(h, "too many regions");
}

TEST(SnapshotFormatTest, DecoderBoundsHostileCounts) {
  SnapshotHeader h = sample_header();
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, encode_header_body(h));
  std::vector<uint8_t> bad = body;
  put_u32(bad.data() + 104, 0xffffffff);  // region count
  SIESTA_EXPECT_CODE(decode_header_body(bad), StatusCode::kCorrupt);
  bad = body;
  bad[108] = 0xff;  // name length 0xffff, beyond kMaxNameBytes
  bad[109] = 0xff;
  SIESTA_EXPECT_CODE(decode_header_body(bad), StatusCode::kCorrupt);
  bad = body;
  put_u32(bad.data() + 108 + 2 + 2 + 1 + 8, 0x7fffffff);  // extent count of region 0
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
