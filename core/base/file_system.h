// FileSystem: the seam through which snapshots reach storage. The POSIX implementation
// (core/base/posix_file_system.h) is the real one; FaultyFileSystem (tests) injects EIO, ENOSPC,
// short writes, failed syncs and renames, and crashes that drop unsynced data.
//
// Paths are absolute or relative to the process's working directory. Every call reports
// OS failures as named codes (core/base/os_error.h) with the path in the message.
// Thread rule: a FileSystem may be used from any thread; a file handle by one at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace siesta {

// A file being written. Closing without sync() promises nothing about durability.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all of `data` at `offset` (retrying short writes). Failure: IoError / NoSpace;
  // an unspecified prefix may have been written.
  virtual Status write_at(uint64_t offset, std::span<const std::byte> data) = 0;
  // fdatasync: on success every byte written so far survives a crash.
  virtual Status sync() = 0;
  // Hints, promising nothing about durability (only sync() does), whose errors are ignored:
  // start writing [offset, offset+length) back to the disk now, without waiting; and wait
  // until that range's write-back is done. A writer that keeps its dirty bytes to a window
  // this way never stalls long in the kernel's dirty-page throttling, and its final sync()
  // has little left to do (Linux sync_file_range; a no-op where there is none).
  virtual void start_writeback(uint64_t offset, uint64_t length) {
    (void)offset;
    (void)length;
  }
  virtual void wait_writeback(uint64_t offset, uint64_t length) {
    (void)offset;
    (void)length;
  }
  // Closes the descriptor now (also done by the destructor, ignoring errors).
  virtual Status close() = 0;
};

class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  // Reads up to data.size() bytes at `offset`; returns how many were read (fewer only at the
  // end of the file). Failure: IoError. Safe to call from several threads at once (pread):
  // the snapshot reader reads chunk records on its worker threads.
  virtual Result<size_t> read_at(uint64_t offset, std::span<std::byte> data) = 0;
  virtual Result<uint64_t> size() = 0;
  // How many bytes of [offset, offset + length) the page cache holds now (Linux: mincore over a
  // mapping of the range; bytes past the end of the file count as held; since Linux 5.0 a file
  // this user neither owns nor may write reads as all held, which is the safe answer here). A
  // reader that finds a file out of the cache may read it around the cache instead (open_direct).
  // Default: all of them, so a file system that cannot tell, or a wrapper that does not say, is
  // read as every file is. Failure: the OS's error; callers treat it as "held".
  virtual Result<uint64_t> cached_bytes(uint64_t offset, uint64_t length) {
    (void)offset;
    return length;
  }
  // A second handle on the same file that reads around the page cache (O_DIRECT): its read_at
  // takes only offsets, sizes and buffers that are multiples of kDirectReadAlignment, and
  // returns fewer bytes only at the end of the file. Its data is the file's, as a read through
  // this handle would see it. Failure: Unsupported where the file system has no such reads
  // (tmpfs before Linux 6.6) or a wrapper does not pass them on (the default, so that a wrapper
  // that changes reads is never bypassed); IoError.
  virtual Result<std::unique_ptr<ReadableFile>> open_direct() {
    return Unsupported("this file has no reads around the page cache");
  }
};

// What open_direct()'s reads must be aligned to: 4 KiB, a multiple of the logical block size of
// the disks siesta runs on (512 or 4096 bytes).
inline constexpr size_t kDirectReadAlignment = 4096;

// An advisory exclusive lock (flock) held for the life of the object.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

struct PathInfo {
  enum class Type { kRegular, kDirectory, kSymlink, kOther };
  Type type = Type::kOther;
  uint32_t owner_uid = 0;
  uint32_t mode = 0;  // permission bits only (st_mode & 07777)
  uint64_t size = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates a new file with O_CREAT|O_EXCL|O_NOFOLLOW and `mode`.
  // Failure: FailedPrecondition if the path exists (even as a symlink).
  virtual Result<std::unique_ptr<WritableFile>> create_exclusive(const std::string& path,
                                                                 uint32_t mode) = 0;
  // Opens an existing regular file for reading, without ever blocking: O_NOFOLLOW, and
  // O_NONBLOCK until fstat on the opened descriptor has shown a regular file, so a FIFO or a
  // device put under the name is refused at once instead of stalling the caller in open().
  // Failure: NotFound; FailedPrecondition for a symlink or anything but a regular file (a
  // directory, FIFO, socket or device; the message says which); IoError.
  virtual Result<std::unique_ptr<ReadableFile>> open_readable(const std::string& path) = 0;
  // rename(2): atomic replacement within one file system.
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // Removes a file, or an empty directory under the name (as remove(3) does: a directory
  // planted where a file was must not outlive the file's removal). Failure: NotFound if
  // nothing was there; the file system's error for a directory that is not empty.
  virtual Status remove(const std::string& path) = 0;
  // fsync on the directory itself, so that creations, renames and removals in it survive.
  virtual Status sync_directory(const std::string& path) = 0;
  // mkdir(path, mode). Failure: FailedPrecondition if it exists.
  virtual Status make_directory(const std::string& path, uint32_t mode) = 0;
  // Names in a directory, without "." and "..", in no particular order.
  virtual Result<std::vector<std::string>> list_directory(const std::string& path) = 0;
  // lstat: describes the path itself, not what a symlink points to.
  virtual Result<PathInfo> stat_no_follow(const std::string& path) = 0;
  // Opens `path` as a directory (O_DIRECTORY|O_NOFOLLOW) and describes the opened descriptor
  // (fstat), so that what is judged is the directory itself even if the name is swapped for a
  // symlink or another file meanwhile. Failure: FailedPrecondition for a symlink or anything
  // but a directory, NotFound, IoError.
  virtual Result<PathInfo> stat_directory(const std::string& path) = 0;
  // Bytes available to this user on the file system holding `path` (statvfs).
  virtual Result<uint64_t> available_bytes(const std::string& path) = 0;
  // Takes an exclusive flock on `path` (created 0600 if missing), which must be a regular
  // file (opened as open_readable() opens, without blocking; FailedPrecondition otherwise).
  // With wait=false, a lock held by another open file description fails with
  // FailedPrecondition at once.
  virtual Result<std::unique_ptr<FileLock>> lock_file(const std::string& path, bool wait) = 0;
};

}  // namespace siesta
