// AES-256-GCM sealing and the process key (see chunk_sealer.h for the scheme).
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "core/snapshot/chunk_sealer.h"

namespace siesta {
namespace {

struct CipherCtxDeleter {
  void operator()(EVP_CIPHER_CTX* ctx) const { EVP_CIPHER_CTX_free(ctx); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxDeleter>;

constexpr std::string_view kFileKeyLabel = "siesta-snapshot-file-key-v1";

// EVP takes int lengths; chunks are bounded by kMaxChunkBytes and headers by kMaxHeaderBytes,
// so a longer span is a caller bug, reported rather than truncated.
bool fits_int(size_t n) { return n <= static_cast<size_t>(std::numeric_limits<int>::max()); }

class AesGcmSealer final : public ChunkSealer {
 public:
  AesGcmSealer(CipherCtx ctx, const ProcessKey::KeyBytes& file_key)
      : ctx_(std::move(ctx)), file_key_(file_key) {}
  ~AesGcmSealer() override { OPENSSL_cleanse(file_key_.data(), file_key_.size()); }

  bool encrypts() const override { return true; }

  Status seal(SealDomain domain, uint64_t index, std::span<const uint8_t> aad,
              std::span<const uint8_t> plaintext, std::span<uint8_t> ciphertext,
              snapshot::Tag& tag) override {
    if (ciphertext.size() != plaintext.size() || !fits_int(plaintext.size()) ||
        !fits_int(aad.size())) {
      return Internal("AES-GCM seal: bad buffer sizes");
    }
    SIESTA_RETURN_IF_ERROR(start(domain, index, /*encrypt=*/true, aad));
    int n = 0;
    if (!plaintext.empty() && EVP_EncryptUpdate(ctx_.get(), ciphertext.data(), &n, plaintext.data(),
                                                static_cast<int>(plaintext.size())) != 1) {
      return Internal("AES-GCM encrypt failed");
    }
    uint8_t unused[16];
    if (EVP_EncryptFinal_ex(ctx_.get(), unused, &n) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_GET_TAG, static_cast<int>(tag.size()),
                            tag.data()) != 1) {
      return Internal("AES-GCM tag failed");
    }
    return Status::Ok();
  }

  Status open(SealDomain domain, uint64_t index, std::span<const uint8_t> aad,
              std::span<const uint8_t> ciphertext, const snapshot::Tag& tag,
              std::span<uint8_t> plaintext) override {
    if (ciphertext.size() != plaintext.size() || !fits_int(ciphertext.size()) ||
        !fits_int(aad.size())) {
      return Internal("AES-GCM open: bad buffer sizes");
    }
    SIESTA_RETURN_IF_ERROR(start(domain, index, /*encrypt=*/false, aad));
    int n = 0;
    if (!ciphertext.empty() &&
        EVP_DecryptUpdate(ctx_.get(), plaintext.data(), &n, ciphertext.data(),
                          static_cast<int>(ciphertext.size())) != 1) {
      return Internal("AES-GCM decrypt failed");
    }
    snapshot::Tag expected = tag;  // the ctrl takes a non-const pointer
    if (EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_SET_TAG, static_cast<int>(expected.size()),
                            expected.data()) != 1) {
      return Internal("AES-GCM set tag failed");
    }
    uint8_t unused[16];
    if (EVP_DecryptFinal_ex(ctx_.get(), unused, &n) != 1) {
      return Corrupt("seal check failed (changed bytes, another key, or a misplaced chunk)");
    }
    return Status::Ok();
  }

 private:
  Status start(SealDomain domain, uint64_t index, bool encrypt, std::span<const uint8_t> aad) {
    const auto iv = snapshot::encode_seal_position(static_cast<uint32_t>(domain), index);
    static_assert(snapshot::kSealPositionBytes == 12, "AES-GCM's standard nonce length");
    const int ok = encrypt ? EVP_EncryptInit_ex(ctx_.get(), EVP_aes_256_gcm(), nullptr,
                                                file_key_.data(), iv.data())
                           : EVP_DecryptInit_ex(ctx_.get(), EVP_aes_256_gcm(), nullptr,
                                                file_key_.data(), iv.data());
    if (ok != 1) return Internal("AES-GCM init failed");
    int n = 0;
    if (!aad.empty()) {
      const int added = encrypt ? EVP_EncryptUpdate(ctx_.get(), nullptr, &n, aad.data(),
                                                    static_cast<int>(aad.size()))
                                : EVP_DecryptUpdate(ctx_.get(), nullptr, &n, aad.data(),
                                                    static_cast<int>(aad.size()));
      if (added != 1) return Internal("AES-GCM aad failed");
    }
    return Status::Ok();
  }

  CipherCtx ctx_;
  ProcessKey::KeyBytes file_key_;
};

}  // namespace

Status random_bytes(std::span<uint8_t> out) {
  if (out.empty()) return Status::Ok();
  if (!fits_int(out.size()) || RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    return Internal("OpenSSL RAND_bytes failed");
  }
  return Status::Ok();
}

Result<ProcessKey> ProcessKey::generate() {
  ProcessKey key;
  SIESTA_RETURN_IF_ERROR(random_bytes(key.key_));
  SIESTA_RETURN_IF_ERROR(random_bytes(key.nonce_));
  return key;
}

Result<ProcessKey> ProcessKey::with_key(const KeyBytes& key_bytes) {
  ProcessKey key;
  SIESTA_RETURN_IF_ERROR(random_bytes(key.nonce_));
  key.key_ = key_bytes;
  return key;
}

ProcessKey ProcessKey::from_bytes(const KeyBytes& key_bytes, const snapshot::ProcessNonce& nonce) {
  ProcessKey key;
  key.key_ = key_bytes;
  key.nonce_ = nonce;
  return key;
}

ProcessKey::ProcessKey(ProcessKey&& other) noexcept { *this = std::move(other); }

ProcessKey& ProcessKey::operator=(ProcessKey&& other) noexcept {
  if (this != &other) {
    key_ = other.key_;
    nonce_ = other.nonce_;
    generations_.store(other.generations_.load());
    other.wipe();
  }
  return *this;
}

ProcessKey::~ProcessKey() { wipe(); }

void ProcessKey::wipe() { OPENSSL_cleanse(key_.data(), key_.size()); }

Result<snapshot::HeaderDigest> keyed_digest(const ProcessKey& key, std::string_view label,
                                            std::span<const uint8_t> bytes) {
  std::vector<uint8_t> input(label.begin(), label.end());
  input.insert(input.end(), bytes.begin(), bytes.end());
  snapshot::HeaderDigest out{};
  unsigned int length = 0;
  const bool made =
      HMAC(EVP_sha256(), key.key_bytes().data(), static_cast<int>(key.key_bytes().size()),
           input.data(), input.size(), out.data(), &length) != nullptr &&
      length == out.size();
  OPENSSL_cleanse(input.data(), input.size());
  if (!made) return Internal("HMAC-SHA256 under the process key failed");
  return out;
}

Result<std::unique_ptr<ChunkSealer>> make_aes_gcm_sealer(const ProcessKey& key,
                                                         const snapshot::FileId& file_id) {
  Result<snapshot::HeaderDigest> derived = keyed_digest(key, kFileKeyLabel, file_id);
  if (!derived.ok()) return Internal("HMAC-SHA256 file key derivation failed");
  ProcessKey::KeyBytes file_key{};
  static_assert(sizeof(file_key) == sizeof(snapshot::HeaderDigest));
  std::memcpy(file_key.data(), derived->data(), file_key.size());
  OPENSSL_cleanse(derived->data(), derived->size());
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  if (ctx == nullptr) return Internal("EVP_CIPHER_CTX_new failed");
  auto sealer = std::make_unique<AesGcmSealer>(std::move(ctx), file_key);
  OPENSSL_cleanse(file_key.data(), file_key.size());
  return std::unique_ptr<ChunkSealer>(std::move(sealer));
}

Result<std::unique_ptr<ChunkSealer>> make_sealer(snapshot::SnapshotMode mode, const ProcessKey& key,
                                                 const snapshot::FileId& file_id) {
  if (mode == snapshot::SnapshotMode::kSessionEncrypted) return make_aes_gcm_sealer(key, file_id);
  return make_digest_sealer();
}

}  // namespace siesta
