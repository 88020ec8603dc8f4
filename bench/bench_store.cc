#include "bench/bench_store.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace siesta::bench {

std::string bench_base_dir() {
  const char* env_dir = std::getenv("SIESTA_BENCH_DIR");
  return env_dir != nullptr && *env_dir != '\0' ? env_dir : "/tmp";
}

std::string bench_store_dir(const std::string& base, const std::string& leaf) {
  std::string dir = base + "/" + leaf;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, error);
  return dir;
}

}  // namespace siesta::bench
