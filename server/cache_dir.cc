#include "server/cache_dir.h"

#include <optional>

#include "core/base/posix_file_system.h"
#include "core/base/private_directory.h"
#include "core/offload/disk_budget.h"

namespace siesta::server {

Status prepare_cache_dir(const std::string& path, bool* created) {
  if (created != nullptr) *created = false;
  // The rule is core's (PrivateDirectory, the store's and the exporter's too); the server
  // only says which flag the path came from.
  PosixFileSystem fs;
  Result<PrivateDirectory> dir =
      PrivateDirectory::open(fs, path, {std::nullopt, "snapshot directory"});
  if (!dir.ok()) return dir.status().with_context("--cache-disk-dir");
  if (created != nullptr) *created = dir->created();
  return Status::Ok();
}

Result<uint64_t> default_cache_dir_budget(const std::string& path) {
  PosixFileSystem fs;
  SIESTA_ASSIGN_OR_RETURN(const uint64_t free_bytes, fs.available_bytes(path));
  return default_disk_budget_bytes(free_bytes);
}

}  // namespace siesta::server
