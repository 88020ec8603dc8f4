#include "server/offload_storage.h"

#include "core/snapshot/snapshot_reader.h"

namespace siesta::server {

Result<std::unique_ptr<OffloadStorage>> OffloadStorage::open(const std::string& dir,
                                                             const Clock& clock) {
  SIESTA_ASSIGN_OR_RETURN(ProcessKey key, ProcessKey::generate());
  std::unique_ptr<OffloadStorage> storage(new OffloadStorage(std::move(key)));
  SnapshotStore::Options options;
  options.label = "--cache-disk-dir";
  options.nonce = SnapshotStore::nonce_hex(storage->key_.nonce());
  FileSystem& fs = storage->fs_;
  options.read_expiry = [&fs](const std::string& path) { return read_snapshot_expiry(fs, path); };
  SIESTA_ASSIGN_OR_RETURN(storage->store_,
                          SnapshotStore::open(storage->fs_, clock, dir, std::move(options)));
  return storage;
}

}  // namespace siesta::server
