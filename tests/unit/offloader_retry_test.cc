// What the Offloader tries again, and when: a save that failed (its backoff doubles, and a
// command starts it over), the deletion of an expired snapshot that failed (tried again after
// the initial backoff), and the unlink of a restored snapshot (counted when it fails; the
// store's clean-up takes the file). Each fault is injected through the fixture's
// FaultyFileSystem and named in the test.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;

constexpr int64_t kIdle = OffloaderFixture::kIdle;
constexpr int64_t kExpire = OffloaderFixture::kExpire;

uint64_t write_failures(const OffloaderFixture& f) {
  return f.offloader_->status().counters.write_failures;
}

// Guards: the count of failures in a row kept across a command, so that the first failure
// after it waits four times the initial backoff (two failures earlier) instead of once.
TEST(OffloaderRetryTest, ACommandStartsTheSaveBackoffOver) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(4).ok());
  // Injected: every write fails with EIO.
  f.fs_.set_plan({FsOp::kWrite, 1, FsFaultKind::kIoError, true});
  f.pass(kIdle);
  ASSERT_EQ(write_failures(f), 1u);
  f.pass(1);  // the initial backoff: 1 s
  ASSERT_EQ(write_failures(f), 2u);
  ASSERT_TRUE(f.command(1).ok());
  f.pass(kIdle);
  ASSERT_EQ(write_failures(f), 3u) << "the idle save after the command, failing";
  f.pass(1);
  EXPECT_EQ(write_failures(f), 4u)
      << "retried after the initial backoff, not after the 4 s a third failure in a row waits";
  f.pass(1);
  EXPECT_EQ(write_failures(f), 4u) << "then the backoff doubles again";
  f.pass(1);
  EXPECT_EQ(write_failures(f), 5u);
  EXPECT_EQ(f.state(), OffloadState::kResident);
}

// Guards: the backoff capped at backoff_max (a shift without the cap, or the cap ignored).
TEST(OffloaderRetryTest, TheSaveBackoffStopsGrowingAtItsMaximum) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(4).ok());
  // Injected: every write fails with EIO.
  f.fs_.set_plan({FsOp::kWrite, 1, FsFaultKind::kIoError, true});
  f.pass(kIdle);
  // 1, 2, 4, 8, 16, 32 s, then 60 s (the default maximum) for ever.
  for (int64_t wait : {1, 2, 4, 8, 16, 32, 60, 60, 60}) {
    const uint64_t before = write_failures(f);
    f.pass(wait - 1);
    ASSERT_EQ(write_failures(f), before) << "retried before its " << wait << " s backoff";
    f.pass(1);
    ASSERT_EQ(write_failures(f), before + 1) << "not retried after its " << wait << " s backoff";
  }
}

// Guards: a failed deletion of an expired snapshot left for ever (no timer armed to try it
// again), not counted, or taken for success (the state moving on to expired while the file
// is still there).
TEST(OffloaderRetryTest, AFailedDeleteOfAnExpiredSnapshotIsCountedAndRetriedAfterTheBackoff) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(6).ok());
  f.pass(kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  // Injected: the first removal (the expired snapshot's) fails with EIO.
  const FsFaultPlan plan{FsOp::kRemove, 1, FsFaultKind::kIoError, false};
  f.fs_.set_plan(plan);
  f.pass(kExpire - kIdle);
  OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kExpired);
  EXPECT_EQ(status.counters.expirations, 1u);
  EXPECT_EQ(status.counters.delete_failures, 1u);
  EXPECT_NE(status.last_error.find(plan.describe()), std::string::npos) << status.last_error;
  EXPECT_TRUE(f.snapshot_exists()) << "the failed deletion left the file";
  ASSERT_FALSE(f.log_.empty());
  EXPECT_NE(f.log_.back().find("could not delete the expired snapshot"), std::string::npos)
      << f.log_.back();
  f.pass(0);
  EXPECT_TRUE(f.snapshot_exists()) << "not before the backoff";
  f.pass(1);
  EXPECT_FALSE(f.snapshot_exists()) << "tried again after the initial backoff (1 s)";
  status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kExpired);
  EXPECT_EQ(status.counters.delete_failures, 1u);
  EXPECT_EQ(status.counters.expirations, 1u) << "one expiry, deleted on its second try";
  EXPECT_EQ(f.fs_.counters().of(FsOp::kRemove), 2u);
  Result<Admission> admitted = f.command(2);
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->fresh_after_expiry);
  EXPECT_EQ(f.target_->verify(), "");
}

// Guards: a command that arrives while an expired snapshot's deletion is still to be retried
// leaving the file behind (it deletes the file itself) or restoring it.
TEST(OffloaderRetryTest, ACommandBeforeTheRetryDeletesTheExpiredFileItself) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(6).ok());
  f.pass(kIdle);
  // Injected: the first removal fails with EIO.
  f.fs_.set_plan({FsOp::kRemove, 1, FsFaultKind::kIoError, false});
  f.pass(kExpire - kIdle);
  ASSERT_TRUE(f.snapshot_exists());
  Result<Admission> admitted = f.command(0);
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->fresh_after_expiry);
  EXPECT_FALSE(admitted->restored);
  EXPECT_EQ(f.target_->length(), 0u);
  EXPECT_FALSE(f.snapshot_exists());
  f.pass(1);  // the retry timer finds a resident session: nothing to delete
  EXPECT_EQ(f.state(), OffloadState::kResident);
  EXPECT_EQ(f.offloader_->status().counters.delete_failures, 1u);
}

// Guards: a failed unlink of a restored (retired) snapshot not counted or not reported; and
// a retired file that is already gone (NotFound) counted as a failure.
TEST(OffloaderRetryTest, AFailedUnlinkOfARetiredSnapshotIsCountedAndTheStoreTakesTheFile) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(20).ok());
  f.pass(kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  ASSERT_TRUE(f.command(0).ok());  // restored; the retired file's unlink is queued
  EXPECT_FALSE(f.snapshot_exists());
  // Injected: that unlink fails with EIO.
  const FsFaultPlan plan{FsOp::kRemove, 1, FsFaultKind::kIoError, false};
  f.fs_.set_plan(plan);
  f.executor_.run_due();
  OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.counters.delete_failures, 1u);
  EXPECT_NE(status.last_error.find(plan.describe()), std::string::npos) << status.last_error;
  ASSERT_FALSE(f.log_.empty());
  EXPECT_NE(f.log_.back().find("could not delete a restored snapshot"), std::string::npos)
      << f.log_.back();
  EXPECT_EQ(status.state, OffloadState::kResident) << "the session is not affected";
  EXPECT_GT(f.store_->disk_bytes().value(), 0u) << "the retired file is still there";
  EXPECT_TRUE(f.store_->remove_own_files().ok());
  EXPECT_EQ(f.store_->disk_bytes().value(), 0u) << "the store's clean-up takes it";
}

TEST(OffloaderRetryTest, ARetiredSnapshotAlreadyGoneIsNoFailure) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(20).ok());
  f.pass(kIdle);
  ASSERT_TRUE(f.command(0).ok());                  // restored; the retired file's unlink is queued
  ASSERT_TRUE(f.store_->remove_own_files().ok());  // someone took it first
  f.executor_.run_due();
  EXPECT_EQ(f.offloader_->status().counters.delete_failures, 0u);
  EXPECT_EQ(f.offloader_->status().last_error, "");
}

}  // namespace
}  // namespace siesta
