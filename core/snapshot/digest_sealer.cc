// The digest sealer: truncated SHA-256 over (label, domain, index, aad, plaintext). Detects
// damage, not forgery (chunk_sealer.h says why exports cannot be keyed).
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstring>
#include <string_view>

#include "core/snapshot/chunk_sealer.h"

namespace siesta {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

constexpr std::string_view kDigestLabel = "siesta-snapshot-digest-v1";

class DigestSealer final : public ChunkSealer {
 public:
  explicit DigestSealer(MdCtx ctx) : ctx_(std::move(ctx)) {}

  bool encrypts() const override { return false; }

  Status seal(SealDomain domain, uint64_t index, std::span<const uint8_t> aad,
              std::span<const uint8_t> plaintext, std::span<uint8_t> ciphertext,
              snapshot::Tag& tag) override {
    if (ciphertext.size() != plaintext.size()) return Internal("digest seal: bad buffer sizes");
    SIESTA_RETURN_IF_ERROR(digest(domain, index, aad, plaintext, tag));
    if (ciphertext.data() != plaintext.data() && !plaintext.empty()) {
      std::memcpy(ciphertext.data(), plaintext.data(), plaintext.size());
    }
    return Status::Ok();
  }

  Status open(SealDomain domain, uint64_t index, std::span<const uint8_t> aad,
              std::span<const uint8_t> ciphertext, const snapshot::Tag& tag,
              std::span<uint8_t> plaintext) override {
    if (ciphertext.size() != plaintext.size()) return Internal("digest open: bad buffer sizes");
    snapshot::Tag actual{};
    SIESTA_RETURN_IF_ERROR(digest(domain, index, aad, ciphertext, actual));
    // Checked before the copy, so a damaged chunk never reaches the destination.
    if (CRYPTO_memcmp(actual.data(), tag.data(), tag.size()) != 0) {
      return Corrupt("digest check failed (changed bytes or a misplaced chunk)");
    }
    if (ciphertext.data() != plaintext.data() && !ciphertext.empty()) {
      std::memcpy(plaintext.data(), ciphertext.data(), ciphertext.size());
    }
    return Status::Ok();
  }

 private:
  Status digest(SealDomain domain, uint64_t index, std::span<const uint8_t> aad,
                std::span<const uint8_t> data, snapshot::Tag& tag) {
    // Fixed-width position and aad length: no two (aad, data) splits hash the same input.
    const auto position = snapshot::encode_seal_position(static_cast<uint32_t>(domain), index);
    const auto aad_length = snapshot::encode_u64(aad.size());
    uint8_t full[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1 ||
        EVP_DigestUpdate(ctx_.get(), kDigestLabel.data(), kDigestLabel.size()) != 1 ||
        EVP_DigestUpdate(ctx_.get(), position.data(), position.size()) != 1 ||
        EVP_DigestUpdate(ctx_.get(), aad_length.data(), aad_length.size()) != 1 ||
        EVP_DigestUpdate(ctx_.get(), aad.data(), aad.size()) != 1 ||
        EVP_DigestUpdate(ctx_.get(), data.data(), data.size()) != 1 ||
        EVP_DigestFinal_ex(ctx_.get(), full, &length) != 1 || length < tag.size()) {
      return Internal("SHA-256 digest failed");
    }
    std::memcpy(tag.data(), full, tag.size());
    return Status::Ok();
  }

  MdCtx ctx_;
};

}  // namespace

Result<std::unique_ptr<ChunkSealer>> make_digest_sealer() {
  MdCtx ctx(EVP_MD_CTX_new());
  if (ctx == nullptr) return Internal("EVP_MD_CTX_new failed");
  return std::unique_ptr<ChunkSealer>(std::make_unique<DigestSealer>(std::move(ctx)));
}

Result<snapshot::HeaderDigest> sha256(std::span<const uint8_t> bytes) {
  snapshot::HeaderDigest out{};
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), out.data(), &length, EVP_sha256(), nullptr) != 1 ||
      length != out.size()) {
    return Internal("SHA-256 failed");
  }
  return out;
}

}  // namespace siesta
