// Both sealers: a seal opens only with the same key, position and aad; AES-GCM hides the
// plaintext, the digest leaves it as it is; process keys are random and wiped.
#include "core/snapshot/chunk_sealer.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/backend_test_util.h"
#include "tests/support/snapshot_test_util.h"

namespace siesta {
namespace {

using snapshot::Tag;

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 13);
  return out;
}

struct SealerCase {
  const char* name;
  bool encrypted;
};

class ChunkSealerTest : public ::testing::TestWithParam<SealerCase> {
 protected:
  std::unique_ptr<ChunkSealer> make(const ProcessKey& key, uint8_t file) {
    snapshot::FileId id{};
    id[0] = file;
    auto sealer = make_sealer(GetParam().encrypted ? snapshot::SnapshotMode::kSessionEncrypted
                                                   : snapshot::SnapshotMode::kSessionDigest,
                              key, id);
    EXPECT_TRUE(sealer.ok());
    return std::move(sealer).value();
  }
};

TEST_P(ChunkSealerTest, OpensWhatItSealed) {
  ProcessKey key = snapshot_test::fixed_key(1);
  auto sealer = make(key, 1);
  const auto plain = bytes_of(1000, 5), aad = bytes_of(64, 9);
  std::vector<uint8_t> cipher(plain.size()), back(plain.size());
  Tag tag{};
  SIESTA_ASSERT_OK(sealer->seal(SealDomain::kChunk, 7, aad, plain, cipher, tag));
  EXPECT_EQ(sealer->encrypts(), GetParam().encrypted);
  EXPECT_EQ(cipher != plain, GetParam().encrypted);
  SIESTA_ASSERT_OK(sealer->open(SealDomain::kChunk, 7, aad, cipher, tag, back));
  EXPECT_EQ(back, plain);
  // In place, and empty plaintext (a header or trailer seal).
  std::vector<uint8_t> inplace = plain;
  SIESTA_ASSERT_OK(sealer->seal(SealDomain::kChunk, 8, aad, inplace, inplace, tag));
  SIESTA_ASSERT_OK(sealer->open(SealDomain::kChunk, 8, aad, inplace, tag, inplace));
  EXPECT_EQ(inplace, plain);
  SIESTA_ASSERT_OK(sealer->seal(SealDomain::kHeader, 0, aad, {}, {}, tag));
  SIESTA_EXPECT_OK(sealer->open(SealDomain::kHeader, 0, aad, {}, tag, {}));
}

TEST_P(ChunkSealerTest, AnyChangeIsCorrupt) {
  ProcessKey key = snapshot_test::fixed_key(1);
  auto sealer = make(key, 1);
  const auto plain = bytes_of(300, 5), aad = bytes_of(64, 9);
  std::vector<uint8_t> cipher(plain.size()), out(plain.size());
  Tag tag{};
  SIESTA_ASSERT_OK(sealer->seal(SealDomain::kChunk, 3, aad, plain, cipher, tag));
  auto flipped = cipher;
  flipped[123] ^= 1;
  SIESTA_EXPECT_CODE(sealer->open(SealDomain::kChunk, 3, aad, flipped, tag, out),
                     StatusCode::kCorrupt);
  auto other_aad = aad;
  other_aad[0] ^= 0x80;
  SIESTA_EXPECT_CODE(sealer->open(SealDomain::kChunk, 3, other_aad, cipher, tag, out),
                     StatusCode::kCorrupt);
  Tag bad_tag = tag;
  bad_tag[15] ^= 4;
  SIESTA_EXPECT_CODE(sealer->open(SealDomain::kChunk, 3, aad, cipher, bad_tag, out),
                     StatusCode::kCorrupt);
  SIESTA_EXPECT_CODE(sealer->open(SealDomain::kChunk, 4, aad, cipher, tag, out),
                     StatusCode::kCorrupt);
  SIESTA_EXPECT_CODE(sealer->open(SealDomain::kTrailer, 3, aad, cipher, tag, out),
                     StatusCode::kCorrupt);
}

// A digest has no key (its aad binds the file); AES-GCM chunks open only under their own
// file's key, derived from the process key and the file id.
TEST(AesGcmSealerTest, ChunksDoNotOpenUnderAnotherFileOrKey) {
  const ProcessKey key = snapshot_test::fixed_key(1);
  const ProcessKey other_key = snapshot_test::fixed_key(2);
  auto sealer_for = [](const ProcessKey& k, uint8_t file) {
    snapshot::FileId id{};
    id[0] = file;
    return make_aes_gcm_sealer(k, id);
  };
  SIESTA_ASSERT_OK_AND_ASSIGN(auto sealer, sealer_for(key, 1));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto other_file, sealer_for(key, 2));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto other_process, sealer_for(other_key, 1));
  const auto plain = bytes_of(100, 5), aad = bytes_of(16, 9);
  std::vector<uint8_t> cipher(plain.size()), out(plain.size());
  Tag tag{};
  SIESTA_ASSERT_OK(sealer->seal(SealDomain::kChunk, 0, aad, plain, cipher, tag));
  SIESTA_EXPECT_CODE(other_file->open(SealDomain::kChunk, 0, aad, cipher, tag, out),
                     StatusCode::kCorrupt);
  SIESTA_EXPECT_CODE(other_process->open(SealDomain::kChunk, 0, aad, cipher, tag, out),
                     StatusCode::kCorrupt);
  SIESTA_EXPECT_OK(sealer->open(SealDomain::kChunk, 0, aad, cipher, tag, out));
}

INSTANTIATE_TEST_SUITE_P(Sealers, ChunkSealerTest,
                         ::testing::Values(SealerCase{"aes_gcm", true},
                                           SealerCase{"digest", false}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(ProcessKeyTest, GeneratedKeysDiffer) {
  SIESTA_ASSERT_OK_AND_ASSIGN(ProcessKey a, ProcessKey::generate());
  SIESTA_ASSERT_OK_AND_ASSIGN(ProcessKey b, ProcessKey::generate());
  EXPECT_NE(a.key_bytes(), b.key_bytes());
  EXPECT_NE(a.nonce(), b.nonce());
}

TEST(ProcessKeyTest, MovedFromKeyIsWiped) {
  ProcessKey a = snapshot_test::fixed_key(3);
  const ProcessKey::KeyBytes original = a.key_bytes();
  ProcessKey b = std::move(a);
  EXPECT_EQ(b.key_bytes(), original);
  // NOLINTNEXTLINE(bugprone-use-after-move,clang-analyzer-cplusplus.Move): the wipe is the point
  EXPECT_EQ(a.key_bytes(), ProcessKey::KeyBytes{});
}

// Guards: a key moved onto itself wiped (the move's wipe of its source, applied to itself).
TEST(ProcessKeyTest, AKeyMovedOntoItselfIsKept) {
  ProcessKey a = snapshot_test::fixed_key(3);
  const ProcessKey::KeyBytes original = a.key_bytes();
  const snapshot::ProcessNonce nonce = a.nonce();
  ProcessKey& same = a;  // through a reference: the compiler's self-move warning aside
  a = std::move(same);
  EXPECT_EQ(a.key_bytes(), original);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.nonce(), nonce);
}

TEST(Sha256Test, KnownVector) {
  const std::string abc = "abc";
  SIESTA_ASSERT_OK_AND_ASSIGN(auto digest,
                              sha256({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()}));
  EXPECT_EQ(digest[0], 0xba);
  EXPECT_EQ(digest[31], 0xad);
}

}  // namespace
}  // namespace siesta
