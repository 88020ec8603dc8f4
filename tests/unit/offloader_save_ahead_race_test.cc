// Write early, release late, raced (label concurrency, run under ThreadSanitizer): a save ahead
// runs on one thread (the executor's tasks, run by a second thread here) while the command
// thread evicts the session or runs a command on it. Whichever wins each time, the session is
// written exactly once per change of its memory, and every restore returns every byte.
#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;

constexpr int kRounds = 200;

TEST(OffloaderSaveAheadRaceTest, AnEvictionRacingASaveAheadWritesOnceAndRestoresEveryByte) {
  int released_only = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    OffloaderFixture f;
    ASSERT_TRUE(f.command(20 + round % 7).ok());
    ASSERT_TRUE(f.offloader_->save_ahead().ok());
    std::thread executor([&] { f.executor_.run_due(); });
    const Status evicted = f.offloader_->evict();
    executor.join();
    ASSERT_TRUE(evicted.ok()) << evicted.to_string();
    ASSERT_EQ(f.state(), OffloadState::kDisk);
    ASSERT_EQ(f.fs_.counters().of(FsOp::kCreate), 1u) << "the memory was written twice";
    released_only += f.offloader_->status().counters.saves_ahead == 1;
    Result<Offloader::Lease> lease = f.offloader_->acquire();
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
    ASSERT_TRUE(lease->admission().restored);
    ASSERT_EQ(f.target_->length(), 20u + round % 7);
    ASSERT_EQ(f.target_->verify(), "");
  }
  std::printf("%d of %d evictions found the snapshot written ahead and only released\n",
              released_only, kRounds);
}

TEST(OffloaderSaveAheadRaceTest, ACommandRacingASaveAheadNeverLeavesAStaleSnapshot) {
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    OffloaderFixture f;
    ASSERT_TRUE(f.command(10).ok());
    ASSERT_TRUE(f.offloader_->save_ahead().ok());
    std::thread executor([&] { f.executor_.run_due(); });
    Result<Admission> admitted = f.command(5);  // changes the memory, whatever the save did
    executor.join();
    ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
    ASSERT_EQ(f.target_->verify(), "");
    // Released now, the session must come back with the command's bytes, not the older ones.
    ASSERT_TRUE(f.offloader_->evict().ok());
    Result<Offloader::Lease> lease = f.offloader_->acquire();
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
    ASSERT_TRUE(lease->admission().restored);
    ASSERT_EQ(f.target_->length(), 15u);
    ASSERT_EQ(f.target_->verify(), "");
  }
}

}  // namespace
}  // namespace siesta
