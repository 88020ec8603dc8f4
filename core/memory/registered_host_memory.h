// RegisteredHostMemory: the host memory a backend was asked to copy to and from directly
// (MemoryBackend::register_host), and the checks every such copy makes against it. One
// place for the rules both backends keep: page-aligned, non-overlapping, a copy within one
// registration.
//
// Thread rule: not thread-safe; the backend holds its own mutex around every call.
#pragma once

#include <cstddef>
#include <map>
#include <span>

#include "core/base/status.h"

namespace siesta {

class RegisteredHostMemory {
 public:
  // OK when `memory` may be registered: non-empty, page-aligned, a multiple of the page
  // size, overlapping nothing registered. Else InvalidArgument, saying which.
  Status check_new(std::span<const std::byte> memory) const;
  // Records `memory`. REQUIRES: check_new(memory) was OK.
  void add(std::span<std::byte> memory);
  // Forgets the registration that starts at `data` and returns its size; 0 when none does.
  size_t remove(const std::byte* data);
  // OK when [data, data + bytes) lies within one registration; else InvalidArgument naming
  // `what` ("copy_to_host destination").
  Status check_within(const std::byte* data, size_t bytes, const char* what) const;

  size_t count() const { return by_start_.size(); }

 private:
  std::map<const std::byte*, size_t> by_start_;  // start -> bytes
};

}  // namespace siesta
