// SimAddressMap: the simulator's record of which addresses are reserved and which are
// committed (one Allocation per successful commit() call, made of memfd chunks), and the
// checks that turn each REQUIRES of MemoryBackend into an error instead of undefined
// behaviour. Pure bookkeeping: it makes no system call and takes no lock (SimBackend holds
// its own lock around every use).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backends/sim/unique_fd.h"
#include "core/memory_backend.h"
#include "core/status.h"

namespace siesta {

// "[0x7f0000000000, +65536 bytes)", for error messages.
std::string sim_range_text(DeviceRange range);

class SimAddressMap {
 public:
  // The physical memory of one commit() call: memfds of at most max_chunk_bytes each,
  // mapped back to back from the start of the range.
  struct Allocation {
    size_t size = 0;
    std::vector<UniqueFd> chunks;
  };

  // InvalidArgument unless `range` is non-empty, does not wrap around, and starts and ends on
  // a multiple of `granularity`. `what` names the call for the message ("commit").
  static Status check_shape(DeviceRange range, size_t granularity, std::string_view what);

  // REQUIRES: `range` overlaps no reservation (the kernel gave it to us).
  void add_reservation(DeviceRange range);
  bool is_reservation(DeviceRange range) const;
  // REQUIRES: is_reservation(range). Forgets it and every allocation inside it; returns them
  // (their memfds close when the caller lets them go, after unmapping).
  std::vector<Allocation> remove_reservation(DeviceRange range);
  std::vector<DeviceRange> reservations() const;

  // OK when `range` lies inside one reservation and no byte of it is committed; else
  // FailedPrecondition saying which rule failed.
  Status check_commit(DeviceRange range) const;
  // REQUIRES: check_commit(range) is OK.
  void add_allocation(DeviceRange range, Allocation allocation);

  // OK when `range` lies inside one reservation, every byte of it is committed and every
  // allocation overlapping it lies inside it; else FailedPrecondition.
  Status check_decommit(DeviceRange range) const;
  // REQUIRES: check_decommit(range) is OK. Forgets the allocations inside `range`.
  std::vector<Allocation> remove_allocations(DeviceRange range);

  // True when every byte of [base, base + bytes) is committed (possibly by several
  // adjacent allocations). True for bytes == 0.
  bool fully_committed(DeviceAddress base, size_t bytes) const;

 private:
  using AllocationMap = std::map<DeviceAddress, Allocation>;
  // The allocation holding `address`, or end().
  AllocationMap::const_iterator allocation_at(DeviceAddress address) const;
  bool inside_one_reservation(DeviceRange range) const;
  bool any_committed(DeviceRange range) const;

  std::map<DeviceAddress, size_t> reservations_;  // base -> size
  AllocationMap allocations_;                     // base -> allocation
};

}  // namespace siesta
