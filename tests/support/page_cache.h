// What the page cache holds of a file, asked of the kernel directly (mmap + mincore), so that
// tests can tell what a file system did with their hints (posix_fadvise DONTNEED drops pages
// on a disk's file systems, not on tmpfs, NFS or FUSE) without going through the code they
// test.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace siesta::testing {

// The fraction of the pages of [offset, offset + length) of `path` that are cached (offset a
// multiple of the page size); -1 when the file cannot be opened or mapped.
inline double cached_fraction(const std::string& path, size_t offset, size_t length) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset));
  ::close(fd);
  if (map == MAP_FAILED) return -1;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((length + page - 1) / page);
  const int rc = ::mincore(map, length, resident.data());
  ::munmap(map, length);
  if (rc != 0 || resident.empty()) return -1;
  size_t cached = 0;
  for (unsigned char r : resident) cached += r & 1;
  return static_cast<double>(cached) / static_cast<double>(resident.size());
}

// Drops `path`'s pages from the page cache as far as its file system does (the file must be
// synced); returns the fraction still cached.
inline double drop_cached_pages(const std::string& path, size_t length) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return cached_fraction(path, 0, length);
}

}  // namespace siesta::testing
