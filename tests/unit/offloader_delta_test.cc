// Delta saves (OffloaderOptions::max_delta_segments): after a whole snapshot, a save writes only
// what changed since the save before into the next segment, and a restore reads the segments
// oldest first, each over the ones before. What must hold: every restore gives back every
// byte (verify()), rows cut by a rewind are never brought back from an older segment, a
// history rewritten from its start leaves no snapshot behind, the deltas never grow past half
// of a whole snapshot, only the newest segment's expiry counts, and a damaged or replayed
// segment costs the history, never a wrong byte. On the simulator with a ManualClock and a
// ManualExecutor, the FakeOffloadTarget's epochs telling a stale row from a fresh one.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"
#include "tests/support/spin_until.h"

namespace siesta {
namespace {

using test_util::FakeOffloadTarget;
using test_util::OffloaderFixture;
using test_util::OffloaderSetup;

OffloaderSetup with_deltas(uint32_t segments = 8) {
  OffloaderSetup setup;
  setup.max_delta_segments = segments;
  return setup;
}

// A command that cuts the history to `keep` positions, then appends `add`.
Result<Admission> rewind_command(OffloaderFixture& f, uint32_t keep, uint32_t add) {
  Result<Offloader::Lease> lease = f.offloader_->acquire();
  if (!lease.ok()) return lease.status();
  f.target_->rewind(keep);
  f.target_->advance(add);
  return lease->admission();
}

// Idle long enough to save and release; then a command that restores and appends `add`.
// Returns the admission of that command.
Admission offload_then_return(OffloaderFixture& f, uint32_t add) {
  f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(f.state(), OffloadState::kDisk);
  Result<Admission> admitted = f.command(add);
  EXPECT_TRUE(admitted.ok()) << admitted.status().to_string();
  return admitted.ok() ? *admitted : Admission{};
}

uint64_t file_size(const std::string& path) { return std::filesystem::file_size(path); }

TEST(OffloaderDeltaTest, ASaveAfterARestoreWritesOnlyWhatTheCommandAdded) {
  OffloaderFixture f(with_deltas());
  ASSERT_TRUE(f.command(100).ok());
  EXPECT_TRUE(offload_then_return(f, 5).restored);
  // The restore kept the snapshot: it is the base of the next save.
  EXPECT_TRUE(f.snapshot_exists(0));
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.state(), OffloadState::kDisk);
  OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.counters.delta_saves, 1u);
  EXPECT_EQ(status.snapshot_segments, 2u);
  ASSERT_TRUE(f.snapshot_exists(1));
  const uint64_t base = file_size(f.snapshot_path(0));
  const uint64_t delta = file_size(f.snapshot_path(1));
  EXPECT_EQ(status.disk_bytes, base + delta);
  // Five rows and their history bytes, the 16-byte meta, and the format's framing.
  EXPECT_LT(delta, 5 * FakeOffloadTarget::kRowBytes + 1024) << "the delta wrote more than 5 rows";
  EXPECT_GT(base, 100 * FakeOffloadTarget::kRowBytes);

  Result<Admission> back = f.command(0);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back->restored);
  EXPECT_EQ(f.target_->length(), 105u);
  EXPECT_EQ(f.target_->verify(), "");
  std::printf("base %llu bytes, delta of 5 rows %llu bytes\n",
              static_cast<unsigned long long>(base), static_cast<unsigned long long>(delta));
}

TEST(OffloaderDeltaTest, RowsCutByARewindAreWrittenAgainNotRestoredFromTheBase) {
  OffloaderFixture f(with_deltas());
  ASSERT_TRUE(f.command(100).ok());
  f.pass(OffloaderFixture::kIdle);
  // The conversation diverges at 40: rows 40..69 are written again, with other bytes.
  Result<Admission> diverged = rewind_command(f, 40, 30);
  ASSERT_TRUE(diverged.ok());
  EXPECT_TRUE(diverged->restored);
  f.pass(OffloaderFixture::kIdle);
  ASSERT_EQ(f.offloader_->status().counters.delta_saves, 1u);
  ASSERT_TRUE(f.command(0).ok());
  EXPECT_EQ(f.target_->length(), 70u);
  EXPECT_EQ(f.target_->verify(), "") << "a row from before the rewind came back";
}

TEST(OffloaderDeltaTest, ASaveAheadIsTheBaseOfTheNextDelta) {
  OffloaderFixture f(with_deltas());
  ASSERT_TRUE(f.command(60).ok());
  ASSERT_TRUE(f.offloader_->save_ahead().ok());
  f.executor_.run_due();
  ASSERT_TRUE(f.command(3).ok());  // uses the memory: the file stays, as a base
  EXPECT_TRUE(f.snapshot_exists(0));
  ASSERT_TRUE(f.offloader_->evict().ok());
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.counters.delta_saves, 1u);
  EXPECT_EQ(status.snapshot_segments, 2u);
  ASSERT_TRUE(f.command(0).ok());
  EXPECT_EQ(f.target_->length(), 63u);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderDeltaTest, AHistoryRewrittenFromItsStartLeavesNoSnapshot) {
  OffloaderFixture f(with_deltas());
  ASSERT_TRUE(f.command(50).ok());
  f.pass(OffloaderFixture::kIdle);
  ASSERT_TRUE(rewind_command(f, 0, 20).ok());  // another conversation: nothing kept
  f.executor_.run_due();                       // the retired files' removal
  EXPECT_FALSE(f.snapshot_exists(0)) << "the old conversation's snapshot outlived it";
  EXPECT_EQ(f.offloader_->status().disk_bytes, 0u);
  f.pass(OffloaderFixture::kIdle);
  const OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.counters.delta_saves, 0u) << "nothing to build a delta on";
  EXPECT_EQ(status.snapshot_segments, 1u);
  ASSERT_TRUE(f.command(0).ok());
  EXPECT_EQ(f.target_->length(), 20u);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderDeltaTest, DeltasPastHalfOfAWholeSnapshotStartANewBase) {
  OffloaderFixture f(with_deltas());
  ASSERT_TRUE(f.command(100).ok());
  // Each return adds 30 rows. Whole payload at L rows: 1025 L + 16; a delta of 30: 30766.
  // Deltas of 1, 2, 3 returns stay within half of a whole one (61532 <= 133266, 123064 <=
  // 164016, 184596 <= 194766); a fourth would not (246128 > 225516).
  std::vector<uint32_t> segments;
  for (int turn = 0; turn < 5; ++turn) {
    offload_then_return(f, 30);
    f.pass(OffloaderFixture::kIdle);
    segments.push_back(f.offloader_->status().snapshot_segments);
  }
  EXPECT_EQ(segments, (std::vector<uint32_t>{2, 3, 4, 1, 2}));
  f.executor_.run_due();
  EXPECT_TRUE(f.snapshot_exists(1));
  EXPECT_FALSE(f.snapshot_exists(2)) << "a superseded delta stayed on disk";
  EXPECT_FALSE(f.snapshot_exists(3));
  ASSERT_TRUE(f.command(0).ok());
  EXPECT_EQ(f.target_->length(), 250u);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderDeltaTest, TheSegmentLimitStartsANewBase) {
  OffloaderFixture f(with_deltas(2));
  ASSERT_TRUE(f.command(200).ok());
  std::vector<uint32_t> segments;
  for (int turn = 0; turn < 4; ++turn) {
    offload_then_return(f, 1);
    f.pass(OffloaderFixture::kIdle);
    segments.push_back(f.offloader_->status().snapshot_segments);
  }
  EXPECT_EQ(segments, (std::vector<uint32_t>{2, 3, 1, 2}));
  ASSERT_TRUE(f.command(0).ok());
  EXPECT_EQ(f.target_->length(), 204u);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderDeltaTest, OnlyTheNewestSegmentsExpiryCounts) {
  OffloaderFixture f(with_deltas());  // idle 60 s, expiry 600 s
  ASSERT_TRUE(f.command(80).ok());
  f.pass(OffloaderFixture::kIdle);  // the base: expires 600 s after that command
  // Returns every 400 s: each save is a delta, and by the last return the base's own expiry
  // is long past while the newest delta's is not.
  for (int turn = 0; turn < 3; ++turn) {
    Result<Admission> back = f.command(1);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(back->restored) << "turn " << turn << ": " << f.offloader_->status().last_error;
    f.pass(400);
  }
  EXPECT_EQ(f.offloader_->status().counters.delta_saves, 3u);
  Result<Admission> back = f.command(0);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->restored) << f.offloader_->status().last_error;
  EXPECT_EQ(f.target_->verify(), "");
  // And past the newest one's expiry the snapshot goes, every segment of it.
  f.pass(OffloaderFixture::kIdle);
  f.pass(OffloaderFixture::kExpire);
  EXPECT_EQ(f.state(), OffloadState::kExpired);
  for (uint32_t segment = 0; segment <= 4; ++segment) {
    EXPECT_FALSE(f.snapshot_exists(segment)) << "segment " << segment;
  }
}

TEST(OffloaderDeltaTest, ADamagedDeltaCostsTheHistoryAndEverySegment) {
  OffloaderFixture f(with_deltas());
  ASSERT_TRUE(f.command(64).ok());
  offload_then_return(f, 4);
  f.pass(OffloaderFixture::kIdle);
  ASSERT_TRUE(f.snapshot_exists(1));
  {
    // Fault injected: one byte of the delta's last chunk payload flipped on disk.
    std::fstream file(f.snapshot_path(1), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-60, std::ios::end);
    char byte = 0;
    file.read(&byte, 1);
    file.seekp(-60, std::ios::end);
    byte = static_cast<char>(byte ^ 0x40);
    file.write(&byte, 1);
  }
  Result<Admission> back = f.command(0);
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE(back->fallback.has_value());
  EXPECT_EQ(*back->fallback, FallbackReason::kCorrupt);
  EXPECT_EQ(f.target_->length(), 0u);
  f.executor_.run_due();
  EXPECT_FALSE(f.snapshot_exists(0));
  EXPECT_FALSE(f.snapshot_exists(1));
}

TEST(OffloaderDeltaTest, AnOlderDeltaPutBackIsForeign) {
  OffloaderFixture f(with_deltas());
  ASSERT_TRUE(f.command(64).ok());
  offload_then_return(f, 4);
  f.pass(OffloaderFixture::kIdle);
  const std::string aside = f.dir_.path() + "/aside";
  std::filesystem::copy_file(f.snapshot_path(1), aside);
  // A new conversation on the session (a new base), then a delta 1 of its own.
  ASSERT_TRUE(rewind_command(f, 0, 64).ok());
  offload_then_return(f, 4);
  f.pass(OffloaderFixture::kIdle);
  ASSERT_TRUE(f.snapshot_exists(1));
  // Fault injected: the first conversation's delta 1 put back in place of the second's.
  std::filesystem::rename(aside, f.snapshot_path(1));
  Result<Admission> back = f.command(0);
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE(back->fallback.has_value());
  EXPECT_EQ(*back->fallback, FallbackReason::kForeign);
  EXPECT_NE(f.offloader_->status().last_error.find("generation"), std::string::npos)
      << f.offloader_->status().last_error;
}

// Guards: a save that failed before writing anything (its wait for the device failed) taken
// for a whole save that may have replaced the base, and the chain thrown away for it.
TEST(OffloaderDeltaTest, AFailedWaitForTheDeviceKeepsTheChain) {
  OffloaderFixture f(with_deltas());
  ASSERT_TRUE(f.command(64).ok());
  offload_then_return(f, 4);
  // Injected: the device work queued before the save fails, so its wait fails.
  ASSERT_TRUE(f.sim_->enqueue_work([] { return DeviceError("injected kernel failure"); }).ok());
  f.pass(OffloaderFixture::kIdle);
  OffloadStatus status = f.offloader_->status();
  ASSERT_EQ(status.counters.write_failures, 1u) << status.last_error;
  EXPECT_EQ(status.snapshot_segments, 1u) << "the base was dropped for a save that wrote nothing";
  EXPECT_TRUE(f.snapshot_exists(0));
  f.pass(1);  // the retry: a delta over the base kept
  status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kDisk);
  EXPECT_EQ(status.counters.delta_saves, 1u);
  ASSERT_TRUE(f.command(0).ok());
  EXPECT_EQ(f.target_->length(), 68u);
  EXPECT_EQ(f.target_->verify(), "");
}

// Guards: a whole save that fails after its rename (the directory's sync) taken for a write
// that left the final name alone, so that the chain stays trusted over a base that may be
// the new file. A delta written next over that chain reads, on restore, a base of another
// generation: Foreign, and the history is lost. The chain must go with the failure; the
// memory, kept, holds everything, and the next save is a whole one.
TEST(OffloaderDeltaTest, AWholeSaveFailingAfterItsRenameDropsTheChain) {
  OffloaderFixture f(with_deltas());
  ASSERT_TRUE(f.command(100).ok());
  // Restored, 120 rows added: a delta of 120 rows would exceed half of a whole save of 220,
  // so the next save is a whole one over a chain of one segment.
  EXPECT_TRUE(offload_then_return(f, 120).restored);
  ASSERT_EQ(f.offloader_->status().snapshot_segments, 1u);
  // Injected: the save's directory sync (after the rename into place) fails with EIO.
  const FsFaultPlan plan(FsOp::kSyncDirectory, 1, FsFaultKind::kIoError, false);
  std::printf("fault plan: %s\n", plan.describe().c_str());
  f.fs_.set_plan(plan);
  f.pass(OffloaderFixture::kIdle);
  f.fs_.set_plan(FsFaultPlan::none());
  ASSERT_EQ(f.fs_.counters().faults_fired, 1u);
  OffloadStatus status = f.offloader_->status();
  EXPECT_EQ(status.state, OffloadState::kResident) << "a failed save keeps the memory";
  EXPECT_EQ(status.counters.write_failures, 1u);
  EXPECT_NE(status.last_error.find("injected"), std::string::npos) << status.last_error;
  EXPECT_EQ(status.snapshot_segments, 0u) << "the chain stayed trusted over a base in doubt";
  EXPECT_EQ(status.disk_bytes, 0u);
  EXPECT_FALSE(f.snapshot_exists(0)) << "the base in doubt stayed on disk";
  EXPECT_EQ(f.target_->verify(), "");

  // A command that keeps 105 rows: a delta over the old chain would be small enough to be
  // written, so only a dropped chain makes the next save a whole one.
  ASSERT_TRUE(rewind_command(f, 105, 2).ok());
  f.pass(OffloaderFixture::kIdle);
  status = f.offloader_->status();
  ASSERT_EQ(status.state, OffloadState::kDisk) << status.last_error;
  EXPECT_EQ(status.counters.delta_saves, 0u) << "a delta was written over the distrusted chain";
  EXPECT_EQ(status.snapshot_segments, 1u);
  Result<Admission> back = f.command(0);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back->restored) << status.last_error;
  EXPECT_FALSE(back->fallback.has_value())
      << fallback_reason_name(*back->fallback) << ": " << f.offloader_->status().last_error;
  EXPECT_EQ(f.target_->length(), 107u);
  EXPECT_EQ(f.target_->verify(), "");
}

TEST(OffloaderDeltaTest, WithoutDeltasAUsedSnapshotIsRetiredAsBefore) {
  OffloaderFixture f;  // max_delta_segments 0
  ASSERT_TRUE(f.command(30).ok());
  EXPECT_TRUE(offload_then_return(f, 2).restored);
  f.executor_.run_due();
  EXPECT_FALSE(f.snapshot_exists(0));
  f.pass(OffloaderFixture::kIdle);
  EXPECT_EQ(f.offloader_->status().counters.delta_saves, 0u);
  EXPECT_FALSE(f.snapshot_exists(1));
}

// The file-system calls of one delta save, counted on a clean run.
std::vector<std::pair<FsOp, uint64_t>> steps_of_one_delta_save() {
  OffloaderFixture f(with_deltas());
  std::vector<std::pair<FsOp, uint64_t>> steps;
  EXPECT_TRUE(f.command(40).ok());
  offload_then_return(f, 8);
  f.fs_.set_call_hook([&](FsOp op, uint64_t call) { steps.emplace_back(op, call); });
  f.pass(OffloaderFixture::kIdle);
  f.fs_.set_call_hook({});
  EXPECT_EQ(f.offloader_->status().counters.delta_saves, 1u);
  return steps;
}

TEST(OffloaderDeltaTest, ACommandArrivingAtEveryStepOfADeltaSaveKeepsTheBase) {
  const auto steps = steps_of_one_delta_save();
  ASSERT_GT(steps.size(), 5u);
  for (const auto& [step_op, step_call] : steps) {
    SCOPED_TRACE(std::string("command arrives at ") + std::string(fs_op_name(step_op)) + " call " +
                 std::to_string(step_call));
    OffloaderFixture f(with_deltas());
    ASSERT_TRUE(f.command(40).ok());
    offload_then_return(f, 8);
    std::thread command;
    std::atomic<bool> let_in{false};
    f.fs_.set_call_hook([&, op = step_op, nth = step_call](FsOp o, uint64_t call) {
      if (o != op || call != nth || command.joinable()) return;
      command = std::thread([&] {
        Result<Offloader::Lease> lease = f.offloader_->acquire();
        let_in = true;
        if (lease.ok()) f.target_->advance(1);
      });
      EXPECT_TRUE(siesta::testing::spin_until(
          [&] { return f.offloader_->status().command_waiting || let_in.load(); },
          std::chrono::seconds(30)));
    });
    f.pass(OffloaderFixture::kIdle);  // the delta save runs here, on this thread
    command.join();
    f.fs_.set_call_hook({});
    const OffloadStatus status = f.offloader_->status();
    EXPECT_EQ(status.counters.cancelled_saves, 1u);
    EXPECT_EQ(status.counters.delta_saves, 0u);
    EXPECT_EQ(status.snapshot_segments, 1u) << "the cancelled delta must not join the chain";
    EXPECT_TRUE(f.snapshot_exists(0)) << "a cancelled delta took the base with it";
    EXPECT_FALSE(f.snapshot_exists(1)) << "a cancelled delta stayed on disk";
    EXPECT_EQ(f.target_->verify(), "");
    // The next save builds on the base, and the restore returns every byte.
    f.pass(OffloaderFixture::kIdle);
    EXPECT_EQ(f.offloader_->status().counters.delta_saves, 1u);
    ASSERT_TRUE(f.command(0).ok());
    EXPECT_EQ(f.target_->length(), 49u);
    EXPECT_EQ(f.target_->verify(), "");
  }
}

}  // namespace
}  // namespace siesta
