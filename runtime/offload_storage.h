// OffloadStorage: what idle offload writes through, for as long as a stack serves: this
// process's key (only ever in memory) and the snapshot store that owns the snapshot directory
// (owner lock, start-up clean-up of dead owners' and expired files, removal of this process's
// files when it closes). The store is named with the key's nonce, so that file names and file
// headers name the same process.
//
// Thread rule: open() and the destructor on one thread; key() and store() from any thread (the
// store's own rule then applies).
#pragma once

#include <memory>
#include <string>

#include "core/base/clock.h"
#include "core/base/file_system.h"
#include "core/base/status.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_store.h"

namespace siesta::runtime {

class OffloadStorage {
 public:
  // Where the key comes from, and what the store does with stopped servers' files.
  struct Persistence {
    // Empty: a fresh process key, only ever in memory, and stopped servers' files are removed
    // at start. Set: the key file's key (load_or_create_key_file), stopped servers' snapshots
    // are offered for adoption, and this process's files stay when it closes.
    std::string key_file;
  };

  // Makes the process key (above), then opens the store on `dir` with the key's nonce (the
  // store reads expiries itself; SnapshotStore::open makes `dir` private, creating it when
  // missing). `fs` and `clock` must outlive the result.
  // Failure: the key's error (the key file's one-line refusals), or the store's (a held lock,
  // an unsafe or unlistable directory); nothing stays open.
  static Result<std::unique_ptr<OffloadStorage>> open(FileSystem& fs, const Clock& clock,
                                                      const std::string& dir,
                                                      const Persistence& persistence = {});

  // Closes the store first: this process's snapshot files and its lock are removed (kept with
  // a key file: they are what a restart adopts).
  ~OffloadStorage() = default;
  OffloadStorage(const OffloadStorage&) = delete;
  OffloadStorage& operator=(const OffloadStorage&) = delete;

  const ProcessKey& key() const { return key_; }
  // The key file was made by this open (the start-up log says so).
  bool created_key_file() const { return created_key_file_; }
  SnapshotStore& store() const { return *store_; }

 private:
  explicit OffloadStorage(ProcessKey key) : key_(std::move(key)) {}

  ProcessKey key_;
  bool created_key_file_ = false;
  std::unique_ptr<SnapshotStore> store_;  // last: closed first
};

}  // namespace siesta::runtime
