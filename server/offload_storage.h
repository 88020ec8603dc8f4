// OffloadStorage: what the server holds for idle offload from start-up on: this process's
// key (only ever in memory) and the snapshot store that owns --cache-disk-dir (owner lock,
// start-up clean-up of dead owners' and expired files, removal of this process's files at
// shutdown). The Offloader writes and reads through these.
//
// Thread rule: built once before serving; disk_bytes() may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_store.h"

namespace siesta::server {

class OffloadStorage {
 public:
  // Makes the process key, then opens the store on `dir` with the key's nonce (the store
  // reads expiries itself). REQUIRES: `dir` passed prepare_cache_dir(); `clock` outlives
  // the result. Failure: the key or the store's error (a held lock, an unlistable directory).
  static Result<std::unique_ptr<OffloadStorage>> open(const std::string& dir, const Clock& clock);

  const ProcessKey& key() const { return key_; }
  SnapshotStore& store() { return *store_; }
  // Bytes of this process's snapshot files; 0 when the directory cannot be listed.
  uint64_t disk_bytes() const { return store_->disk_bytes().value_or(0); }

 private:
  explicit OffloadStorage(ProcessKey key) : key_(std::move(key)) {}

  PosixFileSystem fs_;
  ProcessKey key_;
  std::unique_ptr<SnapshotStore> store_;  // last: closed (own files removed) first
};

}  // namespace siesta::server
