// SnapshotStore: the directory rules, the naming rules, the owner lock, start-up cleanup of
// dead owners' and expired files, shutdown removal and the bytes on disk; and, through a
// FaultyFileSystem, that a failure during cleanup is counted rather than fatal.
#include "core/snapshot/snapshot_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/base/posix_file_system.h"
#include "testing/faulty_file_system.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/fifo_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using siesta::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kDeadNonce[] = "dead0000000000000000000000000000";
constexpr char kOtherNonce[] = "0123456789abcdef0123456789abcdef";

void write_plain(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

bool exists(const std::string& path) { return std::filesystem::exists(path); }

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

class SnapshotStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<SnapshotStore> open_store(SnapshotStore::Options options = {}) {
    return open_store_on(fs_, std::move(options));
  }
  std::unique_ptr<SnapshotStore> open_store_on(FileSystem& fs, SnapshotStore::Options options) {
    auto store = SnapshotStore::open(fs, clock_, dir_, std::move(options));
    EXPECT_TRUE(store.ok()) << store.status().to_string();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  // A dead owner's leftovers: its lock file (not held) and files.
  void plant_dead_owner() {
    write_plain(dir_ + "/siesta-" + kDeadNonce + ".lock", "");
    write_plain(dir_ + "/siesta-" + kDeadNonce + "-s1.snap", "dead snapshot");
    write_plain(dir_ + "/siesta-" + kDeadNonce + "-s1.snap.tmp-3", "dead temporary");
  }

  TempDir temp_;
  const std::string dir_ = temp_.file("cache");
  PosixFileSystem fs_;
  ManualClock clock_;
};

// ---------------------------------------------------------------------------------------------
// Directory rules (the server's --cache-disk-dir runs the same code: cache_dir_test.cc).

TEST_F(SnapshotStoreTest, CreatesTheDirectoryPrivateWhenMissing) {
  const mode_t old_umask = ::umask(0077);
  auto store = open_store();
  ::umask(old_umask);
  ASSERT_NE(store, nullptr);
  struct stat info {};
  ASSERT_EQ(::lstat(dir_.c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  EXPECT_EQ(store->directory(), dir_);
}

TEST_F(SnapshotStoreTest, RefusesUnsafeDirectoriesNamingThePathAndTheRule) {
  const std::string quoted = "snapshot directory \"" + dir_ + "\"";
  struct Case {
    std::function<void()> make;
    std::string rule;
  };
  const Case cases[] = {
      {[&] { ASSERT_EQ(::symlink(temp_.path().c_str(), dir_.c_str()), 0); }, "is a symlink"},
      {[&] { write_plain(dir_, "x"); }, "is not a directory"},
      {[&] {
         ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
         ASSERT_EQ(::chmod(dir_.c_str(), 0770), 0);
       },
       "is writable by group or others (mode 0770)"},
      {[&] {
         ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
         ASSERT_EQ(::chmod(dir_.c_str(), 0703), 0);
       },
       "is writable by group or others (mode 0703)"},
  };
  for (const Case& c : cases) {
    std::filesystem::remove_all(dir_);
    c.make();
    auto store = SnapshotStore::open(fs_, clock_, dir_, {});
    ASSERT_FALSE(store.ok()) << c.rule;
    EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition) << c.rule;
    EXPECT_THAT(store.status().message(), HasSubstr(quoted)) << c.rule;
    EXPECT_THAT(store.status().message(), HasSubstr(c.rule));
  }
}

TEST_F(SnapshotStoreTest, RefusesAnotherUsersDirectory) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  SnapshotStore::Options options;
  options.owner_uid = static_cast<uint32_t>(::geteuid()) + 1;  // as if run by someone else
  auto store = SnapshotStore::open(fs_, clock_, dir_, options);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(),
              HasSubstr("is owned by uid " + std::to_string(::geteuid()) + ", not by this user"));
  EXPECT_TRUE(names_in(dir_).empty()) << "nothing written into a refused directory";
}

TEST_F(SnapshotStoreTest, MissingParentAndEmptyPath) {
  auto missing = SnapshotStore::open(fs_, clock_, temp_.file("a/b"), {});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("parent directory does not exist"));
  EXPECT_EQ(SnapshotStore::open(fs_, clock_, "", {}).status().code(), StatusCode::kInvalidArgument);
}

// Core says what is wrong in its own words; which flag named the path is the server's to add
// (cache_dir_test.cc).
TEST_F(SnapshotStoreTest, MessagesNameTheDirectoryInCoresOwnWordsAndNoFlag) {
  write_plain(dir_, "x");
  const std::string message = SnapshotStore::open(fs_, clock_, dir_, {}).status().message();
  EXPECT_THAT(message, StartsWith("snapshot directory \"" + dir_ + "\" is not a directory"));
  EXPECT_THAT(message, Not(HasSubstr("--")));
}

// ---------------------------------------------------------------------------------------------
// Naming and the owner lock.

TEST_F(SnapshotStoreTest, NamesFilesByNonceAndSession) {
  auto store = open_store();
  ASSERT_NE(store, nullptr);
  const std::string& nonce = store->nonce();
  ASSERT_EQ(nonce.size(), 32u);
  EXPECT_EQ(nonce.find_first_not_of("0123456789abcdef"), std::string::npos) << nonce;
  EXPECT_EQ(store->snapshot_path("chat-1_A").value(), dir_ + "/siesta-" + nonce + "-chat-1_A.snap");
  const std::string temp1 = store->temp_path("chat").value();
  const std::string temp2 = store->temp_path("chat").value();
  EXPECT_THAT(temp1, StartsWith(store->snapshot_path("chat").value() + ".tmp-"));
  EXPECT_NE(temp1, temp2);
  EXPECT_TRUE(store->snapshot_path(std::string(64, 'z')).ok());
}

TEST_F(SnapshotStoreTest, RefusesUnsafeSessionNames) {
  auto store = open_store();
  ASSERT_NE(store, nullptr);
  for (const std::string& bad :
       std::vector<std::string>{"", ".", "..", "a/b", "../x", "a.b", "a b", std::string(65, 'z'),
                                std::string("a\0b", 3), "caf\xc3\xa9"}) {
    auto path = store->snapshot_path(bad);
    EXPECT_EQ(path.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store->temp_path(bad).status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store->remove(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(SnapshotStoreTest, TwoLiveStoresShareTheDirectoryAndLeaveEachOtherAlone) {
  auto first = open_store();
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(exists(dir_ + "/siesta-" + first->nonce() + ".lock"));
  const std::string first_snapshot = first->snapshot_path("s").value();
  const std::string first_temp = first->temp_path("s").value();
  write_plain(first_snapshot, "live");
  write_plain(first_temp, "being written");

  auto second = open_store();
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second->nonce(), first->nonce());
  EXPECT_EQ(second->startup_cleanup().removed_dead_owner_files, 0u);
  EXPECT_EQ(second->startup_cleanup().failures, 0u);
  EXPECT_TRUE(exists(first_snapshot));
  EXPECT_TRUE(exists(first_temp));

  second.reset();  // its shutdown removes only its own files
  EXPECT_TRUE(exists(first_snapshot));
  EXPECT_TRUE(exists(dir_ + "/siesta-" + first->nonce() + ".lock"));
}

TEST_F(SnapshotStoreTest, ANonceWhoseLockIsHeldIsRefused) {
  SnapshotStore::Options options;
  options.nonce = kOtherNonce;
  auto first = open_store(options);
  ASSERT_NE(first, nullptr);
  write_plain(first->snapshot_path("s").value(), "x");
  auto second = SnapshotStore::open(fs_, clock_, dir_, options);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(exists(first->snapshot_path("s").value())) << "the failed open removed nothing";
  options.nonce = "NOT-HEX";
  EXPECT_EQ(SnapshotStore::open(fs_, clock_, dir_, options).status().code(),
            StatusCode::kFailedPrecondition);
}

// ---------------------------------------------------------------------------------------------
// Start-up cleanup.

TEST_F(SnapshotStoreTest, RemovesADeadOwnersFilesAndNothingElse) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  plant_dead_owner();
  // Not the store's naming: never touched, whatever they look like.
  const std::set<std::string> foreign = {
      "notes.txt",
      std::string("siesta-") + kDeadNonce + "-bad.name.snap",
      std::string("siesta-") + kDeadNonce + "-s1.snapshot",
      "siesta-DEAD0000000000000000000000000000-s1.snap",
      "siesta-dead-s1.snap",
  };
  for (const std::string& name : foreign) write_plain(dir_ + "/" + name, "keep");
  // A dead owner whose lock file is gone altogether.
  write_plain(dir_ + "/siesta-" + std::string(kOtherNonce) + "-s2.snap", "orphan");

  auto store = open_store();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->startup_cleanup().removed_dead_owner_files, 5u);  // 3 + orphan + its lock
  EXPECT_EQ(store->startup_cleanup().failures, 0u);
  std::set<std::string> expected = foreign;
  expected.insert("siesta-" + store->nonce() + ".lock");
  EXPECT_EQ(names_in(dir_), expected);
}

// Store options whose expiry reader answers from `expiry` (Corrupt for a path not in it) and,
// when `asked` is given, records every path it was asked for.
SnapshotStore::Options expiries_from(const std::map<std::string, int64_t>& expiry,
                                     std::vector<std::string>* asked = nullptr) {
  SnapshotStore::Options options;
  options.read_expiry = [&expiry, asked](const std::string& path) -> Result<int64_t> {
    if (asked != nullptr) asked->push_back(path);
    auto found = expiry.find(path);
    if (found == expiry.end()) return Corrupt("no expiry in " + path);
    return found->second;
  };
  return options;
}

TEST_F(SnapshotStoreTest, RemovesExpiredSnapshotsOfLiveOwnersAtTheirDeadline) {
  SnapshotStore::Options live_options;
  live_options.keep_files_on_close = true;
  auto live = open_store(live_options);
  ASSERT_NE(live, nullptr);
  const int64_t now = clock_.unix_seconds();
  const std::map<std::string, int64_t> expiry = {
      {live->snapshot_path("past").value(), now - 1},
      {live->snapshot_path("deadline").value(), now},
      {live->snapshot_path("future").value(), now + 1},
  };
  for (const auto& [path, unused] : expiry) write_plain(path, "x");
  const std::string unreadable = live->snapshot_path("unreadable").value();
  const std::string temporary = live->temp_path("past").value();
  write_plain(unreadable, "?");
  write_plain(temporary, "being written");
  plant_dead_owner();  // its snapshot's expiry cannot be read: it goes because its owner is dead

  std::vector<std::string> asked;
  const SnapshotStore::Options options = expiries_from(expiry, &asked);
  auto store = open_store(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->startup_cleanup().removed_expired_files, 2u);
  EXPECT_EQ(store->startup_cleanup().removed_dead_owner_files, 3u);
  EXPECT_FALSE(exists(live->snapshot_path("past").value()));
  EXPECT_FALSE(exists(live->snapshot_path("deadline").value()));
  EXPECT_TRUE(exists(live->snapshot_path("future").value()));
  EXPECT_TRUE(exists(unreadable)) << "a live owner may still be writing it";
  EXPECT_TRUE(exists(temporary));
  EXPECT_EQ(asked.size(), 4u) << "only the live owner's snapshots are read";

  // Time passes: the next start finds "future" expired.
  clock_.advance(std::chrono::seconds(1));
  auto later = open_store(options);
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(later->startup_cleanup().removed_expired_files, 1u);
  EXPECT_FALSE(exists(live->snapshot_path("future").value()));
}

TEST_F(SnapshotStoreTest, ALiveOwnersDeltaChainLivesAsLongAsItsNewestSegment) {
  SnapshotStore::Options live_options;
  live_options.keep_files_on_close = true;
  auto live = open_store(live_options);
  ASSERT_NE(live, nullptr);
  const int64_t now = clock_.unix_seconds();
  // "chain": its base expired, its newest delta not; "old": every segment expired.
  const std::map<std::string, int64_t> expiry = {
      {live->snapshot_path("chain", 0).value(), now - 100},
      {live->snapshot_path("chain", 1).value(), now - 50},
      {live->snapshot_path("chain", 2).value(), now + 10},
      {live->snapshot_path("old", 0).value(), now - 100},
      {live->snapshot_path("old", 1).value(), now - 1},
  };
  for (const auto& [path, unused] : expiry) write_plain(path, "x");
  const SnapshotStore::Options options = expiries_from(expiry);
  auto store = open_store(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->startup_cleanup().removed_expired_files, 2u) << "the two segments of \"old\"";
  for (uint32_t segment = 0; segment < 3; ++segment) {
    EXPECT_TRUE(exists(live->snapshot_path("chain", segment).value()))
        << "segment " << segment << ": the chain expires with its newest save";
  }
  EXPECT_FALSE(exists(live->snapshot_path("old", 0).value()));
  EXPECT_FALSE(exists(live->snapshot_path("old", 1).value()));

  // Past the newest segment's expiry, the whole chain goes.
  clock_.advance(std::chrono::seconds(10));
  auto later = open_store(options);
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(later->startup_cleanup().removed_expired_files, 3u);
}

// ---------------------------------------------------------------------------------------------
// Shutdown, removal, bytes on disk.

TEST_F(SnapshotStoreTest, ShutdownRemovesOwnFilesAndLock) {
  auto other = open_store();
  ASSERT_NE(other, nullptr);
  write_plain(other->snapshot_path("s").value(), "theirs");
  auto store = open_store();
  ASSERT_NE(store, nullptr);
  write_plain(store->snapshot_path("a").value(), "mine");
  write_plain(store->temp_path("b").value(), "mine too");
  const std::string nonce = store->nonce();
  store.reset();
  for (const std::string& name : names_in(dir_)) {
    EXPECT_EQ(name.find(nonce), std::string::npos) << name << " left behind";
  }
  EXPECT_TRUE(exists(other->snapshot_path("s").value()));
}

TEST_F(SnapshotStoreTest, KeepFilesOnCloseLeavesThemForTheNextStartToClean) {
  SnapshotStore::Options options;
  options.keep_files_on_close = true;
  auto store = open_store(options);
  ASSERT_NE(store, nullptr);
  const std::string snapshot = store->snapshot_path("a").value();
  write_plain(snapshot, "mine");
  store.reset();
  EXPECT_TRUE(exists(snapshot));
  auto next = open_store();  // the first owner is dead now
  ASSERT_NE(next, nullptr);
  EXPECT_FALSE(exists(snapshot));
  EXPECT_EQ(next->startup_cleanup().removed_dead_owner_files, 2u);  // snapshot + lock
}

TEST_F(SnapshotStoreTest, RemoveOwnFilesAndRemoveSession) {
  auto store = open_store();
  ASSERT_NE(store, nullptr);
  write_plain(store->snapshot_path("a").value(), "1");
  write_plain(store->temp_path("a").value(), "2");
  write_plain(store->snapshot_path("ab").value(), "3");
  ASSERT_TRUE(store->remove("a").ok());
  EXPECT_FALSE(exists(store->snapshot_path("a").value()));
  EXPECT_TRUE(exists(store->snapshot_path("ab").value())) << "a prefix is not the session";
  EXPECT_TRUE(store->remove("never-saved").ok());
  ASSERT_TRUE(store->remove_own_files().ok());
  EXPECT_EQ(names_in(dir_), std::set<std::string>({"siesta-" + store->nonce() + ".lock"}));
}

TEST_F(SnapshotStoreTest, DiskBytesCountsOnlyThisProcesssFiles) {
  auto other = open_store();
  ASSERT_NE(other, nullptr);
  write_plain(other->snapshot_path("s").value(), std::string(1000, 'x'));
  auto store = open_store();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->disk_bytes().value(), 0u);
  write_plain(store->snapshot_path("a").value(), std::string(100, 'x'));
  write_plain(store->temp_path("b").value(), std::string(20, 'x'));
  EXPECT_EQ(store->disk_bytes().value(), 120u);
}

// ---------------------------------------------------------------------------------------------
// Retiring a used snapshot, and what else may sit under its name.

TEST_F(SnapshotStoreTest, RetireFreesTheNameAtOnceAndRemoveRetiredTakesTheFileLater) {
  auto store = open_store();
  ASSERT_NE(store, nullptr);
  const std::string snapshot = store->snapshot_path("s").value();
  write_plain(snapshot, "used");
  SIESTA_ASSERT_OK_AND_ASSIGN(const std::string retired, store->retire("s"));
  EXPECT_FALSE(exists(snapshot)) << "the name is free for the next save";
  EXPECT_THAT(retired, StartsWith(snapshot + ".tmp-"));
  EXPECT_TRUE(exists(retired));
  EXPECT_EQ(store->disk_bytes().value(), 4u) << "a retired file still counts until removed";
  SIESTA_ASSERT_OK(store->remove_retired(retired));
  EXPECT_FALSE(exists(retired));
  EXPECT_EQ(store->retire("s").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->remove_retired(retired).code(), StatusCode::kNotFound);
}

TEST_F(SnapshotStoreTest, RemoveRetiredTakesOnlyThisStoresTemporaries) {
  auto other = open_store();
  auto store = open_store();
  ASSERT_NE(store, nullptr);
  ASSERT_NE(other, nullptr);
  const std::vector<std::string> refused = {
      store->snapshot_path("s").value(),   // a snapshot, not a temporary
      other->temp_path("s").value(),       // another owner's
      temp_.file("elsewhere.snap.tmp-1"),  // outside the directory
      dir_ + "/siesta-" + store->nonce() + ".lock",
      dir_ + "/../x",
  };
  for (const std::string& path : refused) {
    write_plain(path, "keep");
    EXPECT_EQ(store->remove_retired(path).code(), StatusCode::kInvalidArgument) << path;
    EXPECT_TRUE(exists(path)) << path;
  }
}

// A directory planted under the snapshot's name used to be renamed to ".tmp-N" by the retire
// and then outlived the unlink meant for a file. Now it is not carried along, and the removal
// that follows takes it (when empty).
TEST_F(SnapshotStoreTest, ADirectoryPlantedInPlaceOfTheSnapshotIsNotLeftBehind) {
  auto store = open_store();
  ASSERT_NE(store, nullptr);
  const std::string snapshot = store->snapshot_path("s").value();
  ASSERT_EQ(::mkdir(snapshot.c_str(), 0700), 0);
  auto retired = store->retire("s");
  EXPECT_EQ(retired.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(retired.status().message(), HasSubstr("is not a regular file"));
  EXPECT_TRUE(exists(snapshot)) << "nothing renamed";
  SIESTA_ASSERT_OK(store->remove("s"));
  EXPECT_EQ(names_in(dir_), std::set<std::string>({"siesta-" + store->nonce() + ".lock"}))
      << "no directory left, under any name";
  // A FIFO (or a symlink) is not carried along either, and goes the same way.
  ASSERT_EQ(::mkfifo(snapshot.c_str(), 0600), 0);
  EXPECT_EQ(store->retire("s").status().code(), StatusCode::kFailedPrecondition);
  SIESTA_ASSERT_OK(store->remove("s"));
  EXPECT_FALSE(exists(snapshot));
}

// Expiries are the store's to read (through the format module): no option needed. A FIFO
// under a live owner's snapshot name must not stall the start-up that looks at it.
TEST_F(SnapshotStoreTest, StartUpReadsExpiriesItselfAndAFifoDoesNotStallIt) {
  SnapshotStore::Options live_options;
  live_options.keep_files_on_close = true;
  auto live = open_store(live_options);
  ASSERT_NE(live, nullptr);
  const std::string fifo = live->snapshot_path("fifo").value();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  write_plain(live->snapshot_path("text").value(), "not a snapshot");
  std::unique_ptr<SnapshotStore> store;
  EXPECT_TRUE(test_util::finishes_without_blocking(fifo, [&] { store = open_store(); }))
      << "start-up blocked on a FIFO";
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->startup_cleanup().removed_expired_files, 0u);
  EXPECT_EQ(store->startup_cleanup().failures, 0u);
  EXPECT_TRUE(exists(fifo)) << "a live owner's unreadable file is left to it";
}

// ---------------------------------------------------------------------------------------------
// Faults.

TEST_F(SnapshotStoreTest, AFailedRemovalDuringCleanupIsCountedNotFatal) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  plant_dead_owner();
  const FsFaultPlan plan{FsOp::kRemove, 1, FsFaultKind::kIoError, false};
  FaultyFileSystem faulty(fs_, plan);
  auto store = open_store_on(faulty, {});
  ASSERT_NE(store, nullptr);
  const SnapshotStore::CleanupReport& report = store->startup_cleanup();
  EXPECT_EQ(report.failures, 1u);
  EXPECT_EQ(report.removed_dead_owner_files, 2u);
  ASSERT_EQ(report.failure_messages.size(), 1u);
  EXPECT_THAT(report.failure_messages[0], HasSubstr("injected"));
  EXPECT_THAT(report.failure_messages[0], HasSubstr(plan.describe()));
  EXPECT_EQ(faulty.counters().held_locks, 1) << "only its own lock is held after open";
  store.reset();
  EXPECT_EQ(faulty.counters().held_locks, 0);
  EXPECT_EQ(faulty.counters().open_files, 0);
}

TEST_F(SnapshotStoreTest, AFailedLockProbeLeavesThatOwnersFilesAlone) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  plant_dead_owner();
  // Lock call 1 is the store's own lock; call 2 probes the dead owner.
  FaultyFileSystem faulty(fs_, {FsOp::kLock, 2, FsFaultKind::kIoError, false});
  auto store = open_store_on(faulty, {});
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->startup_cleanup().failures, 1u);
  EXPECT_EQ(store->startup_cleanup().removed_dead_owner_files, 0u);
  EXPECT_TRUE(exists(dir_ + "/siesta-" + kDeadNonce + "-s1.snap"));
}

TEST_F(SnapshotStoreTest, AFailedOwnLockFailsOpenAndRemovesNothing) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  plant_dead_owner();
  FaultyFileSystem faulty(fs_, {FsOp::kLock, 1, FsFaultKind::kIoError, false});
  auto store = SnapshotStore::open(faulty, clock_, dir_, {});
  EXPECT_EQ(store.status().code(), StatusCode::kIoError);
  EXPECT_THAT(store.status().message(), HasSubstr("injected"));
  EXPECT_TRUE(exists(dir_ + "/siesta-" + kDeadNonce + "-s1.snap"));
  EXPECT_EQ(faulty.counters().held_locks, 0);
}

TEST_F(SnapshotStoreTest, ARemoveFailureIsReportedAndTheOtherFilesStillGo) {
  FaultyFileSystem faulty(fs_);
  auto store = open_store_on(faulty, {});
  ASSERT_NE(store, nullptr);
  write_plain(store->snapshot_path("a").value(), "1");
  write_plain(store->temp_path("a").value(), "2");
  const FsFaultPlan plan{FsOp::kRemove, 1, FsFaultKind::kIoError, false};
  faulty.set_plan(plan);
  Status status = store->remove("a");
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_THAT(status.message(), HasSubstr("injected"));
  EXPECT_EQ(faulty.counters().of(FsOp::kRemove), 2u) << "the second file was still tried";
  EXPECT_EQ(store->disk_bytes().value(), 1u) << "one of the two is left";
  faulty.set_plan({FsOp::kSyncDirectory, 1, FsFaultKind::kIoError, false});
  EXPECT_EQ(store->remove_own_files().code(), StatusCode::kIoError) << "a failed sync counts";
}

}  // namespace
}  // namespace siesta
