// The thread counts and the chunk size cut to the read threads (core/snapshot/snapshot_threads.h);
// ChunkPipeline on a shared ThreadPool (core/snapshot/internal/chunk_pipeline.h): results come
// back in submission order whatever order the jobs finish in, no more of one pipeline's jobs run
// at once than it has sealers, two pipelines share the pool's threads, a pipeline destroyed
// with jobs queued waits for its own running job only, never for another pipeline's, and an
// owner retiring with a sealer of its own runs the jobs the pool has not come for.
#include "core/snapshot/internal/chunk_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/snapshot/snapshot_threads.h"
#include "tests/support/spin_until.h"

namespace siesta {
namespace {

// A sealer that is never asked to seal: the jobs here only use it as their token.
class TokenSealer final : public ChunkSealer {
 public:
  bool encrypts() const override { return false; }
  Status seal(SealDomain, uint64_t, std::span<const uint8_t>, std::span<const uint8_t>,
              std::span<uint8_t>, snapshot::Tag&) override {
    return Internal("not used");
  }
  Status open(SealDomain, uint64_t, std::span<const uint8_t>, std::span<const uint8_t>,
              const snapshot::Tag&, std::span<uint8_t>) override {
    return Internal("not used");
  }
};

std::vector<std::unique_ptr<ChunkSealer>> sealers(size_t count) {
  std::vector<std::unique_ptr<ChunkSealer>> out;
  for (size_t i = 0; i < count; ++i) out.push_back(std::make_unique<TokenSealer>());
  return out;
}

TEST(ChunkPipelineTest, ResultsComeBackInSubmissionOrderAndNoMoreRunThanItsSealers) {
  ThreadPool pool(8);
  ChunkPipeline pipeline(sealers(3), pool);
  EXPECT_EQ(pipeline.threads(), 3u);
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  for (int i = 0; i < 40; ++i) {
    pipeline.submit([&, i](ChunkSealer&) -> Status {
      const int now = running.fetch_add(1) + 1;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      // The first three wait until all three run at once: three sealers, three jobs side by
      // side (a real condition, with a generous deadline).
      if (i < 3 && !siesta::testing::spin_until([&] { return most.load() >= 3; },
                                                std::chrono::seconds(30))) {
        running.fetch_sub(1);
        return Internal("three jobs never ran at once");
      }
      running.fetch_sub(1);
      return i % 7 == 3 ? Corrupt("job " + std::to_string(i)) : Status::Ok();
    });
  }
  for (int i = 0; i < 40; ++i) {
    const Status status = pipeline.retire();
    if (i % 7 == 3) {
      EXPECT_EQ(status.message(), "job " + std::to_string(i));
    } else {
      EXPECT_TRUE(status.ok()) << i << ": " << status.to_string();
    }
  }
  EXPECT_EQ(most.load(), 3) << "one sealer per running job, and all three used";
  EXPECT_EQ(pipeline.pending(), 0u);
}

// Another pipeline holding one of `pool`'s threads with a job that runs until release() (or
// for 30 s at most: a test missing its release fails instead of hanging).
class HeldThread {
 public:
  explicit HeldThread(ThreadPool& pool) : other_(sealers(1), pool) {
    other_.submit([this](ChunkSealer&) {
      started_ = true;
      released_.wait_for(std::chrono::seconds(30));
      return Status::Ok();
    });
  }
  bool wait_started() {
    return siesta::testing::spin_until([&] { return started_.load(); }, std::chrono::seconds(30));
  }
  Status release() {
    release_.set_value();
    return other_.retire();
  }

 private:
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
  std::atomic<bool> started_{false};
  ChunkPipeline other_;  // last: destroyed first, waiting for its job
};

TEST(ChunkPipelineTest, APipelineDestroyedWaitsForItsOwnJobsNotAnothersQueuedAhead) {
  ThreadPool pool(2);
  HeldThread other(pool);
  ASSERT_TRUE(other.wait_started());
  std::atomic<int> ran{0};
  {
    ChunkPipeline mine(sealers(2), pool);
    for (int i = 0; i < 5; ++i) {
      mine.submit([&](ChunkSealer&) {
        ran.fetch_add(1);
        return Status::Ok();
      });
    }
    ASSERT_TRUE(mine.retire().ok());
  }  // destroyed with jobs possibly queued: returns while `other`'s job still runs
  EXPECT_GE(ran.load(), 1);
  EXPECT_TRUE(other.release().ok());
}

// The pool's only thread is held by another pipeline's job: retiring with a sealer of its own,
// the owner runs its jobs itself, in order, with that sealer, instead of waiting for the pool.
TEST(ChunkPipelineTest, TheOwnerRunsJobsThePoolHasNotComeFor) {
  ThreadPool pool(1);
  HeldThread other(pool);  // without the owner's help, its 30 s pass first and the jobs fail
  ASSERT_TRUE(other.wait_started());
  TokenSealer mine_sealer;
  const std::thread::id owner = std::this_thread::get_id();
  std::vector<int> order;
  {
    ChunkPipeline mine(sealers(2), pool);
    for (int i = 0; i < 4; ++i) {
      mine.submit([&, i](ChunkSealer& sealer) -> Status {
        if (std::this_thread::get_id() != owner) return Internal("ran on a pool thread");
        if (&sealer != &mine_sealer) return Internal("ran with a pool sealer");
        order.push_back(i);
        return Status::Ok();
      });
    }
    for (int i = 0; i < 4; ++i) {
      const Status status = mine.retire(&mine_sealer);
      EXPECT_TRUE(status.ok()) << i << ": " << status.to_string();
    }
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(other.release().ok());
}

TEST(SnapshotThreadsTest, ReadsTakeAtLeastAsManyThreadsAsWritesAndAtMostSixteen) {
  const size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(default_snapshot_write_threads(), std::min<size_t>(hardware, 4));
  EXPECT_GE(default_snapshot_read_threads(), default_snapshot_write_threads());
  EXPECT_LE(default_snapshot_read_threads(), 16u);
  EXPECT_LE(default_snapshot_read_threads(), std::max<size_t>(hardware, 4));
  EXPECT_EQ(resolve_snapshot_read_threads(3), 3u);
  EXPECT_EQ(resolve_snapshot_write_threads(100), 64u);
  EXPECT_EQ(resolve_snapshot_read_threads(0), default_snapshot_read_threads());
}

TEST(SnapshotThreadsTest, ChunksAreCutSoEveryReadThreadHasTwoAndNeverPastTheLargest) {
  constexpr uint32_t kLargest = 4u << 20;
  const uint64_t threads = default_snapshot_read_threads();
  for (const uint64_t payload :
       {uint64_t{0}, uint64_t{4096}, uint64_t{9} << 20, uint64_t{33} << 20, uint64_t{1} << 30}) {
    const uint32_t chunk = chunk_bytes_for_readers(payload, kLargest);
    SCOPED_TRACE("payload " + std::to_string(payload) + ", chunk " + std::to_string(chunk));
    EXPECT_EQ(chunk & (chunk - 1), 0u) << "a power of two";
    EXPECT_GE(chunk, kMinSpreadChunkBytes);
    EXPECT_LE(chunk, kLargest);
    if (chunk > kMinSpreadChunkBytes) {
      EXPECT_GE(payload / chunk, 2 * threads) << "each read thread has two chunks at least";
    }
    if (chunk < kLargest) {
      EXPECT_LT(payload / (2 * chunk), 2 * threads) << "a chunk twice as large would still do";
    }
  }
  EXPECT_EQ(chunk_bytes_for_readers(uint64_t{1} << 30, kLargest), kLargest);
  EXPECT_EQ(chunk_bytes_for_readers(1u << 20, kLargest), kMinSpreadChunkBytes);
  EXPECT_EQ(chunk_bytes_for_readers(1u << 30, 64u << 10), 64u << 10) << "never past the largest";
}

}  // namespace
}  // namespace siesta
