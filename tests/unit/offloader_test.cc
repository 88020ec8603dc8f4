// One test per transition of the Offloader's state machine (docs/ARCHITECTURE.md), on the
// simulator with a ManualClock and a ManualExecutor: time moves only when a test says so, and
// timers and saves run only inside pass().
#include "core/offload/offloader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <string>

#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;

test_util::OffloaderSetup setup_with(void (*change)(test_util::OffloaderSetup&)) {
  test_util::OffloaderSetup setup;
  change(setup);
  return setup;
}

TEST(OffloaderTest, DisabledNeverSavesAndAdmitsAtOnce) {
  OffloaderFixture f(setup_with([](test_util::OffloaderSetup& s) { s.idle_seconds = 0; }));
  EXPECT_EQ(f.state(), OffloadState::kDisabled);
  ASSERT_TRUE(f.command(5).ok());
  f.pass(1'000'000);
  EXPECT_EQ(f.state(), OffloadState::kDisabled);
  EXPECT_FALSE(f.snapshot_exists());
  EXPECT_EQ(f.offloader_->offload_now().code(), StatusCode::kFailedPrecondition);
}

TEST(OffloaderTest, RejectsExpiryNotAfterIdle) {
  OffloaderFixture f;
  OffloaderOptions options;
  options.config.idle_seconds = 60;
  options.config.expire_seconds = 60;
  auto made = Offloader::create(
      {*f.target_, *f.sim_, f.host_, f.fs_, f.clock_, &f.executor_, f.store_.get(), f.key_.get()},
      options);
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
}

TEST(OffloaderTest, StaysResidentUntilTheIdleDeadline) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(10).ok());
  f.pass(OffloaderFixture::kIdle - 1);
  EXPECT_EQ(f.state(), OffloadState::kResident);
  EXPECT_FALSE(f.snapshot_exists());
}

TEST(OffloaderTest, IdleSaveWritesTheFileThenReleasesWhatTheBackendHeld) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(10).ok());
  const uint64_t committed_before = f.sim_->stats().committed_bytes;
  const uint64_t host_before = f.host_.stats().committed_bytes;
  f.pass(OffloaderFixture::kIdle);
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kDisk);
  EXPECT_TRUE(f.snapshot_exists());
  EXPECT_EQ(status.counters.saves, 1u);
  EXPECT_EQ(status.released_vram_bytes, committed_before);
  EXPECT_EQ(f.sim_->stats().committed_bytes, 0u);
  EXPECT_EQ(status.released_host_bytes, host_before);
  EXPECT_EQ(f.host_.stats().committed_bytes, 0u);
  EXPECT_GT(status.disk_bytes, 10 * test_util::FakeOffloadTarget::kRowBytes);
  EXPECT_EQ(status.tokens, 10u);
}

TEST(OffloaderTest, CommandAfterSaveRestoresEveryByteAtTheSameAddresses) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(37).ok());
  const auto regions_before = f.target_->snapshot_regions();
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->admission().restored);
  EXPECT_FALSE(admitted->admission().fallback.has_value());
  EXPECT_EQ(f.target_->length(), 37u);
  EXPECT_EQ(f.target_->verify(), "");
  const auto regions_after = f.target_->snapshot_regions();
  for (size_t i = 0; i < regions_before.size(); ++i) {
    EXPECT_EQ(regions_before[i].device, regions_after[i].device);
    EXPECT_EQ(regions_before[i].host, regions_after[i].host);
  }
  f.target_->advance(3);
  admitted->release();
  EXPECT_EQ(f.target_->verify(), "");
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kResident);
  EXPECT_EQ(status.counters.restores, 1u);
  EXPECT_EQ(status.counters.restore_hits, 1u);
  EXPECT_FALSE(f.snapshot_exists()) << "a restored snapshot no longer describes the session";
  EXPECT_EQ(status.disk_bytes, 0u);
}

// Unlinking a large cached file costs ~0.2 s per GiB: the restore frees the snapshot's name at
// once and leaves the unlink to the executor, off the path of the command that waits.
TEST(OffloaderTest, ARestoredSnapshotIsRemovedOnTheExecutorNotByTheCommand) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(20).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  auto bytes_on_disk = [&] { return f.store_->disk_bytes().value(); };
  ASSERT_GT(bytes_on_disk(), 0u);
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok());
  EXPECT_FALSE(f.snapshot_exists()) << "the name is free as soon as the restore ends";
  EXPECT_GT(bytes_on_disk(), 0u) << "the file itself waits for the executor";
  admitted->release();
  f.executor_.run_due();
  EXPECT_EQ(bytes_on_disk(), 0u) << "removed on the executor";
  EXPECT_EQ(f.offloader_->status().counters.delete_failures, 0u);
  // The next save is unaffected: a new snapshot under the same name.
  f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_TRUE(f.snapshot_exists());
}

TEST(OffloaderTest, AnOffloaderDestroyedBeforeTheRemovalLeavesTheFileToTheStore) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(20).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_TRUE(f.offloader_->acquire().ok());  // the lease goes back at once
  f.offloader_.reset();                       // the removal is still queued on the executor
  f.executor_.run_due();                      // runs nothing of the destroyed offloader
  EXPECT_GT(f.store_->disk_bytes().value(), 0u);
  EXPECT_TRUE(f.store_->remove_own_files().ok());  // what a normal shutdown does
  EXPECT_EQ(f.store_->disk_bytes().value(), 0u);
}

TEST(OffloaderTest, IdleTimeCountsFromTheEndOfTheLastCommand) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(1).ok());
  f.pass(OffloaderFixture::kIdle - 10);
  ASSERT_TRUE(f.command(1).ok());
  f.pass(OffloaderFixture::kIdle - 10);
  EXPECT_EQ(f.state(), OffloadState::kResident);
  f.pass(10);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
}

TEST(OffloaderTest, ExpiryDeletesTheSnapshotAndTheNextCommandStartsFresh) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(20).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  f.pass(OffloaderFixture::kExpire - OffloaderFixture::kIdle - 1);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  f.pass(1);
  EXPECT_EQ(f.state(), OffloadState::kExpired);
  EXPECT_FALSE(f.snapshot_exists());
  EXPECT_EQ(f.sim_->stats().committed_bytes, 0u) << "memory stays released while expired";
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->admission().fresh_after_expiry);
  EXPECT_EQ(f.target_->length(), 0u);
  EXPECT_EQ(f.target_->verify(), "");
  admitted->release();
  EXPECT_EQ(f.offloader_->status().counters.expirations, 1u);
}

// The snapshot is damaged in one way while the session sleeps; the next command must drop the
// history for exactly that reason and leave no file behind.
struct Damage {
  const char* name;
  FallbackReason expected;
  void (*apply)(OffloaderFixture& f);
};

void remove_file(OffloaderFixture& f) { std::filesystem::remove(f.snapshot_path()); }
void truncate_file(OffloaderFixture& f) {
  std::filesystem::resize_file(f.snapshot_path(),
                               std::filesystem::file_size(f.snapshot_path()) / 2);
}
void flip_a_payload_byte(OffloaderFixture& f) {
  std::fstream file(f.snapshot_path(), std::ios::in | std::ios::out | std::ios::binary);
  const auto middle =
      static_cast<std::streamoff>(std::filesystem::file_size(f.snapshot_path()) / 2);
  file.seekg(middle);
  char byte = 0;
  file.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x40);
  file.seekp(middle);
  file.write(&byte, 1);
}
void replace_with_another_sessions_file(OffloaderFixture& f) {
  // A snapshot of a session with another layout, written by another offloader of this process.
  OffloaderFixture other(setup_with([](test_util::OffloaderSetup& s) { s.positions = 128; }));
  ASSERT_TRUE(other.command(5).ok());
  other.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(other.state(), OffloadState::kDisk);
  std::filesystem::copy_file(other.snapshot_path(), f.snapshot_path(),
                             std::filesystem::copy_options::overwrite_existing);
}
void let_it_expire_unseen(OffloaderFixture& f) {
  // Time passes the file's expiry but the expiry timer has not run yet.
  f.clock_.advance(std::chrono::seconds(OffloaderFixture::kExpire));
}

class OffloaderFallbackTest : public ::testing::TestWithParam<Damage> {};

TEST_P(OffloaderFallbackTest, DiscardsTheHistoryForThatReason) {
  const Damage& damage = GetParam();
  OffloaderFixture f;
  ASSERT_TRUE(f.command(30).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  damage.apply(f);
  if (::testing::Test::HasFatalFailure()) return;
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok()) << damage.name << ": " << admitted.status().to_string();
  ASSERT_TRUE(admitted->admission().fallback.has_value()) << damage.name;
  EXPECT_EQ(*admitted->admission().fallback, damage.expected)
      << damage.name << " gave " << fallback_reason_name(*admitted->admission().fallback);
  EXPECT_EQ(f.target_->length(), 0u);
  EXPECT_EQ(f.target_->verify(), "");
  f.target_->advance(4);
  admitted->release();
  EXPECT_EQ(f.target_->verify(), "");
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.counters.fallbacks[static_cast<size_t>(damage.expected)], 1u);
  EXPECT_EQ(status.counters.restore_hits, 0u);
  EXPECT_FALSE(f.snapshot_exists()) << "no file of a discarded snapshot survives";
}

INSTANTIATE_TEST_SUITE_P(
    EachDamage, OffloaderFallbackTest,
    ::testing::Values(Damage{"missing", FallbackReason::kNotFound, remove_file},
                      Damage{"truncated", FallbackReason::kTruncated, truncate_file},
                      Damage{"corrupt", FallbackReason::kCorrupt, flip_a_payload_byte},
                      Damage{"foreign", FallbackReason::kForeign,
                             replace_with_another_sessions_file},
                      Damage{"expired", FallbackReason::kExpired, let_it_expire_unseen}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

TEST(OffloaderTest, OutOfMemoryOnRestoreKeepsTheSnapshotAndALaterCommandSucceeds) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(25).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  f.sim_->set_external_usage(f.sim_->stats().device_total_bytes);  // another process took it
  Result<Offloader::Lease> refused = f.offloader_->acquire();
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_TRUE(f.snapshot_exists());
  EXPECT_EQ(f.sim_->stats().committed_bytes, 0u) << "a refused restore leaves nothing committed";
  EXPECT_EQ(f.offloader_->status().counters.out_of_memory_retries, 1u);
  f.sim_->set_external_usage(0);
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->admission().restored);
  EXPECT_EQ(f.target_->length(), 25u);
  EXPECT_EQ(f.target_->verify(), "");
  admitted->release();
}

TEST(OffloaderTest, ACommitFailureOtherThanOutOfMemoryLosesTheSessionWithoutExiting) {
  // Injected: the Offloader's first commit (the restore) fails with a device error.
  OffloaderFixture f(setup_with([](test_util::OffloaderSetup& s) {
    s.backend_faults = {FaultKind::kCommitDeviceError, 1, false};
  }));
  ASSERT_TRUE(f.command(3).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  EXPECT_EQ(admitted.status().code(), StatusCode::kDeviceError);
  ASSERT_EQ(f.fatal_.size(), 1u) << "reported once, to the caller's handler";
  EXPECT_NE(f.fatal_[0].message().find("injected"), std::string::npos) << f.fatal_[0].to_string();
  // Still running (core never exits): the session is lost, and says so.
  OffloadStatus status = f.offloader_->status();
  EXPECT_TRUE(status.memory_lost);
  EXPECT_EQ(status.state, OffloadState::kDisk);
  EXPECT_NE(status.last_error.find("injected"), std::string::npos) << status.last_error;
  // Every later command fails at once, without touching the memory again.
  const uint64_t commits = f.faulty_backend_->counters().commit_calls;
  Result<Offloader::Lease> again = f.offloader_->acquire();
  EXPECT_EQ(again.status().code(), StatusCode::kDeviceError);
  EXPECT_NE(again.status().message().find("lost"), std::string::npos) << again.status().to_string();
  EXPECT_EQ(f.faulty_backend_->counters().commit_calls, commits);
  EXPECT_EQ(f.fatal_.size(), 1u);
  EXPECT_EQ(f.offloader_->offload_now().code(), StatusCode::kFailedPrecondition);
  f.pass(10 * OffloaderFixture::kExpire);
  EXPECT_EQ(f.state(), OffloadState::kDisk) << "no timer touches a lost session";
}

TEST(OffloaderTest, ALostSessionWithoutAHandlerIsLogged) {
  // Injected: the restore's commit fails with a device error; nobody handles it.
  OffloaderFixture f(setup_with([](test_util::OffloaderSetup& s) {
    s.backend_faults = {FaultKind::kCommitDeviceError, 1, false};
  }));
  OffloaderOptions options;
  options.config.idle_seconds = OffloaderFixture::kIdle;
  options.config.expire_seconds = OffloaderFixture::kExpire;
  options.log = [&f](const std::string& line) { f.log_.push_back(line); };
  f.offloader_ = Offloader::create({*f.target_, *f.faulty_backend_, f.host_, f.fs_, f.clock_,
                                    &f.executor_, f.store_.get(), f.key_.get()},
                                   options)
                     .value();
  ASSERT_TRUE(f.command(3).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  f.log_.clear();
  EXPECT_EQ(f.offloader_->acquire().status().code(), StatusCode::kDeviceError);
  ASSERT_EQ(f.log_.size(), 1u);
  EXPECT_NE(f.log_[0].find("could not be mapped back"), std::string::npos) << f.log_[0];
}

TEST(OffloaderTest, AWriteFailureKeepsTheMemoryAndRetriesWithBackoffLoggingOnce) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(12).ok());
  const uint64_t committed = f.sim_->stats().committed_bytes;
  // Injected: every write fails with ENOSPC.
  f.fs_.set_plan({FsOp::kWrite, 1, FsFaultKind::kNoSpace, true});
  f.pass(OffloaderFixture::kIdle);
  OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kResident);
  EXPECT_EQ(f.sim_->stats().committed_bytes, committed) << "memory kept";
  EXPECT_EQ(status.counters.write_failures, 1u);
  EXPECT_NE(status.last_error.find("injected"), std::string::npos) << status.last_error;
  EXPECT_FALSE(f.snapshot_exists());
  f.pass(1);  // first retry after 1 s
  EXPECT_EQ(f.offloader_->status().counters.write_failures, 2u);
  f.pass(1);  // the backoff doubled: nothing yet
  EXPECT_EQ(f.offloader_->status().counters.write_failures, 2u);
  f.pass(1);
  EXPECT_EQ(f.offloader_->status().counters.write_failures, 3u);
  EXPECT_EQ(f.log_.size(), 1u) << "the same failure is logged once";
  f.fs_.set_plan(FsFaultPlan::none());
  f.pass(4);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok());
  EXPECT_TRUE(admitted->admission().restored);
  EXPECT_EQ(f.target_->verify(), "");
  admitted->release();
}

TEST(OffloaderTest, AForcedOffloadThatRanOutOfSpaceIsRetriedWithTheIdleBackoff) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(12).ok());
  // Injected: every write fails with ENOSPC (the FaultyFileSystem's kNoSpace).
  f.fs_.set_plan({FsOp::kWrite, 1, FsFaultKind::kNoSpace, true});
  ASSERT_TRUE(f.offloader_->offload_now().ok());
  f.pass(0);
  OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kResident) << "memory kept";
  EXPECT_EQ(status.counters.write_failures, 1u);
  EXPECT_NE(status.last_error.find("no_space"), std::string::npos) << status.last_error;
  // Retried after 1 s, then 2 s later, ... -- long before the 60 s idle deadline.
  f.pass(1);
  EXPECT_EQ(f.offloader_->status().counters.write_failures, 2u) << "first retry after 1 s";
  f.pass(1);
  EXPECT_EQ(f.offloader_->status().counters.write_failures, 2u) << "the backoff doubled";
  f.pass(1);
  EXPECT_EQ(f.offloader_->status().counters.write_failures, 3u);
  f.fs_.set_plan(FsFaultPlan::none());
  f.pass(4);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_LT(f.offloader_->status().seconds_since_activity, OffloaderFixture::kIdle);
  Result<Admission> admitted = f.command(0);
  ASSERT_TRUE(admitted.ok()) << admitted.status().to_string();
  EXPECT_TRUE(admitted->restored);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderTest, ACommandWithdrawsAFailedOffloadRequest) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(12).ok());
  // Injected: every write fails with ENOSPC.
  f.fs_.set_plan({FsOp::kWrite, 1, FsFaultKind::kNoSpace, true});
  ASSERT_TRUE(f.offloader_->offload_now().ok());
  f.pass(0);
  ASSERT_EQ(f.offloader_->status().counters.write_failures, 1u);
  ASSERT_TRUE(f.command(1).ok());  // newer than the request: the idle rule applies again
  f.pass(OffloaderFixture::kIdle - 1);
  EXPECT_EQ(f.offloader_->status().counters.write_failures, 1u);
  f.pass(1);
  EXPECT_EQ(f.offloader_->status().counters.write_failures, 2u) << "the idle save, failing";
}

// "restored N tokens in T ms (commit C ms, read R ms at X GB/s, retire D ms)": every figure in
// tenths of a millisecond, and C + R + D <= T.
TEST(OffloaderTest, TheRestoreLinesPartsNeverExceedItsTotal) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(40).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  // Each file-system call of the restore takes 0.37 ms of the ManualClock (the reads run on
  // the reader's threads), so every part is fractional and the total is a sum of many.
  std::mutex hook_mutex;
  f.fs_.set_call_hook([&](FsOp, uint64_t) {
    std::lock_guard lock(hook_mutex);
    f.clock_.advance(std::chrono::microseconds(370));
  });
  f.log_.clear();
  ASSERT_TRUE(f.command(0).ok());
  f.fs_.set_call_hook({});
  const std::regex line(
      R"(offload: restored 40 tokens in (\d+)\.(\d) ms \(commit (\d+)\.(\d) ms, )"
      R"(read (\d+)\.(\d) ms at [0-9.]+ GB/s, retire (\d+)\.(\d) ms\); state resident)");
  std::smatch m;
  ASSERT_EQ(f.log_.size(), 1u);
  ASSERT_TRUE(std::regex_match(f.log_[0], m, line)) << f.log_[0];
  auto tenths = [&](int i) { return std::stoi(m[i]) * 10 + std::stoi(m[i + 1]); };
  const int total = tenths(1), commit = tenths(3), read = tenths(5), retire = tenths(7);
  EXPECT_GT(read, 0) << f.log_[0];
  EXPECT_GT(retire, 0) << f.log_[0];
  EXPECT_LE(commit + read + retire, total) << f.log_[0];
  EXPECT_EQ(static_cast<int>(f.offloader_->status().last_restore_ms * 10), total)
      << "the status's figure is the line's total";
}

TEST(OffloaderTest, OffloadNowSavesWithoutWaitingForTheIdleTimer) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(8).ok());
  ASSERT_TRUE(f.offloader_->offload_now().ok());
  f.pass(0);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  EXPECT_TRUE(f.offloader_->offload_now().ok()) << "already released: nothing to do";
}

TEST(OffloaderTest, StatusNeverWakesTheSession) {
  OffloaderFixture f;
  ASSERT_TRUE(f.command(8).ok());
  f.pass(OffloaderFixture::kIdle);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(f.offloader_->status().state, OffloadState::kDisk);
  }
  EXPECT_EQ(f.sim_->stats().committed_bytes, 0u);
  EXPECT_EQ(f.offloader_->status().counters.restores, 0u);
}

TEST(OffloaderTest, OneCommandAtATime) {
  OffloaderFixture f;
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok());
  EXPECT_EQ(f.offloader_->acquire().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.offloader_->offload_now().code(), StatusCode::kFailedPrecondition);
  admitted->release();
  EXPECT_TRUE(f.offloader_->acquire().ok()) << "the lease was given back";
}

TEST(OffloaderTest, ALeaseGivesTheSessionBackWhenItGoes) {
  OffloaderFixture f;
  {
    Result<Offloader::Lease> lease = f.offloader_->acquire();
    ASSERT_TRUE(lease.ok());
    EXPECT_TRUE(lease->held());
    f.target_->advance(5);
    f.clock_.advance(std::chrono::seconds(30));  // the command takes 30 s
  }  // destroyed: the session is back, and the idle time counts from here
  EXPECT_TRUE(f.offloader_->acquire().ok()) << "no lease is held any more";
  EXPECT_EQ(f.offloader_->status().tokens, 5u);
  f.pass(OffloaderFixture::kIdle - 1);
  EXPECT_EQ(f.state(), OffloadState::kResident);
  f.pass(1);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
}

TEST(OffloaderTest, AMovedLeaseHoldsTheSessionOnce) {
  OffloaderFixture f;
  Result<Offloader::Lease> acquired = f.offloader_->acquire();
  ASSERT_TRUE(acquired.ok());
  Offloader::Lease lease = std::move(acquired).value();
  Offloader::Lease moved = std::move(lease);
  EXPECT_FALSE(lease.held());  // NOLINT(bugprone-use-after-move): what a move leaves
  EXPECT_TRUE(moved.held());
  lease.release();  // NOLINT(bugprone-use-after-move): gives nothing back
  EXPECT_EQ(f.offloader_->acquire().status().code(), StatusCode::kFailedPrecondition)
      << "the session is still held, by the moved-to lease";
  Offloader::Lease assigned;
  assigned = std::move(moved);
  EXPECT_TRUE(assigned.held());
  assigned.release();
  assigned.release();  // once only
  EXPECT_FALSE(assigned.held());
  EXPECT_TRUE(f.offloader_->acquire().ok());
}

TEST(OffloaderTest, NoSaveWhileACommandRuns) {
  OffloaderFixture f;
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok());
  f.pass(10 * OffloaderFixture::kIdle);
  EXPECT_EQ(f.state(), OffloadState::kResident);
  admitted->release();
  f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
}

TEST(OffloaderTest, DigestModeRoundTrips) {
  OffloaderFixture f(setup_with([](test_util::OffloaderSetup& s) { s.encrypt = false; }));
  ASSERT_TRUE(f.command(9).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok());
  EXPECT_TRUE(admitted->admission().restored);
  EXPECT_EQ(f.target_->verify(), "");
  admitted->release();
}

TEST(OffloaderTest, ManySaveRestoreCyclesKeepEveryByte) {
  OffloaderFixture f;
  for (int cycle = 0; cycle < 100; ++cycle) {
    Result<Admission> admitted = f.command(2);
    ASSERT_TRUE(admitted.ok()) << "cycle " << cycle << ": " << admitted.status().to_string();
    if (cycle > 0) {
      ASSERT_TRUE(admitted->restored) << "cycle " << cycle;
    }
    f.pass(OffloaderFixture::kIdle);
    ASSERT_EQ(f.state(), OffloadState::kDisk) << "cycle " << cycle;
  }
  Result<Offloader::Lease> admitted = f.offloader_->acquire();
  ASSERT_TRUE(admitted.ok());
  EXPECT_EQ(f.target_->length(), 200u);
  EXPECT_EQ(f.target_->verify(), "");
  admitted->release();
  EXPECT_EQ(f.offloader_->status().counters.restore_hits, 100u);
}

}  // namespace
}  // namespace siesta
