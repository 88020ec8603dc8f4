// The sealers and the process key when an OpenSSL call fails, which no working library does:
// each call the AES-GCM sealer, the digest sealer, the file-key derivation, sha256() and
// random_bytes() make is failed in turn through the interposed OpenSSL of
// tests/support/openssl_call_faults.cc. Each is Internal with the step that failed (never
// Corrupt: the data is not to blame), a digest that fails never lets a chunk reach its
// destination, and the sealer works again on the next call. Each case says what it injects.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/snapshot/chunk_sealer.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/call_faults.h"
#include "tests/support/snapshot_test_util.h"

namespace siesta {
namespace {

using snapshot::SnapshotMode;
using snapshot::Tag;
using test_util::CallFault;
using test_util::ScopedCallFault;

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 7);
  return out;
}

// One injected failure and what the sealer must say about it.
struct SealerFault {
  CallFault fault;
  const char* says = "";
  bool empty_aad = false;  // an empty aad skips the aad update: the next one is the data's
};

class ChunkSealerOpensslFaultTest : public ::testing::Test {
 protected:
  std::unique_ptr<ChunkSealer> make(SnapshotMode mode) {
    Result<std::unique_ptr<ChunkSealer>> sealer = make_sealer(mode, key_, snapshot::FileId{7});
    EXPECT_TRUE(sealer.ok()) << sealer.status().to_string();
    return sealer.ok() ? std::move(sealer).value() : nullptr;
  }

  // The sealer still seals and opens once the fault is gone.
  static void expect_round_trip(ChunkSealer& sealer) {
    const std::vector<uint8_t> plain = bytes_of(100, 3), aad = bytes_of(20, 5);
    std::vector<uint8_t> sealed(plain.size()), opened(plain.size());
    Tag tag{};
    SIESTA_ASSERT_OK(sealer.seal(SealDomain::kChunk, 1, aad, plain, sealed, tag));
    SIESTA_ASSERT_OK(sealer.open(SealDomain::kChunk, 1, aad, sealed, tag, opened));
    EXPECT_EQ(opened, plain);
  }

  ProcessKey key_ = snapshot_test::fixed_key(3);
  const std::vector<uint8_t> plain_ = bytes_of(100, 1), aad_ = bytes_of(20, 2);
};

// Guards: a failed AES-GCM step taken for a sealed chunk (garbage or a zero tag written as a
// valid record), or reported as something the caller would blame on the data.
TEST_F(ChunkSealerOpensslFaultTest, AnAesGcmSealWhoseCipherCallFailsIsInternal) {
  std::unique_ptr<ChunkSealer> sealer = make(SnapshotMode::kSessionEncrypted);
  ASSERT_NE(sealer, nullptr);
  const SealerFault cases[] = {
      {{.function = "EVP_EncryptInit_ex"}, "AES-GCM init failed"},
      {{.function = "EVP_EncryptUpdate"}, "AES-GCM aad failed"},
      {{.function = "EVP_EncryptUpdate", .nth_call = 2}, "AES-GCM encrypt failed"},
      {{.function = "EVP_EncryptUpdate"}, "AES-GCM encrypt failed", /*empty_aad=*/true},
      {{.function = "EVP_EncryptFinal_ex"}, "AES-GCM tag failed"},
      {{.function = "EVP_CIPHER_CTX_ctrl"}, "AES-GCM tag failed"},
  };
  for (const SealerFault& c : cases) {
    SCOPED_TRACE(c.fault.describe() + (c.empty_aad ? ", empty aad" : ""));
    std::vector<uint8_t> sealed(plain_.size());
    Tag tag{};
    {
      ScopedCallFault armed(c.fault);
      const Status status =
          sealer->seal(SealDomain::kChunk, 1, c.empty_aad ? std::span<const uint8_t>() : aad_,
                       plain_, sealed, tag);
      EXPECT_EQ(status.code(), StatusCode::kInternal);
      EXPECT_EQ(status.message(), c.says);
      EXPECT_EQ(armed.fired(), 1u);
    }
    expect_round_trip(*sealer);
  }
}

TEST_F(ChunkSealerOpensslFaultTest, AnAesGcmOpenWhoseCipherCallFailsIsInternalNotCorrupt) {
  std::unique_ptr<ChunkSealer> sealer = make(SnapshotMode::kSessionEncrypted);
  ASSERT_NE(sealer, nullptr);
  std::vector<uint8_t> sealed(plain_.size());
  Tag tag{};
  SIESTA_ASSERT_OK(sealer->seal(SealDomain::kChunk, 1, aad_, plain_, sealed, tag));
  const SealerFault cases[] = {
      {{.function = "EVP_DecryptInit_ex"}, "AES-GCM init failed"},
      {{.function = "EVP_DecryptUpdate"}, "AES-GCM aad failed"},
      {{.function = "EVP_DecryptUpdate", .nth_call = 2}, "AES-GCM decrypt failed"},
      {{.function = "EVP_CIPHER_CTX_ctrl"}, "AES-GCM set tag failed"},
  };
  for (const SealerFault& c : cases) {
    SCOPED_TRACE(c.fault.describe());
    std::vector<uint8_t> opened(plain_.size());
    {
      ScopedCallFault armed(c.fault);
      const Status status = sealer->open(SealDomain::kChunk, 1, aad_, sealed, tag, opened);
      EXPECT_EQ(status.code(), StatusCode::kInternal);
      EXPECT_EQ(status.message(), c.says);
      EXPECT_EQ(armed.fired(), 1u);
    }
    expect_round_trip(*sealer);
  }
}

// Guards: a sealer made without its file key (HMAC failed: every file would share whatever the
// buffer held) or without a cipher context.
TEST_F(ChunkSealerOpensslFaultTest, AnAesGcmSealerThatCannotBeMadeIsInternal) {
  const SealerFault cases[] = {
      {{.function = "HMAC"}, "HMAC-SHA256 file key derivation failed"},
      {{.function = "EVP_CIPHER_CTX_new"}, "EVP_CIPHER_CTX_new failed"},
  };
  for (const SealerFault& c : cases) {
    SCOPED_TRACE(c.fault.describe());
    ScopedCallFault armed(c.fault);
    const Result<std::unique_ptr<ChunkSealer>> sealer =
        make_sealer(SnapshotMode::kSessionEncrypted, key_, snapshot::FileId{7});
    EXPECT_EQ(sealer.status().code(), StatusCode::kInternal);
    EXPECT_EQ(sealer.status().message(), c.says);
  }
}

// Every step of the digest: the context, its start, each of the five inputs and the final
// digest. Guards: a tag computed over part of the input (or left as it was) taken for the
// chunk's, and a chunk whose digest could not be checked copied to its destination.
TEST_F(ChunkSealerOpensslFaultTest, ADigestWhoseHashCallFailsIsInternalAndCopiesNothing) {
  const char* const steps[] = {"EVP_DigestInit_ex", "EVP_DigestUpdate", "EVP_DigestUpdate",
                               "EVP_DigestUpdate",  "EVP_DigestUpdate", "EVP_DigestUpdate",
                               "EVP_DigestFinal_ex"};
  std::unique_ptr<ChunkSealer> sealer = make(SnapshotMode::kSessionDigest);
  ASSERT_NE(sealer, nullptr);
  std::vector<uint8_t> sealed(plain_.size());
  Tag tag{};
  SIESTA_ASSERT_OK(sealer->seal(SealDomain::kChunk, 1, aad_, plain_, sealed, tag));
  uint64_t update = 0;
  for (const char* step : steps) {
    const uint64_t nth = std::string(step) == "EVP_DigestUpdate" ? ++update : 1;
    const CallFault fault{.function = step, .nth_call = nth};
    SCOPED_TRACE(fault.describe());
    {
      ScopedCallFault armed(fault);
      std::vector<uint8_t> out(plain_.size());
      Tag sealed_tag{};
      const Status seal = sealer->seal(SealDomain::kChunk, 1, aad_, plain_, out, sealed_tag);
      EXPECT_EQ(seal.code(), StatusCode::kInternal);
      EXPECT_EQ(seal.message(), "SHA-256 digest failed");
      EXPECT_EQ(out, std::vector<uint8_t>(plain_.size(), 0)) << "nothing copied";
    }
    {
      ScopedCallFault armed(fault);
      std::vector<uint8_t> out(plain_.size());
      const Status open = sealer->open(SealDomain::kChunk, 1, aad_, sealed, tag, out);
      EXPECT_EQ(open.code(), StatusCode::kInternal);
      EXPECT_EQ(open.message(), "SHA-256 digest failed");
      EXPECT_EQ(out, std::vector<uint8_t>(plain_.size(), 0)) << "nothing reached the destination";
    }
    expect_round_trip(*sealer);
  }
}

TEST_F(ChunkSealerOpensslFaultTest, ADigestSealerWithoutItsContextIsInternal) {
  const CallFault fault{.function = "EVP_MD_CTX_new"};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Result<std::unique_ptr<ChunkSealer>> sealer = make_digest_sealer();
  EXPECT_EQ(sealer.status().code(), StatusCode::kInternal);
  EXPECT_EQ(sealer.status().message(), "EVP_MD_CTX_new failed");
}

TEST_F(ChunkSealerOpensslFaultTest, ASha256ThatFailsIsInternal) {
  const CallFault fault{.function = "EVP_Digest"};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Result<snapshot::HeaderDigest> digest = sha256(plain_);
  EXPECT_EQ(digest.status().code(), StatusCode::kInternal);
  EXPECT_EQ(digest.status().message(), "SHA-256 failed");
}

// Guards: a key or nonce left as zeros (or whatever the memory held) when the random
// generator fails, and an empty request sent to it at all.
TEST_F(ChunkSealerOpensslFaultTest, RandomBytesThatFailAreInternalAndNoKeyIsMade) {
  for (uint64_t nth : {1u, 2u}) {  // the key's bytes, then the nonce's
    const CallFault fault{.function = "RAND_bytes", .nth_call = nth};
    SCOPED_TRACE(fault.describe());
    ScopedCallFault armed(fault);
    const Result<ProcessKey> key = ProcessKey::generate();
    EXPECT_EQ(key.status().code(), StatusCode::kInternal);
    EXPECT_EQ(key.status().message(), "OpenSSL RAND_bytes failed");
    EXPECT_EQ(armed.fired(), 1u);
  }
  ScopedCallFault armed({.function = "RAND_bytes", .sticky = true});
  SIESTA_EXPECT_OK(random_bytes({}));
  EXPECT_EQ(armed.calls(), 0u) << "nothing asked of the generator for no bytes";
}

}  // namespace
}  // namespace siesta
