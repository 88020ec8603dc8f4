#include "server/offload_storage.h"

namespace siesta::server {

Result<std::unique_ptr<OffloadStorage>> OffloadStorage::open(const std::string& dir,
                                                             const Clock& clock) {
  SIESTA_ASSIGN_OR_RETURN(ProcessKey key, ProcessKey::generate());
  std::unique_ptr<OffloadStorage> storage(new OffloadStorage(std::move(key)));
  SnapshotStore::Options options;
  options.nonce = SnapshotStore::nonce_hex(storage->key_.nonce());
  SIESTA_ASSIGN_OR_RETURN(storage->store_,
                          SnapshotStore::open(storage->fs_, clock, dir, std::move(options)));
  return storage;
}

}  // namespace siesta::server
