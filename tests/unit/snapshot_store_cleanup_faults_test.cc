// The SnapshotStore's clean-up when the file system fails under it: a listing that fails (at
// start-up, and for remove, remove_own_files and disk_bytes), a dead owner's lock file that
// cannot be removed, a live owner's expired snapshot that cannot be removed, and the
// directory sync after a clean-up. Start-up never fails for these: each is counted and named
// in the report and the file is left for the next start. Each test names its fault.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_store.h"
#include "testing/faulty_file_system.h"
#include "tests/support/scripted_file_system.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using ::testing::HasSubstr;

using Names = std::vector<std::string>;

constexpr char kDeadNonce[] = "dead0000000000000000000000000000";

void write_plain(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}
bool exists(const std::string& path) { return std::filesystem::exists(path); }

class SnapshotStoreCleanupFaultTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0); }

  std::string dead(const std::string& suffix) const {
    return dir_ + "/siesta-" + kDeadNonce + suffix;
  }
  // A dead owner's leftovers: its lock file (not held), a snapshot and a temporary.
  void plant_dead_owner() {
    write_plain(dead(".lock"), "");
    write_plain(dead("-s1.snap"), "dead snapshot");
    write_plain(dead("-s1.snap.tmp-3"), "dead temporary");
  }
  std::unique_ptr<SnapshotStore> open_on(FileSystem& fs, SnapshotStore::Options options = {}) {
    Result<std::unique_ptr<SnapshotStore>> store =
        SnapshotStore::open(fs, clock_, dir_, std::move(options));
    EXPECT_TRUE(store.ok()) << store.status().to_string();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  siesta::testing::TempDir temp_;
  const std::string dir_ = temp_.file("cache");
  PosixFileSystem posix_;
  ManualClock clock_;
};

// Guards: a failed listing at start-up failing open() (the server would not start over a
// directory it can still use), or not reported.
TEST_F(SnapshotStoreCleanupFaultTest, AListingThatFailsAtStartUpIsCountedAndOpenSucceeds) {
  plant_dead_owner();
  // Injected: every listing fails.
  test_util::ScriptedFileSystem fs(posix_);
  fs.list_directory_answer = [](const std::string& path) -> std::optional<Result<Names>> {
    return IoError("injected listing failure of " + path);
  };
  auto store = open_on(fs);
  ASSERT_NE(store, nullptr);
  const SnapshotStore::CleanupReport& report = store->startup_cleanup();
  EXPECT_EQ(report.failures, 1u);
  ASSERT_EQ(report.failure_messages.size(), 1u);
  EXPECT_THAT(report.failure_messages[0], HasSubstr("injected listing failure"));
  EXPECT_EQ(report.removed_dead_owner_files, 0u);
  EXPECT_TRUE(exists(dead("-s1.snap"))) << "left for the next start";
}

// Guards: a failed listing taken for an empty directory by remove(), remove_own_files() or
// disk_bytes() (reporting success, or 0 bytes, over files that are still there).
TEST_F(SnapshotStoreCleanupFaultTest, AListingThatFailsLaterFailsRemovalAndCounting) {
  // Injected: every listing after the start-up one fails.
  test_util::ScriptedFileSystem fs(posix_);
  int listings = 0;
  fs.list_directory_answer = [&](const std::string& path) -> std::optional<Result<Names>> {
    if (++listings == 1) return std::nullopt;
    return IoError("injected listing failure of " + path);
  };
  SnapshotStore::Options options;
  options.keep_files_on_close = true;
  auto store = open_on(fs, options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->startup_cleanup().failures, 0u);
  write_plain(store->snapshot_path("a").value(), "1");
  EXPECT_EQ(store->remove("a").code(), StatusCode::kIoError);
  EXPECT_EQ(store->remove_own_files().code(), StatusCode::kIoError);
  EXPECT_EQ(store->disk_bytes().status().code(), StatusCode::kIoError);
  EXPECT_TRUE(exists(store->snapshot_path("a").value()));
}

// Guards: a dead owner's lock file that cannot be removed not counted (or counted as removed).
TEST_F(SnapshotStoreCleanupFaultTest, ADeadOwnersLockThatCannotBeRemovedIsCounted) {
  plant_dead_owner();
  // Injected: the third removal fails; the dead owner's two files go first, its lock last.
  const FsFaultPlan plan{FsOp::kRemove, 3, FsFaultKind::kIoError, false};
  FaultyFileSystem fs(posix_, plan);
  auto store = open_on(fs);
  ASSERT_NE(store, nullptr);
  const SnapshotStore::CleanupReport& report = store->startup_cleanup();
  EXPECT_EQ(report.removed_dead_owner_files, 2u);
  EXPECT_EQ(report.failures, 1u);
  ASSERT_EQ(report.failure_messages.size(), 1u);
  EXPECT_THAT(report.failure_messages[0], HasSubstr(plan.describe()));
  EXPECT_THAT(report.failure_messages[0], HasSubstr(".lock"));
  EXPECT_FALSE(exists(dead("-s1.snap")));
  EXPECT_TRUE(exists(dead(".lock")));
  EXPECT_EQ(fs.counters().held_locks, 1) << "the dead owner's lock is not kept";
}

// Guards: a file of a dead owner that someone else removed first (NotFound) counted as a
// failure.
TEST_F(SnapshotStoreCleanupFaultTest, ADeadOwnersFileAlreadyGoneIsNoFailure) {
  plant_dead_owner();
  FaultyFileSystem fs(posix_);
  // The file vanishes between the listing and its removal (another process cleaning up).
  fs.set_call_hook([&](FsOp op, uint64_t call) {
    if (op == FsOp::kRemove && call == 1) {
      std::filesystem::remove(dead("-s1.snap"));
      std::filesystem::remove(dead("-s1.snap.tmp-3"));
      std::filesystem::remove(dead(".lock"));
    }
  });
  auto store = open_on(fs);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->startup_cleanup().failures, 0u);
  EXPECT_EQ(store->startup_cleanup().removed_dead_owner_files, 0u);
}

// Guards: a live owner's expired snapshot that cannot be removed not counted (or counted as
// removed), and the live owner's other files touched.
TEST_F(SnapshotStoreCleanupFaultTest, ALiveOwnersExpiredSnapshotThatCannotBeRemovedIsCounted) {
  SnapshotStore::Options live_options;
  live_options.keep_files_on_close = true;
  auto live = open_on(posix_, live_options);
  ASSERT_NE(live, nullptr);
  const std::string expired = live->snapshot_path("past").value();
  const std::string temporary = live->temp_path("past").value();
  write_plain(expired, "x");
  write_plain(temporary, "being written");
  // Injected: the first removal (the expired snapshot's) fails.
  const FsFaultPlan plan{FsOp::kRemove, 1, FsFaultKind::kIoError, false};
  FaultyFileSystem fs(posix_, plan);
  SnapshotStore::Options options;
  options.read_expiry = [&](const std::string&) -> Result<int64_t> {
    return clock_.unix_seconds() - 1;
  };
  auto store = open_on(fs, options);
  ASSERT_NE(store, nullptr);
  const SnapshotStore::CleanupReport& report = store->startup_cleanup();
  EXPECT_EQ(report.removed_expired_files, 0u);
  EXPECT_EQ(report.failures, 1u);
  ASSERT_EQ(report.failure_messages.size(), 1u);
  EXPECT_THAT(report.failure_messages[0], HasSubstr(plan.describe()));
  EXPECT_TRUE(exists(expired)) << "tried, failed, left for the next start";
  EXPECT_TRUE(exists(temporary)) << "a live owner's temporary is never touched";
  EXPECT_EQ(fs.counters().of(FsOp::kRemove), 1u);
  EXPECT_EQ(fs.counters().of(FsOp::kSyncDirectory), 0u) << "nothing removed: nothing to sync";
}

// Guards: a failed directory sync after the clean-up removed files going unreported (the
// removals are then not known to be durable).
TEST_F(SnapshotStoreCleanupFaultTest, ADirectorySyncThatFailsAfterTheCleanUpIsCounted) {
  plant_dead_owner();
  // Injected: the directory sync fails.
  const FsFaultPlan plan{FsOp::kSyncDirectory, 1, FsFaultKind::kIoError, false};
  FaultyFileSystem fs(posix_, plan);
  auto store = open_on(fs);
  ASSERT_NE(store, nullptr);
  const SnapshotStore::CleanupReport& report = store->startup_cleanup();
  EXPECT_EQ(report.removed_dead_owner_files, 3u);
  EXPECT_EQ(report.failures, 1u);
  ASSERT_EQ(report.failure_messages.size(), 1u);
  EXPECT_THAT(report.failure_messages[0], HasSubstr(plan.describe()));
  EXPECT_EQ(fs.counters().of(FsOp::kSyncDirectory), 1u);
}

// Guards: a directory sync made although the clean-up removed nothing (and, the other way
// round, none made when it did: the previous test).
TEST_F(SnapshotStoreCleanupFaultTest, NothingRemovedMeansNoDirectorySync) {
  write_plain(dir_ + "/notes.txt", "not the store's");
  FaultyFileSystem fs(posix_);
  auto store = open_on(fs);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->startup_cleanup().failures, 0u);
  EXPECT_EQ(fs.counters().of(FsOp::kSyncDirectory), 0u);
}

}  // namespace
}  // namespace siesta
