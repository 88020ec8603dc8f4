// PinnedRamPool (core/offload/pinned_ram_pool.h): the RAM tier's pages pinned ahead, in
// chunks, by a thread of its own. On the simulator, whose register_host() records each
// registration as CUDA's would (overlaps refused), behind a wrapper that counts them and can
// refuse them. What is checked: the first chunk is ready at once; a block larger than what is
// ready is refused and prepared for in the background, and one expected is prepared ahead; blocks
// are contiguous, come from registered chunks only, and their copies never cross a chunk; freed
// runs merge; chunks beyond the rule's need are unregistered and given back; a refused registration
// leaves the pool smaller and serving; many threads at once (TSan).
#include "core/offload/pinned_ram_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/base/mutex.h"
#include "core/memory/memory_backend_wrapper.h"
#include "tests/support/small_sim_options.h"
#include "tests/support/spin_until.h"

namespace siesta {
namespace {

constexpr uint64_t kChunk = 64 << 10;  // small chunks: many of them in a test

// Counts registrations (and refuses them on demand), forwarding to the simulator, which
// refuses overlapping ones as CUDA does.
class CountingRegistrations final : public MemoryBackendWrapper {
 public:
  explicit CountingRegistrations(MemoryBackend& inner) : MemoryBackendWrapper(inner) {}
  Status register_host(std::span<std::byte> memory) override {
    if (refuse.load()) return OutOfMemory("injected: register_host refused");
    Status done = MemoryBackendWrapper::register_host(memory);
    if (done.ok()) {
      MutexLock lock(mu_);
      live_.insert(memory.data());
    }
    return done;
  }
  void unregister_host(std::byte* data) override {
    MemoryBackendWrapper::unregister_host(data);
    MutexLock lock(mu_);
    live_.erase(data);
  }
  size_t live() const {
    MutexLock lock(mu_);
    return live_.size();
  }
  std::atomic<bool> refuse{false};

 private:
  mutable Mutex mu_;
  std::set<std::byte*> live_ SIESTA_GUARDED_BY(mu_);
};

struct PoolRig {
  explicit PoolRig(uint64_t budget, bool refuse_first = false)
      : sim(SimBackend::create(test_util::small_sim_options()).value()), counting(*sim) {
    counting.refuse = refuse_first;
    pool = PinnedRamPool::create(counting, budget, kChunk).value();
  }
  // Waits (a real condition, polled) until `bytes` are prepared.
  bool ready(uint64_t bytes) {
    return siesta::testing::spin_until([&] { return pool->ready_bytes() >= bytes; },
                                       std::chrono::seconds(30));
  }
  std::unique_ptr<SimBackend> sim;
  CountingRegistrations counting;
  std::unique_ptr<PinnedRamPool> pool;
};

TEST(PinnedRamPoolTest, TheFirstChunkIsReadyAtOnceAndBlocksComeFromIt) {
  PoolRig rig(16 * kChunk);
  EXPECT_GE(rig.pool->ready_bytes(), kChunk);
  EXPECT_GE(rig.counting.live(), 1u);
  Result<std::byte*> a = rig.pool->map(4096);
  Result<std::byte*> b = rig.pool->map(8192);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*b, *a + 4096) << "first fit, page granularity";
  std::memset(*a, 0x5a, 4096);  // usable memory
  EXPECT_EQ(rig.pool->contiguous_bytes(*a), kChunk);
  EXPECT_EQ(rig.pool->contiguous_bytes(*b + 100), kChunk - 4096 - 100);
  EXPECT_EQ(rig.pool->stats().used_bytes, 3 * 4096u);
  rig.pool->unmap(*a, 4096);
  rig.pool->unmap(*b, 8192);
  EXPECT_EQ(rig.pool->stats().used_bytes, 0u);
}

TEST(PinnedRamPoolTest, ABlockLargerThanWhatIsReadyIsRefusedThenPreparedFor) {
  PoolRig rig(16 * kChunk);
  Result<std::byte*> big = rig.pool->map(5 * kChunk);
  if (!big.ok()) {
    EXPECT_EQ(big.status().code(), StatusCode::kOutOfMemory);
    EXPECT_GE(rig.pool->stats().refused_not_ready, 1u);
    ASSERT_TRUE(rig.ready(5 * kChunk)) << "the pool grows to hold the block asked for";
    big = rig.pool->map(5 * kChunk);
  }
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  // Every chunk under the block is registered on its own: a copy stops at each boundary.
  EXPECT_GE(rig.counting.live(), 5u);
  EXPECT_EQ(rig.pool->contiguous_bytes(*big + kChunk - 1), 1u);
  std::memset(*big, 1, 5 * kChunk);
  rig.pool->unmap(*big, 5 * kChunk);
}

// What a session announces when its command ends (expect) is prepared before its save asks:
// the save finds the room ready and is not refused. Never more than the budget.
TEST(PinnedRamPoolTest, AnExpectedBlockIsPreparedBeforeItIsAskedFor) {
  PoolRig rig(16 * kChunk);
  rig.pool->expect(5 * kChunk + 1);  // six chunks' room, the last one in part
  ASSERT_TRUE(rig.ready(6 * kChunk)) << "the pool prepares the expected block ahead";
  Result<std::byte*> big = rig.pool->map(5 * kChunk + 1);
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  EXPECT_EQ(rig.pool->stats().refused_not_ready, 0u) << "the save found its room ready";
  rig.pool->unmap(*big, 5 * kChunk + 1);

  rig.pool->expect(100 * kChunk);  // beyond the budget: the whole budget at most
  ASSERT_TRUE(rig.ready(16 * kChunk));
  EXPECT_EQ(rig.pool->ready_bytes(), 16 * kChunk);
}

TEST(PinnedRamPoolTest, FreedRunsMergeSoALargerBlockFitsWhereSmallerOnesWere) {
  PoolRig rig(4 * kChunk);
  const uint64_t quarter = kChunk / 4;
  std::vector<std::byte*> blocks;
  for (int i = 0; i < 4; ++i) {
    Result<std::byte*> block = rig.pool->map(quarter);
    ASSERT_TRUE(block.ok());
    blocks.push_back(*block);
  }
  rig.pool->unmap(blocks[1], quarter);
  rig.pool->unmap(blocks[0], quarter);
  rig.pool->unmap(blocks[2], quarter);
  Result<std::byte*> merged = rig.pool->map(3 * quarter);
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(*merged, blocks[0]) << "the three freed quarters are one run again";
  rig.pool->unmap(*merged, 3 * quarter);
  rig.pool->unmap(blocks[3], quarter);
}

TEST(PinnedRamPoolTest, ChunksBeyondWhatIsWantedAreGivenBack) {
  PoolRig rig(16 * kChunk);
  // Eight blocks of one chunk each, taken as the pool prepares them.
  std::vector<std::byte*> blocks;
  for (int i = 0; i < 8; ++i) {
    Result<std::byte*> block = rig.pool->map(kChunk);
    for (int attempt = 0; !block.ok() && attempt < 2; ++attempt) {
      ASSERT_TRUE(rig.ready(static_cast<uint64_t>(i + 1) * kChunk));
      block = rig.pool->map(kChunk);
    }
    ASSERT_TRUE(block.ok()) << block.status().to_string();
    blocks.push_back(*block);
  }
  const size_t at_peak = rig.counting.live();
  EXPECT_GE(at_peak, 8u);
  for (std::byte* block : blocks) rig.pool->unmap(block, kChunk);
  // Wanted now: room for the largest block asked for (one chunk), plus one spare.
  // (Each chunk is unregistered just after it stops counting as ready.)
  ASSERT_TRUE(siesta::testing::spin_until(
      [&] {
        const uint64_t ready = rig.pool->ready_bytes();
        return ready <= 2 * kChunk && rig.counting.live() == ready / kChunk;
      },
      std::chrono::seconds(30)))
      << "ready " << rig.pool->ready_bytes() << ", registered " << rig.counting.live();
  EXPECT_GE(rig.pool->stats().chunks_given_back, at_peak - 2);
  // And it serves again from what it kept.
  Result<std::byte*> again = rig.pool->map(kChunk);
  ASSERT_TRUE(again.ok());
  rig.pool->unmap(*again, kChunk);
}

TEST(PinnedRamPoolTest, ARefusedRegistrationLeavesThePoolSmallerAndServing) {
  std::printf("fault: register_host refused from the second chunk on\n");
  PoolRig rig(16 * kChunk);
  rig.counting.refuse = true;
  Result<std::byte*> big = rig.pool->map(3 * kChunk);  // asks for more: its registration fails
  EXPECT_FALSE(big.ok());
  ASSERT_TRUE(siesta::testing::spin_until([&] { return rig.pool->stats().register_failures > 0; },
                                          std::chrono::seconds(30)));
  EXPECT_EQ(rig.pool->ready_bytes(), kChunk) << "growth stopped at what was prepared";
  Result<std::byte*> small = rig.pool->map(4096);
  ASSERT_TRUE(small.ok()) << "the first chunk still serves";
  rig.pool->unmap(*small, 4096);
}

TEST(PinnedRamPoolTest, NothingReadyWhenEvenTheFirstChunkIsRefused) {
  std::printf("fault: register_host refused from the first chunk on\n");
  PoolRig rig(4 * kChunk, /*refuse_first=*/true);
  EXPECT_EQ(rig.pool->ready_bytes(), 0u);
  EXPECT_EQ(rig.pool->stats().register_failures, 1u);
  EXPECT_EQ(rig.pool->map(4096).status().code(), StatusCode::kOutOfMemory);
}

TEST(PinnedRamPoolTest, ABudgetSmallerThanAChunkPinsOnlyTheBudget) {
  PoolRig rig(3 * 4096);
  EXPECT_EQ(rig.pool->stats().reserved_bytes, 3 * 4096u);
  EXPECT_EQ(rig.pool->ready_bytes(), 3 * 4096u);
  EXPECT_EQ(rig.pool->chunk_bytes(), 3 * 4096u);
}

TEST(PinnedRamPoolTest, NeverMoreThanTheBudgetIsPreparedWhenItIsNoWholeNumberOfChunks) {
  PoolRig rig(2 * kChunk + 3 * 4096);
  Result<std::byte*> all = rig.pool->map(2 * kChunk + 3 * 4096);
  if (!all.ok()) {
    ASSERT_TRUE(rig.ready(2 * kChunk + 3 * 4096));
    all = rig.pool->map(2 * kChunk + 3 * 4096);
  }
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(rig.pool->ready_bytes(), 2 * kChunk + 3 * 4096) << "the last chunk is shorter";
  EXPECT_EQ(rig.pool->contiguous_bytes(*all + 2 * kChunk), 3 * 4096u) << "to the range's end";
  EXPECT_FALSE(rig.pool->map(4096).ok()) << "nothing beyond the budget";
  rig.pool->unmap(*all, 2 * kChunk + 3 * 4096);
}

TEST(PinnedRamPoolTest, BadShapesAreRefused) {
  std::unique_ptr<SimBackend> sim = SimBackend::create(test_util::small_sim_options()).value();
  EXPECT_EQ(PinnedRamPool::create(*sim, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PinnedRamPool::create(*sim, kChunk, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PinnedRamPool::create(*sim, kChunk, 1000).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(PinnedRamPoolTest, ThreadsTakingAndGivingBlocksWhileThePoolGrowsAndShrinks) {
  PoolRig rig(32 * kChunk);
  std::atomic<uint64_t> served{0};
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const uint64_t bytes = 4096 * static_cast<uint64_t>(1 + (i * 7 + t) % 40);
        // Sessions announce their next saves while others take and give blocks.
        if (i % 10 == t) rig.pool->expect(bytes * (1 + static_cast<uint64_t>(i) / 20));
        Result<std::byte*> block = rig.pool->map(bytes);
        if (!block.ok()) continue;  // not ready yet: a save would go to disk
        std::memset(*block, t, bytes);
        EXPECT_EQ(static_cast<int>((*block)[bytes - 1]), t);
        rig.pool->unmap(*block, bytes);
        ++served;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_GT(served.load(), 0u);
  EXPECT_EQ(rig.pool->stats().used_bytes, 0u);
}

}  // namespace
}  // namespace siesta
