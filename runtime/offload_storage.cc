#include "runtime/offload_storage.h"

#include <utility>

#include "core/snapshot/key_file.h"

namespace siesta::runtime {

Result<std::unique_ptr<OffloadStorage>> OffloadStorage::open(FileSystem& fs, const Clock& clock,
                                                             const std::string& dir,
                                                             const Persistence& persistence) {
  const bool persist = !persistence.key_file.empty();
  std::unique_ptr<OffloadStorage> storage;
  if (persist) {
    SIESTA_ASSIGN_OR_RETURN(LoadedKey loaded, load_or_create_key_file(persistence.key_file));
    storage.reset(new OffloadStorage(std::move(loaded.key)));
    storage->created_key_file_ = loaded.created;
  } else {
    SIESTA_ASSIGN_OR_RETURN(ProcessKey key, ProcessKey::generate());
    storage.reset(new OffloadStorage(std::move(key)));
  }
  SnapshotStore::Options options;
  options.nonce = SnapshotStore::nonce_hex(storage->key_.nonce());
  options.keep_dead_owners_snapshots = persist;
  options.keep_files_on_close = persist;
  SIESTA_ASSIGN_OR_RETURN(storage->store_, SnapshotStore::open(fs, clock, dir, std::move(options)));
  return storage;
}

}  // namespace siesta::runtime
