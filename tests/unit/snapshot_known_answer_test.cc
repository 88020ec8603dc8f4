// A known-answer test of the snapshot format: a small snapshot, written by SnapshotWriter with a
// fixed key, nonce, fingerprint, clock and generation, must be exactly the bytes that
// docs/SNAPSHOT_FORMAT.md describes -- rebuilt here from the grammar by an encoder of its own,
// on OpenSSL directly (SHA-256 digests, HMAC-SHA256 file keys, AES-256-GCM), sharing nothing
// with core/snapshot but the inputs. Only the file id is random, and the test takes it from
// the file. So a change of any field, offset, seal or associated data cannot pass unnoticed:
// either the code or the document (and this test) must change.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/clock.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using Bytes = std::vector<uint8_t>;
using snapshot::SnapshotMode;

// ---- The documented encoding, written independently ----

void put(Bytes& out, std::string_view text) { out.insert(out.end(), text.begin(), text.end()); }
void put(Bytes& out, const Bytes& bytes) { out.insert(out.end(), bytes.begin(), bytes.end()); }
template <size_t N>
void put(Bytes& out, const std::array<uint8_t, N>& bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}
void put_le(Bytes& out, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}
void put_u16(Bytes& out, uint64_t v) { put_le(out, v, 2); }
void put_u32(Bytes& out, uint64_t v) { put_le(out, v, 4); }
void put_u64(Bytes& out, uint64_t v) { put_le(out, v, 8); }

Bytes known_sha256(const Bytes& in) {
  Bytes out(SHA256_DIGEST_LENGTH);
  SHA256(in.data(), in.size(), out.data());
  return out;
}

// "domain u32 || index u64": the position every seal is bound to (and AES-GCM's 12-byte IV).
Bytes position(uint32_t domain, uint64_t index) {
  Bytes out;
  put_u32(out, domain);
  put_u64(out, index);
  return out;
}

// The digest seal: SHA-256("siesta-snapshot-digest-v1" || domain || index || aad_length || aad
// || payload), first 16 bytes. Returns the payload unchanged (digest modes store plaintext)
// followed by the tag.
Bytes digest_seal(uint32_t domain, uint64_t index, const Bytes& aad, const Bytes& payload) {
  Bytes in;
  put(in, "siesta-snapshot-digest-v1");
  put(in, position(domain, index));
  put_u64(in, aad.size());
  put(in, aad);
  put(in, payload);
  Bytes out = payload;
  const Bytes digest = known_sha256(in);
  out.insert(out.end(), digest.begin(), digest.begin() + 16);
  return out;
}

// AES-256-GCM under file_key = HMAC-SHA256(process key, "siesta-snapshot-file-key-v1" ||
// file_id), IV = position: the ciphertext followed by the 16-byte tag.
Bytes aes_seal(const Bytes& file_key, uint32_t domain, uint64_t index, const Bytes& aad,
               const Bytes& payload) {
  const Bytes iv = position(domain, index);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  Bytes out(payload.size() + 16);
  int n = 0;
  EXPECT_EQ(EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, nullptr, nullptr), 1);
  EXPECT_EQ(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, static_cast<int>(iv.size()), nullptr),
            1);
  EXPECT_EQ(EVP_EncryptInit_ex(ctx, nullptr, nullptr, file_key.data(), iv.data()), 1);
  EXPECT_EQ(EVP_EncryptUpdate(ctx, nullptr, &n, aad.data(), static_cast<int>(aad.size())), 1);
  if (!payload.empty()) {
    EXPECT_EQ(
        EVP_EncryptUpdate(ctx, out.data(), &n, payload.data(), static_cast<int>(payload.size())),
        1);
  }
  EXPECT_EQ(EVP_EncryptFinal_ex(ctx, out.data() + payload.size(), &n), 1);
  EXPECT_EQ(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, out.data() + payload.size()), 1);
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

struct Region {
  std::string name;
  uint8_t persist;  // 0 contents, 1 reinit, 2 discard
  uint64_t size;
  std::vector<snapshot::Extent> extents;
};

struct Inputs {
  SnapshotMode mode = SnapshotMode::kSessionEncrypted;
  ProcessKey::KeyBytes key{};
  snapshot::ProcessNonce nonce{};  // as the file holds it (all zero for exports)
  snapshot::Fingerprint fingerprint{};
  int64_t created_unix = 0;
  int64_t expiry_unix = 0;
  uint64_t generation = 0;
  std::string owner;
  Bytes route;
  uint32_t chunk_bytes = 0;
  std::vector<Region> regions;
  std::vector<std::vector<std::byte>> contents;  // per region
};

// The whole file, from docs/SNAPSHOT_FORMAT.md's grammar and seal table.
Bytes documented_file(const Inputs& in, const snapshot::FileId& file_id) {
  const uint32_t flags = in.mode == SnapshotMode::kSessionEncrypted ? 0
                         : in.mode == SnapshotMode::kSessionDigest  ? 1
                                                                    : 3;
  Bytes file_key;
  if (in.mode == SnapshotMode::kSessionEncrypted) {
    Bytes message;
    put(message, "siesta-snapshot-file-key-v1");
    put(message, file_id);
    file_key.resize(32);
    unsigned int length = 0;
    HMAC(EVP_sha256(), in.key.data(), static_cast<int>(in.key.size()), message.data(),
         message.size(), file_key.data(), &length);
    EXPECT_EQ(length, 32u);
  }
  auto seal = [&](uint32_t domain, uint64_t index, const Bytes& aad, const Bytes& payload) {
    return in.mode == SnapshotMode::kSessionEncrypted
               ? aes_seal(file_key, domain, index, aad, payload)
               : digest_seal(domain, index, aad, payload);
  };

  Bytes table;
  for (const Region& r : in.regions) {
    put_u16(table, r.name.size());
    put(table, r.name);
    table.push_back(r.persist);
    put_u64(table, r.size);
    put_u32(table, r.extents.size());
    for (const snapshot::Extent& e : r.extents) {
      put_u64(table, e.offset);
      put_u64(table, e.length);
    }
  }
  // The route, sealed on its own (domain 4, index 0, the file id as associated data).
  Bytes file_id_bytes;
  put(file_id_bytes, file_id);
  const Bytes route = in.route.empty() ? Bytes{} : seal(4, 0, file_id_bytes, in.route);
  Bytes header;
  put(header, "SIESTASN");
  put_u32(header, 4);  // version
  put_u32(header, flags);
  // header_bytes: fixed fields, owner, route, table, tag
  put_u32(header, 116 + 1 + in.owner.size() + 4 + route.size() + table.size() + 16);
  put(header, file_id);
  put(header, in.nonce);
  put(header, in.fingerprint);
  put_u64(header, static_cast<uint64_t>(in.created_unix));
  put_u64(header, static_cast<uint64_t>(in.expiry_unix));
  put_u64(header, in.generation);
  put_u32(header, in.chunk_bytes);
  put_u32(header, in.regions.size());
  EXPECT_EQ(header.size(), 116u) << "the fixed fields";
  header.push_back(static_cast<uint8_t>(in.owner.size()));
  put(header, in.owner);
  put_u32(header, route.size());
  put(header, route);
  put(header, table);
  const Bytes header_tag = seal(1, 0, header, {});
  put(header, header_tag);  // the header seal: no plaintext, so just the tag
  const Bytes header_digest = known_sha256(header);

  Bytes file = header;
  uint64_t index = 0, payload_bytes = 0;
  for (size_t r = 0; r < in.regions.size(); ++r) {
    for (const snapshot::Extent& e : in.regions[r].extents) {
      for (uint64_t at = 0; at < e.length; at += in.chunk_bytes) {
        const uint64_t length = std::min<uint64_t>(in.chunk_bytes, e.length - at);
        Bytes place;
        put_u32(place, r);
        put_u64(place, index);
        put_u32(place, length);
        Bytes aad;
        put(aad, file_id);
        put(aad, header_digest);
        put(aad, place);
        EXPECT_EQ(aad.size(), 64u) << "a chunk's associated data";
        const auto* bytes = reinterpret_cast<const uint8_t*>(in.contents[r].data() + e.offset + at);
        put(file, place);
        put(file, seal(2, index, aad, Bytes(bytes, bytes + length)));
        ++index;
        payload_bytes += length;
      }
    }
  }
  Bytes body;
  put(body, "SIESTAEN");
  put_u64(body, index);
  put_u64(body, payload_bytes);
  Bytes aad;
  put(aad, file_id);
  put(aad, header_digest);
  put(aad, body);
  put(file, body);
  put(file, seal(3, 0, aad, {}));
  return file;
}

// ---- The test ----

class SnapshotKnownAnswerTest : public ::testing::TestWithParam<SnapshotMode> {};

TEST_P(SnapshotKnownAnswerTest, TheFileIsExactlyTheDocumentedBytes) {
  const SnapshotMode mode = GetParam();
  testing::TempDir dir;
  ManualClock clock(1'900'000'000);
  snapshot_test::TestFileSystem fs(UINT64_MAX, /*skip_syncs=*/true);
  const ProcessKey key = snapshot_test::fixed_key(9);
  const bool durable = mode == SnapshotMode::kDurableExport;

  Inputs in;
  in.mode = mode;
  in.key = key.key_bytes();
  in.nonce = durable ? snapshot::ProcessNonce{} : key.nonce();
  in.fingerprint = snapshot_test::fingerprint(5);
  in.created_unix = 1'900'000'000;
  in.expiry_unix = durable ? 0 : 1'900'000'600;
  in.generation = durable ? 0 : 7;
  in.owner = durable ? "known.snap" : "session-3";
  if (!durable) in.route = {0x52, 0x00, 0xff, 0x07, 0x11};
  in.chunk_bytes = 4;
  in.regions = {{"kv", 0, 11, {{0, 3}, {5, 6}}}, {"rope", 1, 8, {}}, {"scratch", 2, 4, {}}};
  std::vector<snapshot_test::HostRegion> host;
  for (size_t r = 0; r < in.regions.size(); ++r) {
    const Region& region = in.regions[r];
    host.push_back(snapshot_test::host_region(region.name, region.size, region.extents, 40 + r,
                                              static_cast<snapshot::PersistKind>(region.persist)));
    in.contents.push_back(host.back().bytes);
  }
  std::vector<SnapshotRegion> views;
  views.reserve(host.size());
  for (auto& h : host) views.push_back(h.region);

  SnapshotWriteOptions options;
  options.path = dir.file("known.snap");
  options.mode = mode;
  options.fingerprint = in.fingerprint;
  options.expiry_unix = in.expiry_unix;
  options.generation = in.generation;
  options.owner = in.owner;
  options.route = in.route;
  options.chunk_bytes = in.chunk_bytes;
  SIESTA_ASSERT_OK_AND_ASSIGN(SnapshotWriteResult written,
                              SnapshotWriter(fs, clock, key, nullptr).write(options, views));
  const Bytes got = snapshot_test::read_file(options.path);
  const Bytes want = documented_file(in, written.file_id);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "first difference at byte " << i << " of " << got.size();
  }
  // Three chunks: "kv" bytes 0..3, then 5..9 and 9..11 (its second extent cut at chunk_bytes);
  // the reinit and discard regions are listed in the header only.
  EXPECT_EQ(written.chunk_count, 3u);
  EXPECT_EQ(written.payload_bytes, 9u);
}

INSTANTIATE_TEST_SUITE_P(EveryMode, SnapshotKnownAnswerTest,
                         ::testing::Values(SnapshotMode::kSessionEncrypted,
                                           SnapshotMode::kSessionDigest,
                                           SnapshotMode::kDurableExport),
                         [](const ::testing::TestParamInfo<SnapshotMode>& mode) -> std::string {
                           switch (mode.param) {
                             case SnapshotMode::kSessionEncrypted: return "SessionEncrypted";
                             case SnapshotMode::kSessionDigest: return "SessionDigest";
                             case SnapshotMode::kDurableExport: return "DurableExport";
                           }
                           return "Unknown";
                         });

}  // namespace
}  // namespace siesta
