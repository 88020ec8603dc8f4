#include "backends/sim/sim_address_map.h"

#include <cinttypes>
#include <cstdio>
#include <iterator>
#include <utility>

namespace siesta {

std::string sim_range_text(DeviceRange range) {
  char text[64];
  (void)std::snprintf(text, sizeof text, "[0x%" PRIx64 ", +%zu bytes)", range.base, range.size);
  return text;
}

Status SimAddressMap::check_shape(DeviceRange range, size_t granularity, std::string_view what) {
  std::string prefix = std::string(what) + " of " + sim_range_text(range);
  if (range.empty()) return InvalidArgument(prefix + ": the range is empty");
  if (range.end() < range.base) return InvalidArgument(prefix + ": the range wraps around");
  if (range.base % granularity != 0 || range.size % granularity != 0) {
    return InvalidArgument(prefix + ": not aligned to the granularity of " +
                           std::to_string(granularity) + " bytes");
  }
  return Status::Ok();
}

void SimAddressMap::add_reservation(DeviceRange range) {
  reservations_.emplace(range.base, range.size);
}

bool SimAddressMap::is_reservation(DeviceRange range) const {
  auto it = reservations_.find(range.base);
  return it != reservations_.end() && it->second == range.size;
}

std::vector<SimAddressMap::Allocation> SimAddressMap::remove_reservation(DeviceRange range) {
  std::vector<Allocation> removed;
  auto it = allocations_.lower_bound(range.base);
  while (it != allocations_.end() && it->first < range.end()) {
    removed.push_back(std::move(it->second));
    it = allocations_.erase(it);
  }
  reservations_.erase(range.base);
  return removed;
}

std::vector<DeviceRange> SimAddressMap::reservations() const {
  std::vector<DeviceRange> out;
  out.reserve(reservations_.size());
  for (const auto& [base, size] : reservations_) out.push_back({base, size});
  return out;
}

SimAddressMap::AllocationMap::const_iterator SimAddressMap::allocation_at(
    DeviceAddress address) const {
  auto it = allocations_.upper_bound(address);
  if (it == allocations_.begin()) return allocations_.end();
  --it;
  return address < it->first + it->second.size ? it : allocations_.end();
}

bool SimAddressMap::any_committed(DeviceRange range) const {
  if (allocation_at(range.base) != allocations_.end()) return true;
  auto next = allocations_.upper_bound(range.base);
  return next != allocations_.end() && next->first < range.end();
}

bool SimAddressMap::inside_one_reservation(DeviceRange range) const {
  auto it = reservations_.upper_bound(range.base);
  return it != reservations_.begin() &&
         DeviceRange{std::prev(it)->first, std::prev(it)->second}.contains(range);
}

Status SimAddressMap::check_commit(DeviceRange range) const {
  if (!inside_one_reservation(range)) {
    return FailedPrecondition("commit of " + sim_range_text(range) +
                              ": the range does not lie inside one reservation");
  }
  if (any_committed(range)) {
    return FailedPrecondition("commit of " + sim_range_text(range) +
                              ": part of the range is already committed");
  }
  return Status::Ok();
}

void SimAddressMap::add_allocation(DeviceRange range, Allocation allocation) {
  allocation.size = range.size;
  allocations_.emplace(range.base, std::move(allocation));
}

bool SimAddressMap::fully_committed(DeviceAddress base, size_t bytes) const {
  const DeviceAddress end = base + bytes;
  if (end < base) return false;
  DeviceAddress cursor = base;
  while (cursor < end) {
    auto it = allocation_at(cursor);
    if (it == allocations_.end()) return false;
    cursor = it->first + it->second.size;
  }
  return true;
}

Status SimAddressMap::check_decommit(DeviceRange range) const {
  // As the CUDA backend: one decommit stays within one reservation, even where two
  // reservations happen to be adjacent and both committed.
  if (!inside_one_reservation(range)) {
    return FailedPrecondition("decommit of " + sim_range_text(range) +
                              ": the range does not lie inside one reservation");
  }
  if (!fully_committed(range.base, range.size)) {
    return FailedPrecondition("decommit of " + sim_range_text(range) +
                              ": part of the range is not committed");
  }
  // Fully committed, so allocations tile the range; only the first and the last can stick
  // out of it.
  auto first = allocation_at(range.base);
  auto last = allocation_at(range.end() - 1);
  if (first->first != range.base || last->first + last->second.size != range.end()) {
    return FailedPrecondition("decommit of " + sim_range_text(range) +
                              ": it would split a commit; decommit whole commits only");
  }
  return Status::Ok();
}

std::vector<SimAddressMap::Allocation> SimAddressMap::remove_allocations(DeviceRange range) {
  std::vector<Allocation> removed;
  auto it = allocations_.lower_bound(range.base);
  while (it != allocations_.end() && it->first < range.end()) {
    removed.push_back(std::move(it->second));
    it = allocations_.erase(it);
  }
  return removed;
}

}  // namespace siesta
