// RangeLedger: which address ranges a MemoryBackend has reserved and which parts of them are
// committed, with the checks that turn every REQUIRES of MemoryBackend into an error before
// anything reaches the device. Both backends keep their books here, so both refuse exactly
// the same calls with the same codes: CudaVmmBackend (where a bad copy enqueued on the device
// would poison the whole context) and SimBackend (where it would write through a stray
// pointer or fault).
//
// It owns what each range holds: a `Space` per reservation (CUDA: the cuMemAddressReserve
// handle; simulator: the PROT_NONE mapping) and a `Memory` per commit call (that call's
// physical chunks: CUDA allocations or memfds). Both are moved out, never destroyed, when
// taken, so the backend decides when and how to free them (and sees the errors). Both must be
// move-constructible. Plain C++ that makes no driver or system call, so it is unit-tested
// without a GPU (tests/unit/range_ledger_test.cc).
//
// Checks return InvalidArgument for a range that can never be valid (empty, wrapping around
// the address space, not granularity-aligned) and FailedPrecondition for one that would be
// valid in another state (not reserved, already committed, not committed). A check changes
// nothing; each message names the operation and the range.
//
// A decommit waits for the device without the backend's mutex (so that other ranges' commits
// and copies go on meanwhile), so the ledger knows a third state of a commit besides in use and
// gone: being released. begin_release() marks the commits of a range so; until take_commits()
// removes them (or cancel_release() puts them back in use), nothing may use them -- copies,
// zeroing and another decommit are refused as for uncommitted memory -- and nothing may be
// committed over them, and they still count in committed_bytes(), since the device still
// holds their memory.
//
// Thread rule: not thread-safe; the backend guards it with its mutex.
#pragma once

#include <cinttypes>
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

#include "core/base/status.h"
#include "core/memory/memory_backend.h"

namespace siesta {

// "[0x7f0000000000, +2097152 bytes)": how messages name a range.
inline std::string range_string(DeviceRange range) {
  char text[64];
  (void)std::snprintf(text, sizeof text, "[0x%" PRIx64 ", +%zu bytes)", range.base, range.size);
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

  // REQUIRES: `range` overlaps no reservation in the ledger (the driver or the kernel just
  // handed it out).
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
    out.reserve(reservations_.size());
    for (const auto& [base, reservation] : reservations_) out.push_back({base, reservation.size});
    return out;
  }

  // OK when `range` may be committed: non-empty, not wrapping, granularity-aligned (else
  // InvalidArgument), inside one reservation and no byte of it committed (else
  // FailedPrecondition).
  Status check_commit(DeviceRange range, size_t granularity) const {
    SIESTA_RETURN_IF_ERROR(check_shape(range, granularity, "commit"));
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
    commits_.emplace(range.base, Commit{range.size, std::move(memory), false});
    committed_bytes_ += range.size;
  }

  // OK when `range` may be decommitted: non-empty, not wrapping, granularity-aligned (else
  // InvalidArgument), inside one reservation (even where two reservations happen to be
  // adjacent and both committed, as cuMemUnmap requires), every byte committed and every
  // commit touching it lying entirely inside it, since a commit is released whole or not at
  // all, and none of them being released (else FailedPrecondition). Several adjacent whole
  // commits may be decommitted at once.
  Status check_decommit(DeviceRange range, size_t granularity) const {
    SIESTA_RETURN_IF_ERROR(check_shape(range, granularity, "decommit"));
    SIESTA_RETURN_IF_ERROR(check_reserved(range, "decommit"));
    DeviceAddress at = range.base;
    auto it = commits_.lower_bound(at);
    if (it != commits_.begin()) {
      const auto& [base, commit] = *std::prev(it);
      if (base + commit.size > at) return split_error(range, {base, commit.size});
    }
    while (at < range.end()) {
      if (it == commits_.end() || it->first != at) {
        return FailedPrecondition("decommit of " + range_string(range) + ": byte 0x" + hex(at) +
                                  " is not committed");
      }
      const DeviceRange commit{it->first, it->second.size};
      if (commit.end() > range.end()) return split_error(range, commit);
      if (it->second.releasing) return releasing_error("decommit of", range, at);
      at = commit.end();
      ++it;
    }
    return Status::Ok();
  }

  // Marks every commit in `range` as being released (see the top of this file).
  // REQUIRES: check_decommit(range) returned OK, and nothing changed the ledger since.
  void begin_release(DeviceRange range) { set_releasing(range, true); }

  // Puts the commits begin_release(range) marked back in use (the release was abandoned:
  // the device could not be drained). REQUIRES: begin_release(range), and they are not taken.
  void cancel_release(DeviceRange range) { set_releasing(range, false); }

  // True when some commit that starts inside `range` is being released (for a reservation:
  // some commit of it, since no commit crosses a reservation's edge).
  bool releasing_within(DeviceRange range) const {
    for (auto it = commits_.lower_bound(range.base);
         it != commits_.end() && it->first < range.end(); ++it) {
      if (it->second.releasing) return true;
    }
    return false;
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

  // OK when every byte of `range` is committed, possibly by several adjacent commits (a copy
  // or a zero may span them), and none of them is being released; an empty range always is.
  // InvalidArgument when `range` wraps around the address space, else FailedPrecondition
  // naming the first byte that is not committed or is being released. `use` names the
  // operation in the message ("copy_to_staging source").
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
      if (it->second.releasing) return releasing_error(use, range, at);
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
    size_t size = 0;
    Memory memory;
    bool releasing = false;  // begin_release() until take_commits() or cancel_release()
  };

  void set_releasing(DeviceRange range, bool releasing) {
    for (auto it = commits_.lower_bound(range.base);
         it != commits_.end() && it->first < range.end(); ++it) {
      it->second.releasing = releasing;
    }
  }

  static Status releasing_error(std::string_view use, DeviceRange range, DeviceAddress at) {
    return FailedPrecondition(std::string(use) + " " + range_string(range) + ": byte 0x" + hex(at) +
                              " is being decommitted");
  }

  static std::string hex(DeviceAddress address) {
    char text[32];
    (void)std::snprintf(text, sizeof text, "%" PRIx64, address);
    return text;
  }

  // The checks no state can satisfy, shared by commit and decommit.
  static Status check_shape(DeviceRange range, size_t granularity, std::string_view use) {
    const std::string prefix = std::string(use) + " of " + range_string(range);
    if (range.empty()) return InvalidArgument(prefix + ": the range is empty");
    if (range.end() < range.base) {
      return InvalidArgument(prefix + ": wraps around the address space");
    }
    if (range.base % granularity != 0 || range.size % granularity != 0) {
      return InvalidArgument(prefix + ": not aligned to the granularity (" +
                             std::to_string(granularity) + " bytes)");
    }
    return Status::Ok();
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

  static Status split_error(DeviceRange range, DeviceRange commit) {
    return FailedPrecondition("decommit of " + range_string(range) +
                              ": would release only part of committed " + range_string(commit) +
                              "; decommit whole commits only");
  }

  std::map<DeviceAddress, Reservation> reservations_;  // by base address
  std::map<DeviceAddress, Commit> commits_;            // by base address, disjoint
  uint64_t reserved_bytes_ = 0;
  uint64_t committed_bytes_ = 0;
};

}  // namespace siesta
