// RangeLedger: which address ranges a backend has reserved and which parts of them are
// committed, with the checks that enforce every REQUIRES of MemoryBackend before anything
// reaches the driver (a bad copy enqueued on the device would poison the whole context).
//
// It owns what each range holds: a `Space` per reservation (the address reservation) and a
// `Memory` per commit call (that call's physical chunks). Both are moved out, never
// destroyed, when taken, so the caller decides when and how to free them (and sees errors).
// Plain C++ with no driver calls, so it is unit-tested without a GPU.
//
// Thread rule: not thread-safe; the backend guards it with its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/memory_backend.h"
#include "core/status.h"

namespace siesta {

// "[0x7f0000000000, +2097152)": how messages name a range.
inline std::string range_string(DeviceRange range) {
  char text[64];
  (void)std::snprintf(text, sizeof text, "[0x%llx, +%llu)",
                      static_cast<unsigned long long>(range.base),
                      static_cast<unsigned long long>(range.size));
  return text;
}

template <class Space, class Memory>
class RangeLedger {
 public:
  // A reservation taken out of the ledger. Members are destroyed in reverse order, so
  // letting it go frees the commits' memory before the address space it sits in.
  struct TakenReservation {
    Space space;
    std::vector<Memory> commits;  // in address order
  };

  uint64_t reserved_bytes() const { return reserved_bytes_; }
  uint64_t committed_bytes() const { return committed_bytes_; }

  // REQUIRES: `range` overlaps no reservation in the ledger (the driver just handed it out).
  void add_reservation(DeviceRange range, Space space) {
    reservations_.emplace(range.base, Reservation{range.size, std::move(space)});
    reserved_bytes_ += range.size;
  }

  // Removes the reservation that is exactly `range` together with every commit inside it.
  // Returns nullopt (and changes nothing) when no reservation is exactly `range`.
  std::optional<TakenReservation> take_reservation(DeviceRange range) {
    auto it = reservations_.find(range.base);
    if (it == reservations_.end() || it->second.size != range.size) return std::nullopt;
    TakenReservation taken{std::move(it->second.space), take_commits(range)};
    reserved_bytes_ -= range.size;
    reservations_.erase(it);
    return taken;
  }

  // Every reservation, in address order (the destructor gives them all back).
  std::vector<DeviceRange> reservation_ranges() const {
    std::vector<DeviceRange> out;
    for (const auto& [base, reservation] : reservations_) out.push_back({base, reservation.size});
    return out;
  }

  // OK when `range` may be committed: non-empty, granularity-aligned, inside one
  // reservation, and no byte of it committed. InvalidArgument for the first two (never
  // valid), FailedPrecondition for the others (valid in another state).
  Status check_commit(DeviceRange range, size_t granularity) const {
    SIESTA_RETURN_IF_ERROR(check_shape(range, "commit"));
    SIESTA_RETURN_IF_ERROR(check_aligned(range, granularity, "commit"));
    SIESTA_RETURN_IF_ERROR(check_reserved(range, "commit"));
    auto after = commits_.lower_bound(range.end());
    if (after != commits_.begin()) {
      // Commits are disjoint and sorted, so the last one starting before range.end() ends
      // last of all that might overlap.
      const auto& [base, commit] = *std::prev(after);
      if (base + commit.size > range.base) {
        return FailedPrecondition("commit of " + range_string(range) + ": overlaps committed " +
                                  range_string({base, commit.size}));
      }
    }
    return Status::Ok();
  }

  // REQUIRES: check_commit(range) returned OK.
  void add_commit(DeviceRange range, Memory memory) {
    commits_.emplace(range.base, Commit{range.size, std::move(memory)});
    committed_bytes_ += range.size;
  }

  // OK when `range` may be decommitted: non-empty and granularity-aligned (else
  // InvalidArgument), every byte committed and every commit touching it lying entirely
  // inside it, since a commit is released whole or not at all (else FailedPrecondition).
  Status check_decommit(DeviceRange range, size_t granularity) const {
    SIESTA_RETURN_IF_ERROR(check_shape(range, "decommit"));
    SIESTA_RETURN_IF_ERROR(check_aligned(range, granularity, "decommit"));
    SIESTA_RETURN_IF_ERROR(check_reserved(range, "decommit"));
    DeviceAddress at = range.base;
    auto it = commits_.lower_bound(at);
    if (it != commits_.begin()) {
      const auto& [base, commit] = *std::prev(it);
      if (base + commit.size > at) {
        return FailedPrecondition("decommit of " + range_string(range) +
                                  ": would release only part of committed " +
                                  range_string({base, commit.size}));
      }
    }
    while (at < range.end()) {
      if (it == commits_.end() || it->first != at) {
        return FailedPrecondition("decommit of " + range_string(range) + ": byte 0x" + hex(at) +
                                  " is not committed");
      }
      DeviceRange commit{it->first, it->second.size};
      if (commit.end() > range.end()) {
        return FailedPrecondition("decommit of " + range_string(range) +
                                  ": would release only part of committed " + range_string(commit));
      }
      at = commit.end();
      ++it;
    }
    return Status::Ok();
  }

  // Removes every commit that starts inside `range` and returns what they held, in address
  // order. After check_decommit(range) returned OK, those are exactly the commits in `range`.
  std::vector<Memory> take_commits(DeviceRange range) {
    std::vector<Memory> out;
    auto it = commits_.lower_bound(range.base);
    while (it != commits_.end() && it->first < range.end()) {
      committed_bytes_ -= it->second.size;
      out.push_back(std::move(it->second.memory));
      it = commits_.erase(it);
    }
    return out;
  }

  // OK when every byte of `range` is committed (possibly by several adjacent commits); an
  // empty range always is. `use` names the operation in the message ("copy source").
  Status check_committed(DeviceRange range, std::string_view use) const {
    if (range.empty()) return Status::Ok();
    if (range.end() < range.base) {
      return InvalidArgument(std::string(use) + " " + range_string(range) +
                             ": wraps around the address space");
    }
    DeviceAddress at = range.base;
    auto it = commits_.upper_bound(at);
    if (it != commits_.begin()) --it;
    while (at < range.end()) {
      if (it == commits_.end() || it->first > at || it->first + it->second.size <= at) {
        return FailedPrecondition(std::string(use) + " " + range_string(range) + ": byte 0x" +
                                  hex(at) + " is not committed");
      }
      at = it->first + it->second.size;
      ++it;
    }
    return Status::Ok();
  }

 private:
  struct Reservation {
    size_t size;
    Space space;
  };
  struct Commit {
    size_t size;
    Memory memory;
  };

  static std::string hex(DeviceAddress address) {
    char text[32];
    (void)std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(address));
    return text;
  }

  static Status check_shape(DeviceRange range, std::string_view use) {
    if (range.empty()) return InvalidArgument(std::string(use) + " of an empty range");
    if (range.end() < range.base) {
      return InvalidArgument(std::string(use) + " of " + range_string(range) +
                             ": wraps around the address space");
    }
    return Status::Ok();
  }

  static Status check_aligned(DeviceRange range, size_t granularity, std::string_view use) {
    if (range.base % granularity == 0 && range.size % granularity == 0) return Status::Ok();
    return InvalidArgument(std::string(use) + " of " + range_string(range) +
                           ": not aligned to the granularity (" + std::to_string(granularity) +
                           " bytes)");
  }

  Status check_reserved(DeviceRange range, std::string_view use) const {
    auto it = reservations_.upper_bound(range.base);
    if (it != reservations_.begin()) {
      --it;
      if (DeviceRange{it->first, it->second.size}.contains(range)) return Status::Ok();
    }
    return FailedPrecondition(std::string(use) + " of " + range_string(range) +
                              ": not inside one reservation");
  }

  std::map<DeviceAddress, Reservation> reservations_;  // by base address
  std::map<DeviceAddress, Commit> commits_;            // by base address, disjoint
  uint64_t reserved_bytes_ = 0;
  uint64_t committed_bytes_ = 0;
};

}  // namespace siesta
