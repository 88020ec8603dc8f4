#include "core/base/posix_file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "core/base/os_error.h"
#include "core/base/unique_fd.h"

namespace siesta {
namespace {

// Retries a system call interrupted by a signal.
template <class Call>
auto retry_on_eintr(Call call) {
  decltype(call()) result;
  do {
    result = call();
  } while (result < 0 && errno == EINTR);
  return result;
}

// What a non-regular file is, for messages.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a regular file";
}

// Opens `path` with `flags` | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK and keeps it only if it is
// a regular file. O_NONBLOCK is what keeps a FIFO (or a device) under the name from blocking
// open() until some writer appears; a regular file ignores it, and it is cleared once the
// file is known to be one.
Result<UniqueFd> open_regular(const std::string& path, int flags, mode_t mode, const char* what) {
  const int fd = retry_on_eintr(
      [&] { return ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode); });
  if (fd < 0) {
    if (errno == ELOOP) {
      return FailedPrecondition(std::string(what) + " " + path + ": a symlink (not followed)");
    }
    return status_from_errno(errno, std::string(what) + " " + path);
  }
  UniqueFd owned(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return status_from_errno(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) {
    return FailedPrecondition(std::string(what) + " " + path + ": " + kind_of(st.st_mode) +
                              ", not a regular file");
  }
  const int status_flags = ::fcntl(fd, F_GETFL);
  if (status_flags < 0 || ::fcntl(fd, F_SETFL, status_flags & ~O_NONBLOCK) != 0) {
    return status_from_errno(errno, "fcntl " + path);
  }
  return owned;
}

PathInfo path_info_of(const struct stat& st) {
  PathInfo info;
  if (S_ISREG(st.st_mode)) {
    info.type = PathInfo::Type::kRegular;
  } else if (S_ISDIR(st.st_mode)) {
    info.type = PathInfo::Type::kDirectory;
  } else if (S_ISLNK(st.st_mode)) {
    info.type = PathInfo::Type::kSymlink;
  }
  info.owner_uid = st.st_uid;
  info.mode = st.st_mode & 07777;
  info.size = static_cast<uint64_t>(st.st_size);
  return info;
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}

  Status write_at(uint64_t offset, std::span<const std::byte> data) override {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = retry_on_eintr([&] {
        return ::pwrite(fd_.get(), data.data() + done, data.size() - done,
                        static_cast<off_t>(offset + done));
      });
      if (n < 0) return status_from_errno(errno, "pwrite " + path_);
      if (n == 0) return IoError("pwrite " + path_ + ": wrote nothing");
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  Status sync() override {
    if (retry_on_eintr([&] { return ::fdatasync(fd_.get()); }) != 0) {
      return status_from_errno(errno, "fdatasync " + path_);
    }
    return Status::Ok();
  }

  Status close() override {
    if (fd_.valid() && fd_.reset() != 0) return status_from_errno(errno, "close " + path_);
    return Status::Ok();
  }

  void start_writeback(uint64_t offset, uint64_t length) override {
    (void)::sync_file_range(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(length),
                            SYNC_FILE_RANGE_WRITE);
  }

  void wait_writeback(uint64_t offset, uint64_t length) override {
    (void)::sync_file_range(
        fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(length),
        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  }

 private:
  UniqueFd fd_;
  std::string path_;
};

class PosixReadableFile final : public ReadableFile {
 public:
  // `direct`: the descriptor reads around the cache (O_DIRECT).
  PosixReadableFile(UniqueFd fd, std::string path, bool direct = false)
      : fd_(std::move(fd)), path_(std::move(path)), direct_(direct) {}

  Result<size_t> read_at(uint64_t offset, std::span<std::byte> data) override {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = retry_on_eintr([&] {
        return ::pread(fd_.get(), data.data() + done, data.size() - done,
                       static_cast<off_t>(offset + done));
      });
      if (n < 0) return status_from_errno(errno, "pread " + path_);
      if (n == 0) break;  // end of file
      done += static_cast<size_t>(n);
      // Around the cache a short read is the end of the file, and a retry would ask at an
      // unaligned offset, which some file systems refuse.
      if (direct_) break;
    }
    return done;
  }

  Result<uint64_t> size() override {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) return status_from_errno(errno, "fstat " + path_);
    return static_cast<uint64_t>(st.st_size);
  }

  Result<uint64_t> cached_bytes(uint64_t offset, uint64_t length) override {
    if (length == 0) return 0;
    SIESTA_ASSIGN_OR_RETURN(const uint64_t file_size, size());
    const uint64_t end = offset + length;
    if (offset >= file_size) return length;
    const uint64_t past_end = end > file_size ? end - file_size : 0;
    const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t first = offset / page * page;
    const uint64_t mapped = std::min(end, file_size) - first;
    void* map =
        ::mmap(nullptr, mapped, PROT_READ, MAP_SHARED, fd_.get(), static_cast<off_t>(first));
    if (map == MAP_FAILED) return status_from_errno(errno, "mmap " + path_);
    std::vector<unsigned char> resident((mapped + page - 1) / page);
    const int rc = ::mincore(map, mapped, resident.data());
    const int mincore_errno = errno;
    ::munmap(map, mapped);
    if (rc != 0) return status_from_errno(mincore_errno, "mincore " + path_);
    uint64_t cached = past_end;
    for (size_t i = 0; i < resident.size(); ++i) {
      if ((resident[i] & 1) == 0) continue;
      const uint64_t lo = std::max(offset, first + i * page);
      const uint64_t hi = std::min({end, file_size, first + (i + 1) * page});
      cached += hi - lo;
    }
    return cached;
  }

  // Opens the same file again through /proc/self/fd, which names this descriptor's file
  // itself, not whatever its path names now.
  Result<std::unique_ptr<ReadableFile>> open_direct() override {
    const std::string self = "/proc/self/fd/" + std::to_string(fd_.get());
    UniqueFd direct(
        retry_on_eintr([&] { return ::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT); }));
    if (!direct.valid()) {
      const int err = errno;
      Status failed = status_from_errno(err, "open O_DIRECT " + path_);
      // EINVAL: the file system has no O_DIRECT (tmpfs before Linux 6.6); ENOENT: no /proc.
      if (err == EINVAL || err == ENOENT) return Unsupported(failed.message());
      return failed;
    }
    struct stat mine {
    }, theirs{};
    if (::fstat(fd_.get(), &mine) != 0 || ::fstat(direct.get(), &theirs) != 0 ||
        mine.st_dev != theirs.st_dev || mine.st_ino != theirs.st_ino) {
      return Unsupported("reads around the page cache (O_DIRECT) of " + path_ +
                         ": /proc/self/fd did not give back the same file");
    }
    return std::unique_ptr<ReadableFile>(
        std::make_unique<PosixReadableFile>(std::move(direct), path_ + " (O_DIRECT)", true));
  }

 private:
  UniqueFd fd_;
  std::string path_;
  bool direct_ = false;
};

class PosixFileLock final : public FileLock {
 public:
  explicit PosixFileLock(UniqueFd fd) : fd_(std::move(fd)) {}
  // Closing the descriptor releases the flock.

 private:
  UniqueFd fd_;
};

}  // namespace

Result<std::unique_ptr<WritableFile>> PosixFileSystem::create_exclusive(const std::string& path,
                                                                        uint32_t mode) {
  int fd = retry_on_eintr([&] {
    return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  });
  if (fd < 0) return status_from_errno(errno, "create " + path);
  UniqueFd owned(fd);
  // The umask may have cleared bits of `mode`; the mode asked for is the mode we promise.
  if (::fchmod(fd, mode) != 0) {
    // A failed creation makes nothing (the caller has nothing to remove): the file goes.
    const Status failed = status_from_errno(errno, "fchmod " + path);
    (void)::unlink(path.c_str());
    return failed;
  }
  return std::unique_ptr<WritableFile>(new PosixWritableFile(std::move(owned), path));
}

Result<std::unique_ptr<ReadableFile>> PosixFileSystem::open_readable(const std::string& path) {
  SIESTA_ASSIGN_OR_RETURN(UniqueFd fd, open_regular(path, O_RDONLY, 0, "open"));
  return std::unique_ptr<ReadableFile>(new PosixReadableFile(std::move(fd), path));
}

Status PosixFileSystem::rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return status_from_errno(errno, "rename " + from + " -> " + to);
  }
  return Status::Ok();
}

Status PosixFileSystem::remove(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return Status::Ok();
  // A directory under a file's name (planted, or swapped in): removed when empty, as
  // remove(3) does, so that it does not outlive the removal of the name.
  if (errno == EISDIR && ::rmdir(path.c_str()) == 0) return Status::Ok();
  return status_from_errno(errno, "remove " + path);
}

Status PosixFileSystem::sync_directory(const std::string& path) {
  int fd = retry_on_eintr([&] {
    return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  });
  if (fd < 0) return status_from_errno(errno, "open directory " + path);
  UniqueFd owned(fd);
  if (retry_on_eintr([&] { return ::fsync(fd); }) != 0) {
    return status_from_errno(errno, "fsync directory " + path);
  }
  return Status::Ok();
}

Status PosixFileSystem::make_directory(const std::string& path, uint32_t mode) {
  if (::mkdir(path.c_str(), mode) != 0) return status_from_errno(errno, "mkdir " + path);
  // As with files: the umask must not weaken or change the mode asked for.
  if (::chmod(path.c_str(), mode) != 0) {
    Status failed = status_from_errno(errno, "chmod " + path);
    (void)::rmdir(path.c_str());  // as with files: a failed creation makes nothing
    return failed;
  }
  return Status::Ok();
}

Result<std::vector<std::string>> PosixFileSystem::list_directory(const std::string& path) {
  int fd = retry_on_eintr([&] {
    return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  });
  if (fd < 0) return status_from_errno(errno, "open directory " + path);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    int err = errno;
    ::close(fd);
    return status_from_errno(err, "fdopendir " + path);
  }
  std::vector<std::string> names;
  errno = 0;
  // readdir is safe on a stream no other thread uses (glibc), as this one, made here.
  while (struct dirent* entry = ::readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
    errno = 0;
  }
  int err = errno;
  ::closedir(dir);  // also closes fd
  if (err != 0) return status_from_errno(err, "readdir " + path);
  return names;
}

Result<PathInfo> PosixFileSystem::stat_no_follow(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return status_from_errno(errno, "lstat " + path);
  return path_info_of(st);
}

Result<PathInfo> PosixFileSystem::stat_directory(const std::string& path) {
  int fd = retry_on_eintr([&] {
    return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  });
  if (fd < 0) {
    if (errno == ELOOP) return FailedPrecondition("open directory " + path + ": a symlink");
    if (errno == ENOTDIR) return FailedPrecondition("open directory " + path + ": not a directory");
    return status_from_errno(errno, "open directory " + path);
  }
  UniqueFd owned(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return status_from_errno(errno, "fstat " + path);
  return path_info_of(st);
}

Result<uint64_t> PosixFileSystem::available_bytes(const std::string& path) {
  struct statvfs vfs {};
  if (::statvfs(path.c_str(), &vfs) != 0) return status_from_errno(errno, "statvfs " + path);
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

Result<std::unique_ptr<FileLock>> PosixFileSystem::lock_file(const std::string& path, bool wait) {
  SIESTA_ASSIGN_OR_RETURN(UniqueFd owned,
                          open_regular(path, O_RDWR | O_CREAT, 0600, "open lock file"));
  const int fd = owned.get();
  int operation = LOCK_EX | (wait ? 0 : LOCK_NB);
  if (retry_on_eintr([&] { return ::flock(fd, operation); }) != 0) {
    if (errno == EWOULDBLOCK) return FailedPrecondition("lock " + path + ": held by another owner");
    return status_from_errno(errno, "flock " + path);
  }
  return std::unique_ptr<FileLock>(new PosixFileLock(std::move(owned)));
}

}  // namespace siesta
