// PrefaultAhead: the host pages a read is about to write, made present on a pool thread; a
// stop that never waits for the pool to get to the task.
#include "core/memory/prefault_ahead.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <future>
#include <span>
#include <vector>

#include "core/memory/host_address_space.h"
#include "core/memory/host_vmm.h"
#include "tests/support/backend_test_util.h"

namespace siesta {
namespace {

constexpr size_t kPrefaultTestKiB = 1024;

// Per page of `bytes` at `data` (page-aligned): whether it is in memory now (mincore).
std::vector<bool> present_pages(const std::byte* data, size_t bytes) {
  const size_t page = host_address_space::page_size();
  std::vector<unsigned char> vec((bytes + page - 1) / page);
  EXPECT_EQ(::mincore(const_cast<std::byte*>(data), bytes, vec.data()), 0);
  std::vector<bool> out;
  out.reserve(vec.size());
  for (const unsigned char v : vec) out.push_back((v & 1) != 0);
  return out;
}

size_t count_present(const std::vector<bool>& pages, size_t first, size_t end) {
  size_t n = 0;
  for (size_t i = first; i < end; ++i) n += pages[i] ? 1 : 0;
  return n;
}

TEST(PrefaultAheadTest, MakesThePagesOfEveryExtentPresentAndNoOther) {
  HostVmm vmm;
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange range, vmm.reserve(2048 * kPrefaultTestKiB));
  SIESTA_ASSERT_OK(range.commit());
  const size_t page = host_address_space::page_size();
  const size_t pages = range.size() / page;
  ASSERT_EQ(count_present(present_pages(range.data(), range.size()), 0, pages), 0u)
      << "fresh pages are present before anything touched them";
  // Two extents with a gap between them: [0, 512 KiB) and [1024 KiB, 2048 KiB).
  ThreadPool pool(2);
  {
    PrefaultAhead prefault(pool,
                           {{range.data(), 512 * kPrefaultTestKiB},
                            {range.data() + 1024 * kPrefaultTestKiB, 1024 * kPrefaultTestKiB}},
                           PrefaultAhead::kPieceBytes);
    ASSERT_TRUE(prefault.posted());
    prefault.wait();
  }
  const std::vector<bool> present = present_pages(range.data(), range.size());
  const size_t first_end = 512 * kPrefaultTestKiB / page;
  const size_t gap_end = 1024 * kPrefaultTestKiB / page;
  EXPECT_EQ(count_present(present, 0, first_end), first_end) << "the first extent";
  EXPECT_EQ(count_present(present, first_end, gap_end), 0u) << "the gap between the extents";
  EXPECT_EQ(count_present(present, gap_end, pages), pages - gap_end) << "the second extent";
  // Present and zero: the pages are the commit's fresh ones, now mapped.
  EXPECT_EQ(range.data()[0], std::byte{0});
  EXPECT_EQ(range.data()[range.size() - 1], std::byte{0});
}

TEST(PrefaultAheadTest, PostsNothingBelowItsThreshold) {
  HostVmm vmm;
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange range, vmm.reserve(128 * kPrefaultTestKiB));
  SIESTA_ASSERT_OK(range.commit());
  ThreadPool pool(1);
  {
    PrefaultAhead prefault(pool, {{range.data(), range.size()}}, PrefaultAhead::kPieceBytes);
    EXPECT_FALSE(prefault.posted());
    prefault.wait();  // returns at once
  }
  const std::vector<bool> present = present_pages(range.data(), range.size());
  EXPECT_EQ(count_present(present, 0, present.size()), 0u);
}

TEST(PrefaultAheadTest, AStopBeforeThePoolGetsToItTouchesNothingAndDoesNotWait) {
  HostVmm vmm;
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange range, vmm.reserve(1024 * kPrefaultTestKiB));
  SIESTA_ASSERT_OK(range.commit());
  std::promise<void> unblock;
  {
    ThreadPool pool(1);
    // The pool's only thread waits until the PrefaultAhead is gone: were the destructor to
    // wait for its task to run, this test would never end.
    pool.post([gate = unblock.get_future().share()] { gate.wait(); });
    {
      PrefaultAhead prefault(pool, {{range.data(), range.size()}}, PrefaultAhead::kPieceBytes);
      ASSERT_TRUE(prefault.posted());
    }
    unblock.set_value();
  }  // the pool runs its queue (the stopped task) and joins
  const std::vector<bool> present = present_pages(range.data(), range.size());
  EXPECT_EQ(count_present(present, 0, present.size()), 0u)
      << "a task stopped before it started touched the range";
}

TEST(PrefaultAheadTest, WritesBesideItKeepTheirBytes) {
  // The read's workers write into the extents while the task makes them present: every write
  // stays (a page made present after it was written would be a fresh, zero one).
  HostVmm vmm;
  SIESTA_ASSERT_OK_AND_ASSIGN(HostRange range, vmm.reserve(4096 * kPrefaultTestKiB));
  SIESTA_ASSERT_OK(range.commit());
  const std::vector<std::byte> pattern = test_util::make_pattern(range.size(), 7);
  ThreadPool pool(4);
  {
    PrefaultAhead prefault(pool, {{range.data(), range.size()}}, PrefaultAhead::kPieceBytes);
    std::vector<std::future<void>> writers;
    constexpr size_t kWriters = 3;
    const size_t share = range.size() / kWriters / 4096 * 4096;
    for (size_t w = 0; w < kWriters; ++w) {
      const size_t begin = w * share;
      const size_t end = w + 1 == kWriters ? range.size() : begin + share;
      writers.push_back(std::async(std::launch::async, [&, begin, end] {
        std::copy(pattern.begin() + static_cast<std::ptrdiff_t>(begin),
                  pattern.begin() + static_cast<std::ptrdiff_t>(end), range.data() + begin);
      }));
    }
    for (std::future<void>& writer : writers) writer.get();
  }
  EXPECT_TRUE(std::equal(pattern.begin(), pattern.end(), range.data()));
}

}  // namespace
}  // namespace siesta
