// Write early, release late (Offloader::save_ahead()): the snapshot is written while the
// session keeps its memory, a later release (eviction, idle deadline) costs no second write,
// and a command that uses the memory first retires the file, so that no restore can ever read
// bytes older than the session's. On the simulator with a ManualClock and a ManualExecutor.
#include <gtest/gtest.h>

#include <string>

#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;

// The file system calls that create a snapshot file: one per save written.
uint64_t files_created(const OffloaderFixture& f) { return f.fs_.counters().of(FsOp::kCreate); }

TEST(OffloaderSaveAheadTest, WritesTheSnapshotAndKeepsTheMemory) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(12).ok());
  const uint64_t committed = f.sim_->stats().committed_bytes;
  const uint64_t host_committed = f.host_.stats().committed_bytes;
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  f.executor_.run_due();  // no time passes: the save is due at once, not at the idle deadline
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kResident);
  EXPECT_TRUE(f.snapshot_exists());
  EXPECT_GT(status.disk_bytes, 12 * test_util::FakeOffloadTarget::kRowBytes);
  EXPECT_EQ(status.counters.saves_ahead, 1u);
  EXPECT_EQ(status.counters.saves, 0u) << "nothing was released";
  EXPECT_EQ(f.sim_->stats().committed_bytes, committed);
  EXPECT_EQ(f.host_.stats().committed_bytes, host_committed);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderSaveAheadTest, AnEvictionAfterItOnlyReleasesAndTheRestoreReturnsEveryByte) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(30).ok());
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  f.executor_.run_due();
  const uint64_t created = files_created(f);
  ASSERT_EQ(created, 1u);
  ASSERT_TRUE(f.offloader_->evict().ok());
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kDisk);
  EXPECT_EQ(files_created(f), created) << "the eviction wrote the snapshot a second time";
  EXPECT_EQ(f.sim_->stats().committed_bytes, 0u);
  EXPECT_EQ(f.host_.stats().committed_bytes, 0u);
  EXPECT_EQ(status.counters.saves, 1u);
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_TRUE(lease->admission().restored);
  EXPECT_EQ(f.target_->length(), 30u);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderSaveAheadTest, TheIdleDeadlineAfterItOnlyReleases) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(8).ok());
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  f.executor_.run_due();
  ASSERT_EQ(files_created(f), 1u);
  f.pass(OffloaderFixture::kIdle - 1);
  EXPECT_EQ(f.state(), OffloadState::kResident) << "kept until the idle deadline";
  f.pass(1);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_EQ(files_created(f), 1u);
  EXPECT_EQ(f.sim_->stats().committed_bytes, 0u);
}

// The bug this guards: a command changes the memory after the file was written ahead, and a
// later release without a new write would restore the older bytes.
TEST(OffloaderSaveAheadTest, ACommandRetiresTheFileSoTheNextReleaseWritesAgain) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(10).ok());
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  f.executor_.run_due();
  ASSERT_TRUE(f.snapshot_exists());
  Result<Admission> admitted = f.command(7);  // the history grows to 17
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_FALSE(admitted->restored) << "the memory was resident all along";
  EXPECT_FALSE(f.snapshot_exists()) << "the written-ahead file no longer holds the memory";
  EXPECT_EQ(f.offloader_->status().disk_bytes, 0u);
  ASSERT_TRUE(f.offloader_->evict().ok());
  EXPECT_EQ(files_created(f), 2u) << "the eviction must write the changed memory";
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_TRUE(lease->admission().restored);
  EXPECT_EQ(f.target_->length(), 17u);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderSaveAheadTest, ACommandBeforeTheExecutorRunsDropsIt) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(5).ok());
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  ASSERT_TRUE(f.command(1).ok());  // arrives before the posted save starts
  f.executor_.run_due();
  EXPECT_EQ(files_created(f), 0u) << "the command is newer than the request";
  EXPECT_EQ(f.state(), OffloadState::kResident);
}

TEST(OffloaderSaveAheadTest, AFailedWriteKeepsTheMemoryAndIsNotRetriedAhead) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(6).ok());
  f.fs_.set_plan(FsFaultPlan(FsOp::kSync, 1, FsFaultKind::kIoError, /*sticky=*/false));
  SCOPED_TRACE("injected: io_error on the first fdatasync of the save ahead");
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  f.executor_.run_due();
  OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kResident);
  EXPECT_EQ(status.counters.write_failures, 1u);
  EXPECT_EQ(status.counters.saves_ahead, 0u);
  EXPECT_FALSE(f.snapshot_exists());
  EXPECT_EQ(f.target_->verify(), "");
  f.pass(OffloaderFixture::kIdle);  // the idle save writes again, and succeeds
  status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kDisk);
  EXPECT_EQ(status.counters.saves, 1u);
}

TEST(OffloaderSaveAheadTest, IsRefusedWhereItCannotMatter) {
  OffloaderFixture disabled([] {
    test_util::OffloaderSetup s;
    s.idle_seconds = 0;
    return s;
  }());
  EXPECT_EQ(disabled.offloader_->save_ahead().code(), StatusCode::kFailedPrecondition);

  OffloaderFixture f;
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(f.offloader_->save_ahead().code(), StatusCode::kFailedPrecondition)
      << "a command holds the session";
  lease->release();
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_TRUE(f.offloader_->save_ahead().ok()) << "released already: nothing to write";
  f.executor_.run_due();
  EXPECT_EQ(files_created(f), 1u);
}

TEST(OffloaderSaveAheadTest, OffloadNowAfterItReleasesWithoutWriting) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(4).ok());
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  f.executor_.run_due();
  ASSERT_TRUE(f.offloader_->offload_now().ok());
  f.executor_.run_due();
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_EQ(files_created(f), 1u);
}

// POST /v1/cache/offload right after a turn finds its save ahead running: the request is kept,
// and the memory released once the file is written (it was once dropped: the session stayed
// resident until its idle deadline).
TEST(OffloaderSaveAheadTest, OffloadNowDuringItReleasesOnceItIsWritten) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(4).ok());
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  Status asked = FailedPrecondition("not asked");
  f.fs_.set_call_hook([&](FsOp op, uint64_t call) {
    if (op == FsOp::kWrite && call == 1) asked = f.offloader_->offload_now();
  });
  f.executor_.run_due();
  f.fs_.set_call_hook({});
  EXPECT_TRUE(asked.ok()) << asked.to_string();
  f.executor_.run_due();
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_EQ(files_created(f), 1u) << "written once, then only released";
}

}  // namespace
}  // namespace siesta
