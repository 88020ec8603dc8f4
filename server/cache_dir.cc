#include "server/cache_dir.h"

#include <optional>

#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_store.h"

namespace siesta::server {

Status prepare_cache_dir(const std::string& path, bool* created) {
  // The rule lives with the store that owns the directory; the server only names the flag.
  PosixFileSystem fs;
  return SnapshotStore::prepare_directory(fs, path, "--cache-disk-dir", std::nullopt, created);
}

}  // namespace siesta::server
