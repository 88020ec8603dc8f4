#include "bench/bench_store.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/base/clock.h"

namespace siesta::bench {

std::string bench_base_dir() {
  const char* env_dir = std::getenv("SIESTA_BENCH_DIR");
  return env_dir != nullptr && *env_dir != '\0' ? env_dir : "/tmp";
}

std::string bench_store_dir(const std::string& base, const std::string& leaf) {
  const std::string dir = base + "/" + leaf;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, error);
  return dir;
}

Status open_bench_store(FileSystem& fs, const std::string& dir, std::optional<ProcessKey>& key,
                        std::unique_ptr<SnapshotStore>& store) {
  SIESTA_ASSIGN_OR_RETURN(ProcessKey generated, ProcessKey::generate());
  key.emplace(std::move(generated));
  SnapshotStore::Options options;
  options.nonce = SnapshotStore::nonce_hex(key->nonce());
  SIESTA_ASSIGN_OR_RETURN(
      store, SnapshotStore::open(fs, SystemClock::instance(), dir, std::move(options)));
  return Status::Ok();
}

}  // namespace siesta::bench
