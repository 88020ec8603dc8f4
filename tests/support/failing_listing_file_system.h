// FailingListingFileSystem: forwards everything to the wrapped FileSystem except
// list_directory(), which fails with IoError ("injected ...") on call `nth_call` (counted from
// 1) and every later one. FaultyFileSystem injects nothing into listings (no step of the
// snapshot protocol lists), but the store lists its directory to clean up, remove and count,
// and each of those must survive a listing that fails.
//
// Thread rule: as the wrapped file system's (the count is atomic).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/file_system_wrapper.h"

namespace siesta::test_util {

class FailingListingFileSystem final : public FileSystemWrapper {
 public:
  FailingListingFileSystem(FileSystem& target, uint64_t nth_call)
      : FileSystemWrapper(target), nth_call_(nth_call) {}

  Result<std::vector<std::string>> list_directory(const std::string& path) override {
    const uint64_t call = calls_.fetch_add(1) + 1;
    if (call >= nth_call_) {
      return IoError("injected listing failure on call " + std::to_string(call) + " of " + path);
    }
    return FileSystemWrapper::list_directory(path);
  }
  uint64_t calls() const { return calls_.load(); }

 private:
  const uint64_t nth_call_;
  std::atomic<uint64_t> calls_{0};
};

}  // namespace siesta::test_util
