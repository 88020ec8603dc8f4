// The MemoryBackend conformance suite, staging ring and copies: the ring lends at most its
// buffers, copies of any size land where they should, many in flight complete in order, a copy
// sees other device work only once ordered after it, and threads may share the backend.
// Instantiated beside BackendConformance (backend_conformance.h), with the same Traits:
//   INSTANTIATE_TYPED_TEST_SUITE_P(MyCopies, BackendCopyConformance, MyTypes);
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/memory/memory_backend.h"
#include "tests/support/backend_conformance_fixture.h"
#include "tests/support/backend_test_util.h"

namespace siesta::conformance {

template <class Traits>
class BackendCopyConformance : public ConformanceFixture<Traits> {};

TYPED_TEST_SUITE_P(BackendCopyConformance);

TYPED_TEST_P(BackendCopyConformance, StagingRingLendsAtMostCountBuffers) {
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

// Two sessions' pipelines share the ring (a background save beside a restore): one that holds
// no buffer waits for the other to give one back, instead of failing.
TYPED_TEST_P(BackendCopyConformance, AWaitingAcquireGetsTheBufferAnotherThreadGivesBack) {
  MemoryBackend& b = this->backend();
  std::vector<StagingBuffer> held;
  for (size_t i = 0; i < b.staging_buffer_count(); ++i) {
    SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer buffer, b.acquire_staging());
    held.push_back(std::move(buffer));
  }
  SIESTA_EXPECT_CODE(b.acquire_staging_waiting(std::chrono::milliseconds(1)),
                     StatusCode::kFailedPrecondition);
  Result<StagingBuffer> waited = FailedPrecondition("not run");
  std::thread waiter([&] { waited = b.acquire_staging_waiting(std::chrono::seconds(60)); });
  const uint32_t returned = held.back().slot();
  held.back().reset();  // whether the waiter is waiting yet or not, it gets this one
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status().to_string();
  EXPECT_EQ(waited->slot(), returned);
}

TYPED_TEST_P(BackendCopyConformance, CopiesOfSizesNotMultipleOfTheBufferSize) {
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

TYPED_TEST_P(BackendCopyConformance, ManyCopiesInFlightCompleteInOrder) {
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

// ---- Copies and device work ------------------------------------------------------------------

// The copy stream is not ordered with other device work (a kernel on its own stream): only
// synchronize() makes a staging copy see what such work wrote. Where the backend runs
// unordered work late (the simulator), a copy not ordered after it sees the bytes from
// before it every time.
TYPED_TEST_P(BackendCopyConformance, CopiesSeeOtherDeviceWorkOnlyOnceOrderedAfterIt) {
  const BackendUnderTest& under_test = this->under_test();
  if (!under_test.fill_on_another_stream) {
    GTEST_SKIP() << "this rig cannot run device work outside the backend";
  }
  MemoryBackend& b = this->backend();
  const size_t g = this->g();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange r, ReservedRange::reserve(b, g));
  SIESTA_ASSERT_OK(b.commit(r.range()));
  this->write_and_verify(r.range(), 501);
  SIESTA_ASSERT_OK(b.synchronize());
  SIESTA_ASSERT_OK(under_test.fill_on_another_stream(r.range(), std::byte{0x3c}));
  if (under_test.unordered_work_runs_late) {
    this->expect_contents(r.range(), 501);  // the copy was not ordered after the fill
  }
  SIESTA_ASSERT_OK(b.synchronize());
  SIESTA_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> got,
                              test_util::read_device(b, r.range().base, g));
  for (size_t i = 0; i < g; ++i) ASSERT_EQ(got[i], std::byte{0x3c}) << "byte " << i;
  SIESTA_EXPECT_OK(b.decommit(r.range()));
}

// Several threads, each cycling its own range (commit, write through the ring, read back,
// decommit) at once: the backend's bookkeeping, ring and streams are safe to share.
TYPED_TEST_P(BackendCopyConformance, ThreadsCycleTheirOwnRangesConcurrently) {
  MemoryBackend& b = this->backend();
  const size_t buffer_bytes = b.staging_buffer_bytes();
  const size_t per_thread = test_util::round_up(3 * buffer_bytes, this->g());
  const int threads_count = static_cast<int>(std::min<size_t>(4, b.staging_buffer_count()));
  std::vector<Status> results(threads_count);
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_count; ++t) {
    threads.emplace_back([&, t] {
      results[t] = [&]() -> Status {
        SIESTA_ASSIGN_OR_RETURN(ReservedRange owned, ReservedRange::reserve(b, per_thread));
        const DeviceRange range = owned.range();
        for (uint64_t cycle = 0; cycle < 10; ++cycle) {
          SIESTA_RETURN_IF_ERROR(b.commit(range));
          const std::vector<std::byte> want =
              test_util::make_pattern(range.size, uint64_t{1000} * t + cycle);
          // One buffer per thread at a time, so the threads never run the ring dry.
          for (size_t off = 0; off < range.size; off += buffer_bytes) {
            const size_t n = std::min(buffer_bytes, range.size - off);
            SIESTA_ASSIGN_OR_RETURN(StagingBuffer buffer, b.acquire_staging());
            std::copy_n(want.begin() + static_cast<ptrdiff_t>(off), n, buffer.bytes().begin());
            SIESTA_ASSIGN_OR_RETURN(CopyTicket ticket,
                                    b.copy_from_staging(buffer, n, range.base + off));
            SIESTA_RETURN_IF_ERROR(b.wait(ticket));
          }
          std::vector<std::byte> got(range.size);
          for (size_t off = 0; off < range.size; off += buffer_bytes) {
            const size_t n = std::min(buffer_bytes, range.size - off);
            SIESTA_ASSIGN_OR_RETURN(StagingBuffer buffer, b.acquire_staging());
            SIESTA_ASSIGN_OR_RETURN(CopyTicket ticket,
                                    b.copy_to_staging(range.base + off, n, buffer));
            SIESTA_RETURN_IF_ERROR(b.wait(ticket));
            std::copy_n(buffer.bytes().begin(), n, got.begin() + static_cast<ptrdiff_t>(off));
          }
          if (test_util::first_difference(got, want) != -1) {
            return Internal("thread " + std::to_string(t) + " cycle " + std::to_string(cycle) +
                            ": bytes differ");
          }
          SIESTA_RETURN_IF_ERROR(b.decommit(range));
        }
        return Status::Ok();
      }();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Status& result : results) SIESTA_EXPECT_OK(result);
}

REGISTER_TYPED_TEST_SUITE_P(BackendCopyConformance, StagingRingLendsAtMostCountBuffers,
                            AWaitingAcquireGetsTheBufferAnotherThreadGivesBack,
                            CopiesOfSizesNotMultipleOfTheBufferSize,
                            ManyCopiesInFlightCompleteInOrder,
                            CopiesSeeOtherDeviceWorkOnlyOnceOrderedAfterIt,
                            ThreadsCycleTheirOwnRangesConcurrently);

}  // namespace siesta::conformance
