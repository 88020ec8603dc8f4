#include "core/memory/host_address_space.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/base/os_error.h"

namespace siesta::host_address_space {
namespace {

// MAP_NORESERVE: a reservation is address space only; it must not count against the
// kernel's overcommit limit (a 100 GiB reservation of a mostly sleeping session is normal).
constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

bool is_power_of_two(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

std::string hex(const void* p) {
  char text[32];
  (void)std::snprintf(text, sizeof text, "%p", p);
  return text;
}

}  // namespace

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

Result<std::byte*> reserve(size_t bytes, size_t alignment) {
  if (bytes == 0) return InvalidArgument("reserve of 0 bytes");
  if (!is_power_of_two(alignment) || alignment % page_size() != 0) {
    return InvalidArgument("reserve alignment " + std::to_string(alignment) +
                           " is not a power-of-two multiple of the page size");
  }
  if (bytes % page_size() != 0) {
    return InvalidArgument("reserve of " + std::to_string(bytes) +
                           " bytes is not a multiple of the page size");
  }
  // mmap only promises page alignment, so ask for `alignment - page` bytes more than needed
  // and give back the unaligned head and the tail.
  const size_t slack = alignment - page_size();
  if (bytes > SIZE_MAX - slack) {
    return OutOfMemory("reserve of " + std::to_string(bytes) + " bytes");
  }
  const size_t span = bytes + slack;
  void* raw = mmap(nullptr, span, PROT_NONE, kReserveFlags, -1, 0);
  if (raw == MAP_FAILED) {
    const int err = errno;
    return OutOfMemory("reserve of " + std::to_string(bytes) +
                       " bytes of address space: " + status_from_errno(err, "mmap").message());
  }
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t{alignment} - 1);
  const size_t head = aligned - start;
  const size_t tail = span - head - bytes;
  // munmap of part of a mapping we own cannot fail for a page-aligned range; if it did, the
  // only cost would be unused PROT_NONE address space, so the result is not checked.
  std::byte* const base = static_cast<std::byte*>(raw) + head;
  if (head != 0) munmap(raw, head);
  if (tail != 0) munmap(base + bytes, tail);
  return base;
}

Status drop(std::byte* base, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (reinterpret_cast<uintptr_t>(base) % page_size() != 0 || bytes % page_size() != 0) {
    return InvalidArgument("drop of " + std::to_string(bytes) + " bytes at " + hex(base) +
                           " is not page-aligned");
  }
  // A new PROT_NONE anonymous mapping replaces whatever was there in one step: the old
  // pages lose their last mapping (and, for a memfd, their last reference once the fd is
  // closed), and the addresses stay ours, so no other mmap can take them.
  void* got = mmap(base, bytes, PROT_NONE, MAP_FIXED | kReserveFlags, -1, 0);
  if (got == MAP_FAILED) {
    const int err = errno;
    return status_from_errno(err, "drop of " + std::to_string(bytes) + " bytes at " + hex(base) +
                                      " (mmap PROT_NONE MAP_FIXED)");
  }
  return Status::Ok();
}

void unreserve(std::byte* base, size_t bytes) {
  if (base == nullptr || bytes == 0) return;
  if (munmap(base, bytes) != 0) {
    // Only a caller bug (a range we never returned) gets here; say so rather than abort.
    (void)std::fprintf(stderr, "siesta: munmap of %zu bytes at %p failed (errno %d)\n", bytes,
                       static_cast<void*>(base), errno);
  }
}

Result<size_t> resident_bytes() {
  // statm: size resident shared text lib data dt, in pages. "resident" counts anonymous,
  // file and shared-memory (memfd) pages, which is what a released range must give back.
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return status_from_errno(errno, "open /proc/self/statm");
  char text[256];
  const ssize_t got = read(fd, text, sizeof text - 1);
  const int err = errno;
  close(fd);
  if (got <= 0) return status_from_errno(got < 0 ? err : EIO, "read /proc/self/statm");
  text[got] = '\0';
  char* cursor = text;
  (void)std::strtoull(cursor, &cursor, 10);  // skip the total program size
  char* after = nullptr;
  const unsigned long long resident_pages = std::strtoull(cursor, &after, 10);
  if (after == cursor) return Internal("cannot parse /proc/self/statm: " + std::string(text));
  return static_cast<size_t>(resident_pages) * page_size();
}

}  // namespace siesta::host_address_space
