// RamTier against the process's resident memory (/proc/self/statm), not only its own count.
// Not in the concurrency label: ThreadSanitizer's shadow memory (several bytes per byte
// written) is part of the resident set there, and what this test measures is the tier's.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/memory/host_address_space.h"
#include "core/offload/pinned_ram_pool.h"
#include "core/offload/ram_tier.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/small_sim_options.h"
#include "tests/support/spin_until.h"

namespace siesta {
namespace {

constexpr uint64_t kOnePage = 4096;

// The budget bounds the process's memory, not only the tier's count: blocks filled to the
// budget raise the resident set by the budget (not more), the next block is refused, and
// the memory is the system's again once the blocks are gone. Measured, not assumed
// (/proc/self/statm); the slack covers the test's own allocations and, under ASan, its
// shadow memory (an eighth).
TEST(RamTierMemoryTest, ResidentMemoryStaysWithinTheBudgetAndComesBack) {
  constexpr uint64_t kBlock = uint64_t{16} << 20;
  constexpr uint64_t kBudget = 4 * kBlock;
  constexpr uint64_t kSlack = kBudget / 8 + (uint64_t{4} << 20);
  RamTier tier(kBudget);
  SIESTA_ASSERT_OK_AND_ASSIGN(size_t before, host_address_space::resident_bytes());
  std::vector<RamBlock> blocks;
  for (int i = 0; i < 4; ++i) {
    SIESTA_ASSERT_OK_AND_ASSIGN(RamBlock block, tier.allocate(kBlock));
    std::memset(block.data(), 0x5a, block.size());  // every page resident
    blocks.push_back(std::move(block));
  }
  SIESTA_ASSERT_OK_AND_ASSIGN(size_t full, host_address_space::resident_bytes());
  EXPECT_GE(full, before + kBudget - kSlack) << "the blocks' pages are resident";
  EXPECT_LE(full, before + kBudget + kSlack) << "nothing beyond the budget";
  EXPECT_EQ(tier.allocate(kOnePage).status().code(), StatusCode::kOutOfMemory);
  blocks.clear();
  SIESTA_ASSERT_OK_AND_ASSIGN(size_t after, host_address_space::resident_bytes());
  EXPECT_LE(after, before + kSlack) << "the blocks' memory went back to the system";
  EXPECT_EQ(tier.stats().used_bytes, 0u);
}

// The pinned pool (the server's pages where the backend copies to host memory): what its
// copies filled is resident; once they are gone, the chunks beyond its rule's need (room for
// the largest block asked for, plus one spare) are given back to the system, measured.
TEST(RamTierMemoryTest, ThePinnedPoolGivesTheChunksItNoLongerNeedsBackToTheSystem) {
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  constexpr uint64_t kBudget = 16 * kChunk;
  constexpr uint64_t kSlack = kBudget / 8 + (uint64_t{4} << 20);
  std::unique_ptr<SimBackend> sim = SimBackend::create(test_util::small_sim_options()).value();
  RamTier tier(kBudget, PinnedRamPool::create(*sim, kBudget, kChunk).value());
  SIESTA_ASSERT_OK_AND_ASSIGN(size_t before, host_address_space::resident_bytes());
  std::vector<RamBlock> blocks;
  while (blocks.size() < 12) {  // twelve chunks' worth, taken as the pool prepares them
    Result<RamBlock> block = tier.allocate(kChunk);
    if (!block.ok()) {
      ASSERT_TRUE(siesta::testing::spin_until(
          [&] { return tier.stats().ready_bytes >= (blocks.size() + 1) * kChunk; },
          std::chrono::seconds(30)));
      continue;
    }
    std::memset(block->data(), 0x5a, block->size());
    blocks.push_back(std::move(block).value());
  }
  SIESTA_ASSERT_OK_AND_ASSIGN(size_t full, host_address_space::resident_bytes());
  EXPECT_GE(full, before + 12 * kChunk - kSlack) << "the blocks' pages are resident";
  EXPECT_LE(full, before + kBudget + kSlack) << "nothing beyond the budget";
  blocks.clear();
  ASSERT_TRUE(siesta::testing::spin_until([&] { return tier.stats().ready_bytes <= 2 * kChunk; },
                                          std::chrono::seconds(30)));
  // The chunk given back last has its pages dropped just after it stops counting as ready.
  ASSERT_TRUE(siesta::testing::spin_until(
      [&] { return host_address_space::resident_bytes().value() <= before + 2 * kChunk + kSlack; },
      std::chrono::seconds(30)))
      << "resident " << host_address_space::resident_bytes().value() << ", before " << before;
}

}  // namespace
}  // namespace siesta
