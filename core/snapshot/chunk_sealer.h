// Sealing: how a snapshot's header, chunks and trailer are made tamper-evident.
//
// Two sealers share one interface:
//   AES-256-GCM (aes_gcm_sealer.cc): the default. Each file gets its own key, derived as
//     HMAC-SHA256(process key, "siesta-snapshot-file-key-v1" || file id), and each seal a
//     12-byte nonce (domain u32 || index u64, little-endian). Nonces are unique within a file
//     by construction, and file keys differ because file ids are 16 random bytes, so no
//     (key, nonce) pair ever repeats. Confidential and authenticated: nobody without this
//     process's key can read a chunk or make one this process accepts.
//   Digest (digest_sealer.cc): --cache-encrypt=off and durable exports. The tag is the first
//     16 bytes of SHA-256(label || domain || index || aad length || aad || plaintext). It
//     detects every accidental change (2^-128 chance of a miss) but not forgery: anyone who
//     can write the file can compute a matching digest. An export cannot be keyed because no
//     key outlives the process.
//
// What a seal binds is the caller's aad plus (domain, index); the snapshot writer and reader
// put the file id, the header digest and the chunk header in the aad (SNAPSHOT_FORMAT.md).
//
// Thread rule: a ChunkSealer is used by one thread at a time. A ProcessKey's key and nonce are
// immutable after creation; it may be shared (its generation count is atomic).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "core/base/status.h"
#include "core/snapshot/snapshot_format.h"

namespace siesta {

// This process's secret: a 32-byte AES key and the 16-byte nonce that names the process in
// file headers and file names. Made once per process from RAND_bytes (or, with_key, its key
// read from a key file and its nonce from RAND_bytes), held in memory, wiped
// (OPENSSL_cleanse) when destroyed. Move-only.
class ProcessKey {
 public:
  using KeyBytes = std::array<uint8_t, 32>;

  // Failure: Internal when the OpenSSL random generator fails.
  static Result<ProcessKey> generate();
  // `key` (a key file's, kept across restarts: key_file.h) with a fresh random nonce: the
  // nonce names this process in file names and headers, so it must differ per process even
  // when the key is shared. Failure: Internal when the OpenSSL random generator fails.
  static Result<ProcessKey> with_key(const KeyBytes& key);
  // A fixed key, for tests and committed fuzz corpora only.
  static ProcessKey from_bytes(const KeyBytes& key, const snapshot::ProcessNonce& nonce);

  ProcessKey(ProcessKey&& other) noexcept;
  ProcessKey& operator=(ProcessKey&& other) noexcept;
  ProcessKey(const ProcessKey&) = delete;
  ProcessKey& operator=(const ProcessKey&) = delete;
  ~ProcessKey();

  const snapshot::ProcessNonce& nonce() const { return nonce_; }
  // The raw key, for the sealer only.
  const KeyBytes& key_bytes() const { return key_; }

  // A generation no file sealed under this key had before (1, 2, 3, ...: every session's saves
  // draw from this one count), so that a reader expecting the generation its save wrote
  // refuses every other file this process wrote, whichever session it came from
  // (SnapshotHeader::generation). Thread rule: any thread.
  uint64_t next_generation() const {
    return generations_.fetch_add(1, std::memory_order_relaxed) + 1;
  }

 private:
  ProcessKey() = default;
  void wipe();
  KeyBytes key_{};
  snapshot::ProcessNonce nonce_{};
  // The last generation handed out. Mutable: numbering files does not change the key.
  mutable std::atomic<uint64_t> generations_{0};
};

// Fills `out` with cryptographically random bytes. Failure: Internal.
Status random_bytes(std::span<uint8_t> out);

// Keeps the nonce spaces of header, chunks, trailer and the header's route apart.
enum class SealDomain : uint32_t { kHeader = 1, kChunk = 2, kTrailer = 3, kRoute = 4 };

class ChunkSealer {
 public:
  virtual ~ChunkSealer() = default;

  // True when ciphertext differs from plaintext (AES-GCM); false for the digest sealer, whose
  // "ciphertext" is the plaintext itself, so a writer may write the plaintext as it is.
  virtual bool encrypts() const = 0;

  // Seals `plaintext` into `ciphertext` and `tag`, binding `aad` and (domain, index).
  // REQUIRES: ciphertext.size() == plaintext.size(); the two may be the same memory (in place)
  // but must not otherwise overlap; (domain, index) is used once per file (else the AES-GCM
  // nonce repeats). Failure: Internal when OpenSSL fails.
  virtual Status seal(SealDomain domain, uint64_t index, std::span<const uint8_t> aad,
                      std::span<const uint8_t> plaintext, std::span<uint8_t> ciphertext,
                      snapshot::Tag& tag) = 0;

  // Checks `tag` and recovers the plaintext into `plaintext` (may be `ciphertext` itself).
  // REQUIRES: sizes equal, as for seal.
  // Success: `plaintext` holds exactly what was sealed with this aad, domain and index.
  // Failure: Corrupt when the tag does not match (a changed byte, another key, another
  // position); `plaintext` then holds unspecified bytes and must not be used.
  virtual Status open(SealDomain domain, uint64_t index, std::span<const uint8_t> aad,
                      std::span<const uint8_t> ciphertext, const snapshot::Tag& tag,
                      std::span<uint8_t> plaintext) = 0;
};

// The AES-256-GCM sealer of one file: the file key is derived from `key` and `file_id`.
// Failure: Internal when OpenSSL fails.
Result<std::unique_ptr<ChunkSealer>> make_aes_gcm_sealer(const ProcessKey& key,
                                                         const snapshot::FileId& file_id);

// The digest sealer (stateless apart from its hash context).
Result<std::unique_ptr<ChunkSealer>> make_digest_sealer();

// The sealer a file of `mode` uses.
Result<std::unique_ptr<ChunkSealer>> make_sealer(snapshot::SnapshotMode mode, const ProcessKey& key,
                                                 const snapshot::FileId& file_id);

// HMAC-SHA256 under `key` of `label` followed by `bytes`: a value only the key's holder can
// make or check (the file keys, a conversation key's stand-in on disk). Distinct labels keep
// the uses apart. Failure: Internal when OpenSSL fails.
Result<snapshot::HeaderDigest> keyed_digest(const ProcessKey& key, std::string_view label,
                                            std::span<const uint8_t> bytes);

// SHA-256 of `bytes`. Failure: Internal.
Result<snapshot::HeaderDigest> sha256(std::span<const uint8_t> bytes);

}  // namespace siesta
