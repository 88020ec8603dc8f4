// The MemoryBackend conformance suite: one set of tests that every backend (sim,
// faulty-over-sim, CUDA where a GPU exists) must pass, so that the simulator the offload
// logic is tested on is held to the same contract as the real device (DESIGN.md).
//
// To run it on a backend, define a Traits type with `static BackendUnderTest make();` and
// instantiate, in one .cc file:
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
#include <string>
#include <vector>

#include "core/memory/memory_backend.h"
#include "tests/support/backend_test_util.h"

namespace siesta::conformance {

struct BackendUnderTest {
  std::unique_ptr<MemoryBackend> owner;  // keeps everything alive (may own an inner backend)
  MemoryBackend* backend = nullptr;      // what the suite tests; null => GTEST_SKIP()
  std::string skip_reason;
  // Memory the backend really holds, measured from outside it: process RSS for the
  // simulator, device total - free (cuMemGetInfo) for CUDA.
  std::function<uint64_t()> measured_used_bytes;
  // How far that measurement may move for reasons other than the backend, beyond one
  // granule: process RSS also counts pages other threads touch meanwhile (the allocator,
  // and AddressSanitizer's shadow), so the simulator allows a few; cuMemGetInfo is exact.
  uint64_t measurement_slack_bytes = 0;
  // Arms the backend's CommitFaultHook so that the next commit fails at kSetAccess of chunk
  // `chunk_index` (empty if not supported).
  std::function<void(size_t chunk_index)> fail_next_commit_at_set_access;
  bool stray_access_faults_in_process = false;  // sim: a death test proves it
  size_t max_chunk_bytes = 0;                   // so the suite can make multi-chunk commits
};

template <class Traits>
class BackendConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    under_test_ = Traits::make();
    if (under_test_.backend == nullptr) GTEST_SKIP() << under_test_.skip_reason;
  }

  MemoryBackend& backend() { return *under_test_.backend; }
  size_t g() { return backend().granularity(); }
  // What a measured release may fall short by: one granule plus the rig's noise.
  uint64_t slack() { return g() + under_test().measurement_slack_bytes; }
  const BackendUnderTest& under_test() const { return under_test_; }

  // A commit of several chunks when the backend says how large a chunk is, capped so that
  // copying it many times stays quick; else `fallback` bytes.
  size_t multi_chunk_bytes(size_t fallback) {
    const size_t chunk = under_test_.max_chunk_bytes;
    if (chunk != 0 && 2 * chunk + g() <= (64u << 20)) return 2 * chunk + g();
    return test_util::round_up(fallback, g());
  }

  // Checks the figures that a refused call must leave alone.
  void expect_same_accounting(const MemoryStats& before) {
    const MemoryStats now = backend().stats();
    EXPECT_EQ(now.reserved_bytes, before.reserved_bytes);
    EXPECT_EQ(now.committed_bytes, before.committed_bytes);
  }

  // Writes pattern `seed` over `range` and checks it reads back.
  void write_and_verify(DeviceRange range, uint64_t seed) {
    const std::vector<std::byte> pattern = test_util::make_pattern(range.size, seed);
    SIESTA_ASSERT_OK(test_util::write_device(backend(), range.base, pattern));
    SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> got,
                                test_util::read_device(backend(), range.base, range.size));
    ASSERT_EQ(test_util::first_difference(got, pattern), -1) << "seed " << seed;
  }

  void expect_contents(DeviceRange range, uint64_t seed) {
    SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> got,
                                test_util::read_device(backend(), range.base, range.size));
    EXPECT_EQ(test_util::first_difference(got, test_util::make_pattern(range.size, seed)), -1)
        << "seed " << seed;
  }

  BackendUnderTest under_test_;
};

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

// ANCHORS bug 7 ("the second wake breaks"): the full offload cycle, many times, at the same
// addresses: write, save to host, decommit, commit the very same range, restore, check.
TYPED_TEST_P(BackendConformance, TwentyOffloadCyclesKeepAddressesAndData) {
  MemoryBackend& b = this->backend();
  const size_t bytes = this->multi_chunk_bytes(2u << 20);
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, bytes));
  const DeviceRange range = r.range();
  const MemoryStats reserved = b.stats();
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
    SIESTA_ASSERT_OK(b.commit(range));  // the same addresses, no new reservation
    EXPECT_EQ(b.stats().committed_bytes, reserved.committed_bytes + bytes);
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
  SIESTA_ASSERT_OK(b.commit(first));
  SIESTA_ASSERT_OK(b.commit(second));
  this->write_and_verify(first, 11);  // touch every page, so they are really resident
  this->write_and_verify(second, 12);
  ASSERT_EQ(b.stats().committed_bytes, committed_before + 2 * bytes);

  const uint64_t used_before = this->under_test().measured_used_bytes();
  SIESTA_ASSERT_OK(b.decommit(first));
  const uint64_t used_after = this->under_test().measured_used_bytes();
  // Exactly the range, as the backend accounts it (ANCHORS bug 6: report what was freed).
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

TYPED_TEST_P(BackendConformance, FailedPartialCommitLeavesTheRangeDecommitted) {
  if (!this->under_test().fail_next_commit_at_set_access) {
    GTEST_SKIP() << "this backend has no commit fault hook";
  }
  if (this->under_test().max_chunk_bytes == 0) {
    GTEST_SKIP() << "this backend does not say its chunk size";
  }
  MemoryBackend& b = this->backend();
  const size_t bytes = 3 * this->under_test().max_chunk_bytes;  // three chunks
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, bytes));
  const MemoryStats before = b.stats();
  std::cout << "injecting: set-access failure on chunk 1 of a 3-chunk commit\n";
  this->under_test().fail_next_commit_at_set_access(1);
  const Status failed = b.commit(r.range());
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("injected"), std::string::npos) << failed.to_string();
  this->expect_same_accounting(before);
  // Chunk 0 was fully mapped before the failure: it must be gone too.
  SIESTA_EXPECT_CODE(b.decommit(r.range().subrange(0, this->g())), StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(b.zero(r.range().subrange(0, 1)), StatusCode::kFailedPrecondition);
  if (this->under_test().stray_access_faults_in_process) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    auto* chunk0 = reinterpret_cast<volatile unsigned char*>(r.range().base);
    EXPECT_DEATH(chunk0[0] = 1, "") << "chunk 0 is still mapped after the rollback";
  }
  // And the whole range is committable again.
  SIESTA_ASSERT_OK(b.commit(r.range()));
  this->write_and_verify(r.range(), 51);
  SIESTA_EXPECT_OK(b.decommit(r.range()));
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

// ---- The staging ring and copies ---------------------------------------------------------------

TYPED_TEST_P(BackendConformance, StagingRingLendsAtMostCountBuffers) {
  MemoryBackend& b = this->backend();
  const size_t count = b.staging_buffer_count();
  ASSERT_GE(count, 1u);
  ASSERT_GT(b.staging_buffer_bytes(), 0u);
  std::vector<StagingBuffer> held;
  for (size_t i = 0; i < count; ++i) {
    SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer buffer, b.acquire_staging());
    EXPECT_TRUE(buffer.valid());
    EXPECT_EQ(buffer.bytes().size(), b.staging_buffer_bytes());
    for (const StagingBuffer& other : held) {
      EXPECT_NE(other.slot(), buffer.slot());
      EXPECT_NE(other.bytes().data(), buffer.bytes().data());
    }
    held.push_back(std::move(buffer));
  }
  SIESTA_EXPECT_CODE(b.acquire_staging(), StatusCode::kFailedPrecondition);
  const uint32_t returned = held.front().slot();
  held.front().reset();
  SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer again, b.acquire_staging());
  EXPECT_EQ(again.slot(), returned);
  SIESTA_EXPECT_CODE(b.acquire_staging(), StatusCode::kFailedPrecondition);
}

TYPED_TEST_P(BackendConformance, CopiesOfSizesNotMultipleOfTheBufferSize) {
  MemoryBackend& b = this->backend();
  const size_t buffer = b.staging_buffer_bytes();
  const size_t sizes[] = {1, 7, buffer - 1, buffer + 1, 3 * buffer + 17};
  const size_t largest = 3 * buffer + 17 + 13;
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, largest));
  SIESTA_ASSERT_OK(b.commit(r.range()));
  uint64_t seed = 200;
  for (size_t size : sizes) {
    for (size_t offset : {size_t{0}, size_t{13}}) {
      SCOPED_TRACE("size " + std::to_string(size) + " at offset " + std::to_string(offset));
      const std::vector<std::byte> pattern = test_util::make_pattern(size, ++seed);
      SIESTA_ASSERT_OK(test_util::write_device(b, r.range().base + offset, pattern));
      SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> got,
                                  test_util::read_device(b, r.range().base + offset, size));
      ASSERT_EQ(test_util::first_difference(got, pattern), -1);
    }
  }
  SIESTA_EXPECT_OK(b.decommit(r.range()));
}

TYPED_TEST_P(BackendConformance, ManyCopiesInFlightCompleteInOrder) {
  MemoryBackend& b = this->backend();
  const size_t count = b.staging_buffer_count();
  const size_t n = b.staging_buffer_bytes();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, (count + 1) * n));
  SIESTA_ASSERT_OK(b.commit(r.range()));
  const DeviceAddress target = r.range().base;

  // Every buffer writes its own pattern to the same place; waiting for only the last ticket
  // must find every copy done, in submission order, so the last pattern wins.
  std::vector<StagingBuffer> buffers;
  std::vector<CopyTicket> tickets;
  for (size_t i = 0; i < count; ++i) {
    SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer buffer, b.acquire_staging());
    const std::vector<std::byte> pattern = test_util::make_pattern(n, 300 + i);
    std::copy(pattern.begin(), pattern.end(), buffer.bytes().begin());
    SIESTA_ASSERT_OK_AND_ASSIGN(CopyTicket ticket, b.copy_from_staging(buffer, n, target));
    if (!tickets.empty()) {
      EXPECT_GT(ticket.sequence, tickets.back().sequence);
    }
    tickets.push_back(ticket);
    buffers.push_back(std::move(buffer));
  }
  SIESTA_ASSERT_OK(b.wait(tickets.back()));
  for (CopyTicket ticket : tickets) SIESTA_EXPECT_OK(b.wait(ticket));  // earlier ones are done
  buffers.clear();  // reading back below needs the ring
  this->expect_contents({target, n}, 300 + count - 1);

  // Now the other way: distinct sources into every buffer, one wait for them all.
  for (size_t i = 0; i < count; ++i) {
    const std::vector<std::byte> pattern = test_util::make_pattern(n, 400 + i);
    SIESTA_ASSERT_OK(test_util::write_device(b, target + (i + 1) * n, pattern));
  }
  for (size_t i = 0; i < count; ++i) {
    SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer buffer, b.acquire_staging());
    buffers.push_back(std::move(buffer));
  }
  tickets.clear();
  for (size_t i = 0; i < count; ++i) {
    SIESTA_ASSERT_OK_AND_ASSIGN(CopyTicket ticket,
                                b.copy_to_staging(target + (i + 1) * n, n, buffers[i]));
    tickets.push_back(ticket);
  }
  SIESTA_ASSERT_OK(b.wait(tickets.back()));
  for (size_t i = 0; i < count; ++i) {
    const std::vector<std::byte> pattern = test_util::make_pattern(n, 400 + i);
    EXPECT_EQ(test_util::first_difference(buffers[i].bytes(), pattern), -1) << "buffer " << i;
  }
  buffers.clear();
  SIESTA_EXPECT_OK(b.synchronize());
  SIESTA_EXPECT_OK(b.decommit(r.range()));
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
                            StrayAccessAfterDecommitFaults, StagingRingLendsAtMostCountBuffers,
                            CopiesOfSizesNotMultipleOfTheBufferSize,
                            ManyCopiesInFlightCompleteInOrder);

}  // namespace siesta::conformance
