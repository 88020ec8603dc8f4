#include "core/memory/registered_host_memory.h"

#include <cstdint>
#include <iterator>
#include <string>

#include "core/memory/host_address_space.h"

namespace siesta {

Status RegisteredHostMemory::check_new(std::span<const std::byte> memory) const {
  const size_t page = host_address_space::page_size();
  const auto start = reinterpret_cast<uintptr_t>(memory.data());
  if (memory.empty() || start % page != 0 || memory.size() % page != 0) {
    return InvalidArgument(
        "host memory to register must be non-empty, page-aligned and whole "
        "pages (" +
        std::to_string(memory.size()) + " bytes)");
  }
  // The first registration at or after the new start, and the one before it.
  auto next = by_start_.lower_bound(memory.data());
  const bool overlaps_next = next != by_start_.end() && next->first < memory.data() + memory.size();
  const bool overlaps_previous =
      next != by_start_.begin() && std::prev(next)->first + std::prev(next)->second > memory.data();
  if (overlaps_next || overlaps_previous) {
    return InvalidArgument("host memory to register overlaps memory already registered");
  }
  return Status::Ok();
}

void RegisteredHostMemory::add(std::span<std::byte> memory) {
  by_start_.emplace(memory.data(), memory.size());
}

size_t RegisteredHostMemory::remove(const std::byte* data) {
  auto it = by_start_.find(data);
  if (it == by_start_.end()) return 0;
  const size_t bytes = it->second;
  by_start_.erase(it);
  return bytes;
}

Status RegisteredHostMemory::check_within(const std::byte* data, size_t bytes,
                                          const char* what) const {
  auto after = by_start_.upper_bound(data);
  if (after != by_start_.begin()) {
    const auto& [start, size] = *std::prev(after);
    const size_t offset = static_cast<size_t>(data - start);
    if (offset <= size && bytes <= size - offset) return Status::Ok();
  }
  return InvalidArgument(std::string(what) + ": " + std::to_string(bytes) +
                         " bytes not within one registered host memory");
}

}  // namespace siesta
