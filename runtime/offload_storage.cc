#include "runtime/offload_storage.h"

#include <utility>

namespace siesta::runtime {

Result<std::unique_ptr<OffloadStorage>> OffloadStorage::open(FileSystem& fs, const Clock& clock,
                                                             const std::string& dir) {
  SIESTA_ASSIGN_OR_RETURN(ProcessKey key, ProcessKey::generate());
  std::unique_ptr<OffloadStorage> storage(new OffloadStorage(std::move(key)));
  SnapshotStore::Options options;
  options.nonce = SnapshotStore::nonce_hex(storage->key_.nonce());
  SIESTA_ASSIGN_OR_RETURN(storage->store_, SnapshotStore::open(fs, clock, dir, std::move(options)));
  return storage;
}

}  // namespace siesta::runtime
