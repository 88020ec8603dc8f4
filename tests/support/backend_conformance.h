// The MemoryBackend conformance suite, address space and physical memory: one set of tests that
// every backend (sim, faulty-over-sim, CUDA where a GPU exists) must pass, so that the
// simulator the offload logic is tested on is held to the same contract as the real device.
// Its twin for the staging ring and copies is backend_copy_conformance.h.
//
// To run it on a backend, define a Traits type with `static BackendUnderTest make();`
// (backend_conformance_fixture.h) and instantiate, in one .cc file:
//   using MyTypes = ::testing::Types<MyTraits>;
//   INSTANTIATE_TYPED_TEST_SUITE_P(My, BackendConformance, MyTypes);
// make() runs once per test (in a fresh object), so tests do not share state. A backend
// that cannot run here (no GPU) returns backend == nullptr and a skip_reason.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/memory/memory_backend.h"
#include "tests/support/backend_conformance_fixture.h"
#include "tests/support/backend_test_util.h"

namespace siesta::conformance {

template <class Traits>
class BackendConformance : public ConformanceFixture<Traits> {};

TYPED_TEST_SUITE_P(BackendConformance);

// ---- Address space ----------------------------------------------------------------------------

TYPED_TEST_P(BackendConformance, ReserveRoundsUpToGranularityAndAligns) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  ASSERT_GT(g, 0u);
  SIESTA_EXPECT_CODE(b.reserve(0), StatusCode::kInvalidArgument);
  const MemoryStats before = b.stats();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, g + 1));
  EXPECT_EQ(r.range().size, 2 * g);
  EXPECT_EQ(r.range().base % g, 0u);
  EXPECT_EQ(b.stats().reserved_bytes, before.reserved_bytes + 2 * g);
  EXPECT_EQ(b.stats().committed_bytes, before.committed_bytes);  // reserve commits nothing
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange other, ReservedRange::reserve(b, g));
  EXPECT_FALSE(r.range().overlaps(other.range()));
  r.reset();
  other.reset();
  this->expect_same_accounting(before);
}

// ---- Commit, data, decommit -------------------------------------------------------------------

TYPED_TEST_P(BackendConformance, DataWrittenAfterCommitReadsBack) {
  MemoryBackend& b = this->backend();
  const size_t bytes = this->multi_chunk_bytes(4u << 20);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, bytes));
  SIESTA_ASSERT_OK(b.commit(r.range()));
  EXPECT_EQ(b.stats().committed_bytes, bytes);
  this->write_and_verify(r.range(), 1);
  this->write_and_verify(r.range(), 2);  // overwrite: a stale first pattern would show
  SIESTA_EXPECT_OK(b.decommit(r.range()));
}

// The second wake must work as the first (other systems asserted static state on cycle 2): the full
// offload cycle, many times, at the same addresses: write, save to host, decommit, commit the very
// same range, restore, check.
TYPED_TEST_P(BackendConformance, TwentyOffloadCyclesKeepAddressesAndData) {
  MemoryBackend& b = this->backend();
  const size_t bytes = this->multi_chunk_bytes(2u << 20);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, bytes));
  const DeviceRange range = r.range();
  const MemoryStats reserved = b.stats();
  const auto& backed = this->under_test().backed_by_memory;
  if (backed) {
    EXPECT_FALSE(backed(range.base)) << "reserved only";
  }
  SIESTA_ASSERT_OK(b.commit(range));
  for (uint64_t cycle = 0; cycle < 20; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    const std::vector<std::byte> pattern = test_util::make_pattern(bytes, 100 + cycle);
    SIESTA_ASSERT_OK(test_util::write_device(b, range.base, pattern));
    SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> saved,
                                test_util::read_device(b, range.base, bytes));
    ASSERT_EQ(test_util::first_difference(saved, pattern), -1);
    SIESTA_ASSERT_OK(b.decommit(range));
    EXPECT_EQ(b.stats().committed_bytes, reserved.committed_bytes);
    EXPECT_EQ(b.stats().reserved_bytes, reserved.reserved_bytes);  // addresses stay reserved
    if (backed) {  // the device agrees: no physical memory is left under the range
      EXPECT_FALSE(backed(range.base));
      EXPECT_FALSE(backed(range.end() - 1));
    }
    SIESTA_ASSERT_OK(b.commit(range));  // the same addresses, no new reservation
    EXPECT_EQ(b.stats().committed_bytes, reserved.committed_bytes + bytes);
    if (backed) {
      EXPECT_TRUE(backed(range.base));
      EXPECT_TRUE(backed(range.end() - 1));
    }
    if (this->under_test().reservation_start) {
      EXPECT_EQ(this->under_test().reservation_start(range.base), range.base);
    }
    SIESTA_ASSERT_OK(test_util::write_device(b, range.base, saved));
    SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> restored,
                                test_util::read_device(b, range.base, bytes));
    ASSERT_EQ(test_util::first_difference(restored, pattern), -1);
  }
  EXPECT_EQ(r.range(), range);
  SIESTA_EXPECT_OK(b.decommit(range));
}

TYPED_TEST_P(BackendConformance, ZeroZeroesExactlyTheRange) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, 3 * g));
  SIESTA_ASSERT_OK(b.commit(r.range()));
  this->write_and_verify(r.range(), 7);
  // An odd sub-range: zero() is not bound to the granularity.
  const DeviceRange zeroed = r.range().subrange(g / 2 + 3, g + 5);
  SIESTA_ASSERT_OK(b.zero(zeroed));
  SIESTA_ASSERT_OK(b.synchronize());
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> got,
                              test_util::read_device(b, r.range().base, r.range().size));
  const std::vector<std::byte> pattern = test_util::make_pattern(r.range().size, 7);
  const size_t lo = zeroed.base - r.range().base;
  const size_t hi = lo + zeroed.size;
  for (size_t i = 0; i < got.size(); ++i) {
    const std::byte want = (i >= lo && i < hi) ? std::byte{0} : pattern[i];
    ASSERT_EQ(got[i], want) << "byte " << i;
  }
  SIESTA_EXPECT_OK(b.decommit(r.range()));
}

TYPED_TEST_P(BackendConformance, DecommitReturnsTheMemory) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  const size_t bytes = test_util::round_up(std::max<size_t>(4u << 20, 8 * g), g);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, 2 * bytes));
  const DeviceRange first = r.range().subrange(0, bytes);
  const DeviceRange second = r.range().subrange(bytes, bytes);
  const uint64_t committed_before = b.stats().committed_bytes;
  const uint64_t used_at_start = this->under_test().measured_used_bytes();
  SIESTA_ASSERT_OK(b.commit(first));
  SIESTA_ASSERT_OK(b.commit(second));
  this->write_and_verify(first, 11);  // touch every page, so they are really resident
  this->write_and_verify(second, 12);
  ASSERT_EQ(b.stats().committed_bytes, committed_before + 2 * bytes);
  // Measured from outside, the commits took the memory.
  EXPECT_GE(this->under_test().measured_used_bytes() + this->slack(), used_at_start + 2 * bytes)
      << "measured use rose by "
      << (int64_t(this->under_test().measured_used_bytes()) - int64_t(used_at_start))
      << " bytes after committing " << 2 * bytes;

  const uint64_t used_before = this->under_test().measured_used_bytes();
  SIESTA_ASSERT_OK(b.decommit(first));
  const uint64_t used_after = this->under_test().measured_used_bytes();
  // Exactly the range, as the backend accounts it (report what was freed, not what was meant).
  EXPECT_EQ(b.stats().committed_bytes, committed_before + bytes);
  // And measured from outside: the memory really left.
  EXPECT_GE(used_before + this->slack(), used_after + bytes)
      << "measured use fell by " << (int64_t(used_before) - int64_t(used_after)) << " bytes "
      << "after decommitting " << bytes;
  this->expect_contents(second, 12);  // the neighbour is untouched
  SIESTA_EXPECT_OK(b.decommit(second));
  EXPECT_EQ(b.stats().committed_bytes, committed_before);
}

// Adjacent commits can be decommitted together: the contract only forbids splitting one.
TYPED_TEST_P(BackendConformance, DecommitMayCoverSeveralWholeCommits) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, 3 * g));
  const uint64_t committed_before = b.stats().committed_bytes;
  SIESTA_ASSERT_OK(b.commit(r.range().subrange(0, g)));
  SIESTA_ASSERT_OK(b.commit(r.range().subrange(g, 2 * g)));
  this->write_and_verify(r.range(), 21);  // one copy can also span both commits
  SIESTA_ASSERT_OK(b.decommit(r.range()));
  EXPECT_EQ(b.stats().committed_bytes, committed_before);
  SIESTA_EXPECT_CODE(b.decommit(r.range().subrange(0, g)), StatusCode::kFailedPrecondition);
}

TYPED_TEST_P(BackendConformance, UnreserveReleasesCommittedMemory) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  const size_t bytes = test_util::round_up(std::max<size_t>(4u << 20, 8 * g), g);
  const MemoryStats before = b.stats();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, bytes));
  SIESTA_ASSERT_OK(b.commit(r.range()));
  this->write_and_verify(r.range(), 31);
  const uint64_t used_before = this->under_test().measured_used_bytes();
  r.reset();  // unreserve with everything still committed
  const uint64_t used_after = this->under_test().measured_used_bytes();
  this->expect_same_accounting(before);
  EXPECT_GE(used_before + this->slack(), used_after + bytes)
      << "measured use fell by " << (int64_t(used_before) - int64_t(used_after)) << " bytes "
      << "after unreserving " << bytes;
  // Unreserving something that is not a reservation changes nothing.
  b.unreserve(DeviceRange{g, g});
  this->expect_same_accounting(before);
}

// ---- Running out of memory --------------------------------------------------------------------

TYPED_TEST_P(BackendConformance, CommitBeyondFreeMemoryFailsWithOutOfMemoryAndLeaksNothing) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  const MemoryStats before = b.stats();
  ASSERT_GT(before.device_free_bytes, 0u);
  // More than the device has free; reserving it costs only address space.
  const size_t too_much = test_util::round_up(before.device_free_bytes + 1, g) + g;
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, too_much));
  const Status failed = b.commit(r.range());
  SIESTA_EXPECT_CODE(failed, StatusCode::kOutOfMemory);
  const MemoryStats after = b.stats();
  EXPECT_EQ(after.committed_bytes, before.committed_bytes);
  // The device itself got everything back (within one granule for the driver's own use).
  EXPECT_GE(after.device_free_bytes + g, before.device_free_bytes);
  // Nothing of the range stays committed: a smaller commit in it works, and so does the same
  // over-large commit's failure again (no half-committed leftovers in the way).
  const DeviceRange small = r.range().subrange(0, g);
  SIESTA_ASSERT_OK(b.commit(small));
  this->write_and_verify(small, 41);
  SIESTA_ASSERT_OK(b.decommit(small));
  SIESTA_EXPECT_CODE(b.commit(r.range()), StatusCode::kOutOfMemory);
  EXPECT_EQ(b.stats().committed_bytes, before.committed_bytes);
}

// A commit of three chunks whose chunk 1 fails before each step in turn (create, map, set
// access): everything the call made is rolled back -- chunk 0 was fully mapped -- and the range
// can be committed again.
TYPED_TEST_P(BackendConformance, FailedPartialCommitLeavesTheRangeDecommitted) {
  const BackendUnderTest& under_test = this->under_test();
  if (!under_test.fail_next_commit_at || under_test.max_chunk_bytes == 0) {
    GTEST_SKIP() << "this backend has no commit fault hook or does not say its chunk size";
  }
  MemoryBackend& b = this->backend();
  const size_t bytes = 3 * under_test.max_chunk_bytes;  // three chunks
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, bytes));
  uint64_t seed = 51;
  for (CommitStep failing : {CommitStep::kCreate, CommitStep::kMap, CommitStep::kSetAccess}) {
    SCOPED_TRACE("failing before step " + std::to_string(static_cast<int>(failing)));
    const MemoryStats before = b.stats();
    const uint64_t used_before = under_test.measured_used_bytes();
    std::cout << "injecting: a failure before step " << static_cast<int>(failing)
              << " (0 create, 1 map, 2 set access) of chunk 1 of a 3-chunk commit\n";
    under_test.fail_next_commit_at(failing, 1);
    const Status failed = b.commit(r.range());
    EXPECT_FALSE(failed.ok());
    EXPECT_NE(failed.message().find("injected"), std::string::npos) << failed.to_string();
    // The hook was asked before every step of every chunk, up to the failing one.
    std::vector<std::pair<CommitStep, size_t>> want_calls;
    for (size_t chunk = 0; chunk < 2; ++chunk) {
      for (CommitStep step : {CommitStep::kCreate, CommitStep::kMap, CommitStep::kSetAccess}) {
        want_calls.emplace_back(step, chunk);
        if (chunk == 1 && step == failing) break;
      }
    }
    if (under_test.commit_hook_calls) {
      EXPECT_EQ(under_test.commit_hook_calls(), want_calls);
    }
    this->expect_same_accounting(before);
    if (under_test.resident_bytes_in) {
      // Exact where the OS can be asked about the range itself (the process's RSS also moves
      // with other allocations: AddressSanitizer's quarantine made it flaky here).
      EXPECT_EQ(under_test.resident_bytes_in(r.range()), 0u)
          << "chunk 0 (and any part of chunk 1) released";
    } else {
      EXPECT_LE(under_test.measured_used_bytes(), used_before + this->slack())
          << "chunk 0 (and any part of chunk 1) released";
    }
    if (under_test.backed_by_memory) {
      EXPECT_FALSE(under_test.backed_by_memory(r.range().base));
    }
    // Chunk 0 was fully mapped before the failure: it must be gone too.
    SIESTA_EXPECT_CODE(b.decommit(r.range().subrange(0, this->g())),
                       StatusCode::kFailedPrecondition);
    SIESTA_EXPECT_CODE(b.zero(r.range().subrange(0, 1)), StatusCode::kFailedPrecondition);
    if (under_test.stray_access_faults_in_process) {
      GTEST_FLAG_SET(death_test_style, "threadsafe");
      auto* chunk0 = reinterpret_cast<volatile unsigned char*>(r.range().base);
      EXPECT_DEATH(chunk0[0] = 1, "") << "chunk 0 is still mapped after the rollback";
    }
    // And the whole range is committable again.
    SIESTA_ASSERT_OK(b.commit(r.range()));
    this->write_and_verify(r.range(), ++seed);
    SIESTA_EXPECT_OK(b.decommit(r.range()));
  }
}

// ---- Misuse is an error, not a crash, and changes nothing --------------------------------------

TYPED_TEST_P(BackendConformance, DoubleCommitIsRejected) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, 4 * g));
  const DeviceRange middle = r.range().subrange(g, 2 * g);
  SIESTA_ASSERT_OK(b.commit(middle));
  this->write_and_verify(middle, 61);
  const MemoryStats before = b.stats();
  SIESTA_EXPECT_CODE(b.commit(middle), StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(b.commit(r.range()), StatusCode::kFailedPrecondition);  // covers it
  SIESTA_EXPECT_CODE(b.commit(r.range().subrange(0, 2 * g)), StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(b.commit(r.range().subrange(2 * g, 2 * g)), StatusCode::kFailedPrecondition);
  this->expect_same_accounting(before);
  this->expect_contents(middle, 61);
  // The free granules on either side are still committable.
  SIESTA_EXPECT_OK(b.commit(r.range().subrange(0, g)));
  SIESTA_EXPECT_OK(b.commit(r.range().subrange(3 * g, g)));
}

TYPED_TEST_P(BackendConformance, DecommitOfUncommittedRangeIsRejected) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, 2 * g));
  const MemoryStats before = b.stats();
  SIESTA_EXPECT_CODE(b.decommit(r.range()), StatusCode::kFailedPrecondition);
  this->expect_same_accounting(before);
  // Committed once, decommitted twice.
  SIESTA_ASSERT_OK(b.commit(r.range()));
  SIESTA_ASSERT_OK(b.decommit(r.range()));
  SIESTA_EXPECT_CODE(b.decommit(r.range()), StatusCode::kFailedPrecondition);
  this->expect_same_accounting(before);
}

TYPED_TEST_P(BackendConformance, DecommitOfPartOfACommitIsRejected) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, 3 * g));
  const DeviceRange committed = r.range().subrange(0, 2 * g);
  SIESTA_ASSERT_OK(b.commit(committed));
  this->write_and_verify(committed, 71);
  const MemoryStats before = b.stats();
  SIESTA_EXPECT_CODE(b.decommit(committed.subrange(0, g)), StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(b.decommit(committed.subrange(g, g)), StatusCode::kFailedPrecondition);
  // More than the commit: the extra granule is not committed.
  SIESTA_EXPECT_CODE(b.decommit(r.range()), StatusCode::kFailedPrecondition);
  this->expect_same_accounting(before);
  this->expect_contents(committed, 71);
  SIESTA_EXPECT_OK(b.decommit(committed));
}

TYPED_TEST_P(BackendConformance, CommitOutsideAnyReservationIsRejected) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange gone, ReservedRange::reserve(b, 2 * g));
  const DeviceRange was = gone.range();
  gone.reset();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange a, ReservedRange::reserve(b, 2 * g));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange c, ReservedRange::reserve(b, 2 * g));
  const MemoryStats before = b.stats();
  if (!was.overlaps(a.range()) && !was.overlaps(c.range())) {
    SIESTA_EXPECT_CODE(b.commit(was), StatusCode::kFailedPrecondition);  // unreserved
  }
  const DeviceRange past_end{a.range().base, a.range().size + g};  // runs past a's end
  SIESTA_EXPECT_CODE(b.commit(past_end), StatusCode::kFailedPrecondition);
  const DeviceRange before_start{a.range().base - g, 2 * g};  // starts before a
  SIESTA_EXPECT_CODE(b.commit(before_start), StatusCode::kFailedPrecondition);
  // Two reservations side by side are still two: a commit may not span them.
  const DeviceRange low = a.range().base < c.range().base ? a.range() : c.range();
  const DeviceRange high = a.range().base < c.range().base ? c.range() : a.range();
  SIESTA_EXPECT_CODE(b.commit({low.base, high.end() - low.base}), StatusCode::kFailedPrecondition);
  this->expect_same_accounting(before);
}

TYPED_TEST_P(BackendConformance, MisalignedRangesAreRejected) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, 2 * g));
  const DeviceAddress base = r.range().base;
  const MemoryStats before = b.stats();
  SIESTA_EXPECT_CODE(b.commit({base + g / 2, g}), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(b.commit({base, g / 2}), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(b.commit({base, 0}), StatusCode::kInvalidArgument);
  this->expect_same_accounting(before);
  SIESTA_ASSERT_OK(b.commit(r.range()));
  const MemoryStats committed = b.stats();
  SIESTA_EXPECT_CODE(b.decommit({base + g / 2, g}), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_CODE(b.decommit({base, g + 1}), StatusCode::kInvalidArgument);
  this->expect_same_accounting(committed);
  SIESTA_EXPECT_OK(b.decommit(r.range()));
}

TYPED_TEST_P(BackendConformance, CopiesTouchingUncommittedBytesAreRejected) {
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, 3 * g));
  const DeviceAddress base = r.range().base;
  SIESTA_ASSERT_OK(b.commit({base, g}));
  this->write_and_verify({base, g}, 81);
  const MemoryStats before = b.stats();
  SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer buffer, b.acquire_staging());
  const size_t n = std::min<size_t>(64, buffer.bytes().size());
  SIESTA_EXPECT_CODE(b.copy_to_staging(base + g, n, buffer), StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(b.copy_to_staging(base + g - n / 2, n, buffer),
                     StatusCode::kFailedPrecondition);  // straddles the end of the commit
  SIESTA_EXPECT_CODE(b.copy_from_staging(buffer, n, base + 2 * g), StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(b.copy_from_staging(buffer, n, base + g - n / 2),
                     StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(b.zero({base + g, g}), StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(b.zero({base + g / 2, g}), StatusCode::kFailedPrecondition);
  // More bytes than the buffer holds can never be valid.
  SIESTA_EXPECT_CODE(b.copy_to_staging(base, buffer.bytes().size() + 1, buffer),
                     StatusCode::kInvalidArgument);
  // Decommitted memory is uncommitted memory.
  SIESTA_ASSERT_OK(b.commit({base + 2 * g, g}));
  SIESTA_ASSERT_OK(b.decommit({base + 2 * g, g}));
  SIESTA_EXPECT_CODE(b.copy_to_staging(base + 2 * g, n, buffer), StatusCode::kFailedPrecondition);
  buffer.reset();
  SIESTA_ASSERT_OK(b.synchronize());
  this->expect_same_accounting(before);
  this->expect_contents({base, g}, 81);  // the rejected copies wrote nothing
}

TYPED_TEST_P(BackendConformance, StrayAccessAfterDecommitFaults) {
  if (!this->under_test().stray_access_faults_in_process) {
    GTEST_SKIP() << "device memory is not host-addressable here; a stray device access is the "
                    "driver's to report, not this process's";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the backend runs a worker thread
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, g));
  SIESTA_ASSERT_OK(b.commit(r.range()));
  this->write_and_verify(r.range(), 91);
  auto* bytes = reinterpret_cast<volatile unsigned char*>(r.range().base);
  bytes[g - 1] = 1;  // reachable while committed
  SIESTA_ASSERT_OK(b.decommit(r.range()));
  EXPECT_DEATH(bytes[0] = 1, "");
  EXPECT_DEATH(
      {
        const unsigned char value = bytes[g - 1];
        std::fprintf(stderr, "read %u\n", value);
      },
      "");
}

// ---- Fresh memory and the end of a backend
// -------------------------------------------------------

// Fresh memory's contents are unspecified (a GPU leaves whatever was there, so code must
// initialise what it reads); where the backend says what it holds, every byte holds it, also
// after a decommit of written memory (nothing of the old contents comes back).
TYPED_TEST_P(BackendConformance, FreshMemoryHoldsNothingOfTheOld) {
  MemoryBackend& b = this->backend();
  const size_t bytes = this->multi_chunk_bytes(1u << 20);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, bytes));
  SIESTA_ASSERT_OK(b.commit(r.range()));
  const std::optional<std::byte> fresh = this->under_test().fresh_memory_byte;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "first commit" : "after a decommit of written memory");
    SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> got,
                                test_util::read_device(b, r.range().base, bytes));
    if (fresh) {
      for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(got[i], *fresh) << "byte " << i;
    }
    this->write_and_verify(r.range(), 61 + round);
    SIESTA_ASSERT_OK(b.decommit(r.range()));
    SIESTA_ASSERT_OK(b.commit(r.range()));
  }
  SIESTA_EXPECT_OK(b.decommit(r.range()));
}

// Destroying the backend with memory committed and work still queued gives everything back.
TYPED_TEST_P(BackendConformance, DestroyingTheBackendReleasesEverything) {
  MemoryBackend& b = this->backend();
  const size_t bytes = test_util::round_up(std::max<size_t>(8u << 20, 8 * this->g()), this->g());
  const uint64_t before = this->under_test().measured_used_bytes();
  const size_t g = this->g();
  const uint64_t slack = this->slack();
  SIESTA_ASSERT_OK_AND_ASSIGN(DeviceRange range, b.reserve(bytes));
  SIESTA_ASSERT_OK(b.commit(range));
  this->write_and_verify(range, 71);
  SIESTA_ASSERT_OK(b.zero(range));  // pending at destruction
  const uint64_t held = this->under_test().measured_used_bytes();
  EXPECT_GE(held + slack, before + bytes);
  std::function<uint64_t()> measure = this->under_test().measured_used_bytes;
  this->under_test_.backend = nullptr;
  this->under_test_.owner.reset();  // the reservation is the backend's to release
  // Measured against what was held just before, not against `before`: the test's own host
  // buffers, freed by now, may still count (ASan keeps freed memory in its quarantine).
  EXPECT_LE(measure() + bytes, held + slack + g)
      << "the backend kept memory after it was destroyed";
}

REGISTER_TYPED_TEST_SUITE_P(BackendConformance, ReserveRoundsUpToGranularityAndAligns,
                            DataWrittenAfterCommitReadsBack,
                            TwentyOffloadCyclesKeepAddressesAndData, ZeroZeroesExactlyTheRange,
                            DecommitReturnsTheMemory, DecommitMayCoverSeveralWholeCommits,
                            UnreserveReleasesCommittedMemory,
                            CommitBeyondFreeMemoryFailsWithOutOfMemoryAndLeaksNothing,
                            FailedPartialCommitLeavesTheRangeDecommitted, DoubleCommitIsRejected,
                            DecommitOfUncommittedRangeIsRejected, DecommitOfPartOfACommitIsRejected,
                            CommitOutsideAnyReservationIsRejected, MisalignedRangesAreRejected,
                            CopiesTouchingUncommittedBytesAreRejected,
                            StrayAccessAfterDecommitFaults, FreshMemoryHoldsNothingOfTheOld,
                            DestroyingTheBackendReleasesEverything);

}  // namespace siesta::conformance
