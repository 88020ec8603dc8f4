// PosixFileSystem: the FileSystem seam on POSIX calls (open with O_EXCL|O_NOFOLLOW|O_CLOEXEC,
// existing files and directories also O_NONBLOCK and checked with fstat after the open,
// pwrite/pread retried on EINTR and short transfers, fdatasync, rename, fsync of directories,
// flock, statvfs). Errors are mapped once, here, by status_from_errno.
// Thread rule: the file system object is stateless and may be shared by all threads.
#pragma once

#include "core/base/file_system.h"

namespace siesta {

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<WritableFile>> create_exclusive(const std::string& path,
                                                         uint32_t mode) override;
  Result<std::unique_ptr<ReadableFile>> open_readable(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status remove(const std::string& path) override;
  Status sync_directory(const std::string& path) override;
  Status make_directory(const std::string& path, uint32_t mode) override;
  Result<std::vector<std::string>> list_directory(const std::string& path) override;
  Result<PathInfo> stat_no_follow(const std::string& path) override;
  Result<PathInfo> stat_directory(const std::string& path) override;
  Result<uint64_t> available_bytes(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> lock_file(const std::string& path, bool wait) override;
};

}  // namespace siesta
